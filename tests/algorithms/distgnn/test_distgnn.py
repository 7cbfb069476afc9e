"""DistGNN cd0 / cdr / zero_comm on real ranks: exact against `single`, and DRPA's delay semantics."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gnnrun.algorithms.distgnn.distgnn import CDR, training_clones
from gnnrun.algorithms.distgnn.drpa import CloneTree, DelayedRemoteAggregates
from gnnrun.comm import Communicator
from gnnrun.errors import GnnrunError
from gnnrun.partition.book import Part
from gnnrun.testing import run_on_ranks
from gnnrun.timers import PhaseTimer

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402
from conftest import make_config  # noqa: E402

EPOCHS = 3
SMALL_MODEL = ("model.hidden=48", "model.dropout=0", "model.input_dropout=0")
OPTIONS = "gcn model.residual=true model.norm=layer model.input_mlp=true model.jk=cat"
# Platonov et al.'s pre-normalised residual block (its SAGE message: the row and the mean).
PRE_NORM = "sage model.block=pre_norm_ffn model.norm=layer model.activation=gelu"
# Far below the gradients' norm: every step is clipped.
CLIPPED = "sage_gcn optimizer.clip_norm=0.01"


def _assert_matches_single(distributed: list[dict], single: dict) -> None:
    for epoch, reference in enumerate(single["epochs"]):
        for rank_result in distributed:
            got = rank_result["epochs"][epoch]
            assert got["loss"] == pytest.approx(reference["loss"], rel=1e-5, abs=1e-6)
            for g, ref in zip(got["grads"], reference["grads"], strict=True):
                torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-6)
    # The logits come after the last update. Adam divides each gradient entry by its running
    # scale, so the rounding of entries near zero moves weights by more than rounding: on an
    # AMD EPYC the pre-normalised block's logits (of magnitude 1) differed by 2.2e-5 after
    # three epochs whose losses and gradients matched to rounding.
    for rank_result in distributed:
        torch.testing.assert_close(
            rank_result["logits"], single["logits"][rank_result["nodes"]], rtol=1e-4, atol=1e-4
        )


@pytest.mark.parametrize(
    ("dataset", "nprocs", "models"),
    [
        # One rank: one part holding every edge, nothing split; cd0 is single exactly.
        ("synthetic-tiny", 1, ["sage_gcn"]),
        # 2 and 4 ranks on synthetic-tiny repeat what cora runs (slow: for machines without it).
        pytest.param("synthetic-tiny", 2, ["sage_gcn"], marks=pytest.mark.slow),
        pytest.param("synthetic-tiny", 3, ["sage_gcn", "gcn", "sage"], marks=pytest.mark.slow),
        pytest.param("synthetic-tiny", 4, ["sage_gcn"], marks=pytest.mark.slow),
        # Every model by default (one with its gradients clipped after the ranks sum them),
        # and one with every option around the layers.
        ("cora", 2, ["sage_gcn", "gcn", "sage", CLIPPED]),
        pytest.param("cora", 2, [OPTIONS, PRE_NORM], marks=pytest.mark.slow),
        pytest.param("cora", 4, ["sage_gcn"], marks=pytest.mark.slow),
    ],
)
def test_cd0_equals_single_full_batch(configure, request, dataset, nprocs, models):
    if dataset == "cora":
        request.getfixturevalue("shared_datasets")
    cfgs, singles = [], []
    for model in models:
        common = (f"dataset={dataset}", *f"model={model}".split(), *SMALL_MODEL)
        cfgs.append(configure(*common, "algorithm=cd0", f"cluster.nprocs={nprocs}"))
        single_cfg = configure(*common, "algorithm=single", "algorithm.mode=full")
        singles.append(rank_checks.single_trajectory(single_cfg, EPOCHS))
    per_rank = run_on_ranks(rank_checks.distgnn_trajectories, nprocs, cfgs, EPOCHS)
    for m, (model, single) in enumerate(zip(models, singles, strict=True)):
        distributed = [rank_results[m] for rank_results in per_rank]
        split_bytes = sum(r["epochs"][0]["bytes"].get("drpa", 0) for r in distributed)
        assert (split_bytes > 0) == (nprocs > 1), (
            f"{model}: {nprocs} parts must have split vertices if and only if there are several"
        )
        _assert_matches_single(distributed, single)


@pytest.mark.slow  # make test-slow (the default suite keeps under 10 minutes)
def test_cdr_limits_and_bytes(configure):
    """cdr with delay 0 is cd0 (gradients completed by autograd or delayed alike); with a
    delay beyond the run it is zero_comm; bins divide bytes."""
    common = ("dataset=synthetic-tiny", "model=sage_gcn", *SMALL_MODEL, "cluster.nprocs=2")
    epochs = 4
    cfgs = [
        configure(*common, "algorithm=cd0"),
        configure(*common, "algorithm=cdr", "algorithm.delay_epochs=0"),
        configure(
            *common, "algorithm=cdr", "algorithm.delay_epochs=0", "algorithm.backward=delayed"
        ),
        configure(*common, "algorithm=zero_comm"),
        configure(*common, "algorithm=cdr", f"algorithm.delay_epochs={epochs + 1}"),
        configure(*common, "algorithm=cdr", "algorithm.delay_epochs=1", "algorithm.bins=4"),
        configure(
            *common,
            "algorithm=cdr",
            "algorithm.delay_epochs=1",
            "algorithm.bins=4",
            "algorithm.backward=delayed",
        ),
    ]
    cd0, cdr0, cdr0_delayed, zero, cdr_late, cdr_binned, cdr_binned_delayed = zip(
        *run_on_ranks(rank_checks.distgnn_trajectories, 2, cfgs, epochs), strict=True
    )
    for same, other in ((cd0, cdr0), (cd0, cdr0_delayed), (zero, cdr_late)):
        for a, b in zip(same, other, strict=True):
            assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
            for ea, eb in zip(a["epochs"], b["epochs"], strict=True):
                assert all(torch.equal(x, y) for x, y in zip(ea["grads"], eb["grads"], strict=True))
            assert torch.equal(a["logits"], b["logits"])
    # Stale aggregates change training: cdr with a delay is neither cd0 nor zero_comm.
    assert cdr_binned[0]["epochs"][-1]["loss"] != cd0[0]["epochs"][-1]["loss"]
    for rank in range(2):
        full = cd0[rank]["epochs"][-1]["bytes"]
        binned = cdr_binned[rank]["epochs"][-1]["bytes"]
        binned_delayed = cdr_binned_delayed[rank]["epochs"][-1]["bytes"]
        # About 1/4 with 4 bins when gradients are exchanged too; autograd's
        # gradients of stale sums stay local, so it sends only the forward share.
        assert 0.15 < binned_delayed["drpa"] / full["drpa"] < 0.35
        assert 0.05 < binned["drpa"] / full["drpa"] < binned_delayed["drpa"] / full["drpa"]
        assert set(zero[rank]["epochs"][-1]["bytes"]) == {"allreduce"}
        assert binned["allreduce"] == full["allreduce"]


@pytest.mark.parametrize(
    ("overrides", "bins"),
    [
        ((), 5),
        (("algorithm.delay_epochs=3",), 3),
        (("algorithm.delay_epochs=0",), 1),
        (("algorithm.bins=2",), 2),
    ],
)
def test_cdr_bins_default_to_one_per_epoch_of_delay(overrides, bins):
    """As DistGNN's released code groups split vertices: each exchanges every delay epochs."""
    assert CDR.num_bins(make_config("algorithm=cdr", *overrides)) == bins


def test_every_clone_of_a_training_vertex_takes_its_share_of_the_loss():
    dataset = SimpleNamespace(num_nodes=6, train_idx=np.array([0, 2, 4]))
    nodes = np.array([0, 1, 2, 4, 5])  # this part's clones, by original id
    clones = torch.tensor([2, 1, 3, 1, 2])  # how many clones each of them has in all
    ids, weights = training_clones(dataset, nodes, clones)
    assert ids.tolist() == [0, 2, 3]
    torch.testing.assert_close(weights, torch.tensor([1 / 2, 1 / 3, 1.0]))


def test_zero_comm_trains_each_part_as_its_own_graph(configure):
    """0c: a split clone aggregates its part's edges and divides by its degree in the part."""
    models = ("sage_gcn", "gcn", "sage")
    cfgs = [
        configure(
            "dataset=synthetic-tiny",
            f"model={model}",
            *SMALL_MODEL,
            "algorithm=zero_comm",
            "cluster.nprocs=2",
        )
        for model in models
    ]
    per_rank = run_on_ranks(rank_checks.zero_comm_loss_and_parts_alone, 2, cfgs)
    for model, (loss, alone) in zip(models, per_rank[0], strict=True):
        assert loss == pytest.approx(alone, rel=1e-5), model


def _expected(rank: int, epoch: int, local: int, delay, bins: int, sign: float) -> float:
    """What DRPA must give: my value now plus the other clone's value sent `delay` epochs
    ago (or earlier, the last time its bin communicated); vertex 1 and 2 are not split."""

    def value(r: int, e: int) -> float:
        return sign * (1000.0 * (r + 1) + 10 * e + local)

    own = value(rank, epoch)
    if local == 1 or delay is None:
        return own
    vertex = {0: 0, 2: 3}[local]
    sent = [e for e in range(epoch - delay + 1) if e % bins == vertex % bins]
    return own + (value(1 - rank, max(sent)) if sent else 0.0)


def _expected_grad(rank: int, epoch: int, local: int, delay, bins: int, backward: str) -> float:
    """The gradient DRPA must give: completed like the forward pass (delayed), synchronously
    every epoch (exact), or, as the gradient of the forward pass (autograd), only by what
    was exchanged at this very epoch (delay 0, this epoch's bin)."""
    if backward == "delayed":
        return _expected(rank, epoch, local, delay, bins, -1.0)
    if backward == "exact":
        return _expected(rank, epoch, local, 0, 1, -1.0)
    vertex = {0: 0, 1: 1, 2: 3}[local]  # local 1 is not split: no completion either way
    fresh = delay == 0 and vertex % bins == epoch % bins
    return _expected(rank, epoch, local, 0 if fresh else None, 1, -1.0)


DRPA_CASES = [  # (delay, bins, backward)
    (0, 1, "delayed"),
    (1, 1, "delayed"),
    (3, 1, "delayed"),
    (0, 2, "delayed"),
    (2, 2, "delayed"),
    (None, 1, "delayed"),
    (3, 2, "exact"),
    (3, 2, "autograd"),
    (0, 2, "autograd"),
    (0, 1, "autograd"),
]
DRPA_EPOCHS = 7


@pytest.fixture(scope="module")
def drpa_runs() -> dict[tuple, list]:
    """Every case in one launch of two ranks (starting ranks costs more than the cases)."""
    per_rank = run_on_ranks(rank_checks.drpa_cases_on_hand_built_tree, 2, DRPA_CASES, DRPA_EPOCHS)
    return {case: [rank[c] for rank in per_rank] for c, case in enumerate(DRPA_CASES)}


@pytest.mark.parametrize(("delay", "bins", "backward"), DRPA_CASES)
def test_drpa_uses_what_was_sent_delay_epochs_ago(drpa_runs, delay, bins, backward):
    for rank, per_epoch in enumerate(drpa_runs[delay, bins, backward]):
        assert len(per_epoch) == DRPA_EPOCHS
        for epoch, got in enumerate(per_epoch):
            assert got["y"] == [_expected(rank, epoch, i, delay, bins, 1.0) for i in range(3)]
            assert got["grad"] == [
                _expected_grad(rank, epoch, i, delay, bins, backward) for i in range(3)
            ]


THREE_CLONE_CASES = [(0, 1), (2, 1), (3, 2), (5, 1)]  # (delay, bins)


def test_drpa_with_three_clones_adds_every_other_clone(tmp_path):
    """A split vertex with a clone on each of three ranks (a root and two leaves): each clone
    gets its own value now plus both other clones' values sent `delay` epochs ago (or earlier,
    the last time its bin communicated); the unsplit vertex keeps its own."""
    per_rank = run_on_ranks(rank_checks.drpa_on_three_clone_tree, 3, THREE_CLONE_CASES, DRPA_EPOCHS)

    def value(rank: int, epoch: int, local: int, sign: float) -> float:
        return sign * (1000.0 * (rank + 1) + 10 * epoch + local)

    for c, (delay, bins) in enumerate(THREE_CLONE_CASES):
        hidden = []
        for rank in range(3):
            for epoch, got in enumerate(per_rank[rank][c]):
                sent = [e for e in range(epoch - delay + 1) if e % bins == 0]  # vertex 0: bin 0
                for key, sign in (("y", 1.0), ("grad", -1.0)):
                    others = (
                        sum(value(r, max(sent), 0, sign) for r in range(3) if r != rank)
                        if sent
                        else 0.0
                    )
                    expected = [value(rank, epoch, 0, sign) + others, value(rank, epoch, 1, sign)]
                    assert got[key] == expected, (delay, bins, rank, epoch, key)
                # Both phases span the delay: phase 1 until the end of epoch
                # start + ceil(delay / 2) - 1, phase 2 from then until due.
                for started, phase in got["phases"]:
                    assert started + delay > epoch, (delay, epoch, started)
                    in_phase2 = epoch >= started + -(-delay // 2) - 1
                    assert phase == (2 if in_phase2 else 1), (delay, epoch, started, phase)
                if "comm_hidden" in got:  # the epochs in which an exchange finished
                    hidden.append(got["comm_hidden"])
        assert all(0.0 <= h <= 1.0 for h in hidden) and len(hidden) >= DRPA_EPOCHS - delay, hidden


RELEASED_CASES = [(2, 1, "released"), (3, 2, "released")]


def test_drpa_released_semantics_replaces_a_leaf_with_its_roots_total():
    """DistGNN's released cd-r on the three-clone tree: when vertex 0's bin falls due, the
    root (rank 1) adds both leaves' values sent `delay` epochs ago to its own now, and each
    leaf takes the total of all three clones' values sent then; at other epochs every clone
    keeps its own value."""
    per_rank = run_on_ranks(rank_checks.drpa_on_three_clone_tree, 3, RELEASED_CASES, DRPA_EPOCHS)

    def value(rank: int, epoch: int, local: int, sign: float) -> float:
        return sign * (1000.0 * (rank + 1) + 10 * epoch + local)

    for c, (delay, bins, _) in enumerate(RELEASED_CASES):
        for rank in range(3):
            for epoch, got in enumerate(per_rank[rank][c]):
                sent = epoch - delay
                for key, sign in (("y", 1.0), ("grad", -1.0)):
                    own = value(rank, epoch, 0, sign)
                    if sent < 0 or sent % bins != 0:  # vertex 0 is in bin 0
                        expected = own
                    elif rank == 1:
                        expected = own + sum(value(r, sent, 0, sign) for r in (0, 2))
                    else:
                        expected = sum(value(r, sent, 0, sign) for r in range(3))
                    assert got[key] == [expected, value(rank, epoch, 1, sign)], (
                        delay,
                        bins,
                        rank,
                        epoch,
                        key,
                    )


def test_cdr_state_from_an_older_layout_is_refused_with_the_fix():
    arrays = {"nodes": np.arange(3), "root_part": np.zeros(3), "clone_links": np.zeros((0, 3))}
    tree = CloneTree(Part(0, 1, "vertex_cut", arrays, {}), 0, 1)
    drpa = DelayedRemoteAggregates(tree, Communicator(), PhaseTimer(), 5)
    drpa.load_state_dict(drpa.state_dict())  # its own layout loads
    old = {("fwd", 0): {"remote": torch.zeros(0, 4), "pending": []}}
    with pytest.raises(GnnrunError, match="older gnnrun.*without train.resume"):
        drpa.load_state_dict(old)
    # `local` was autograd's name: its runs resume where gradients match (delay > 0) ...
    renamed = {**drpa.state_dict(), "settings": {"delay": 5, "bins": 1, "backward": "local"}}
    drpa.load_state_dict(renamed)
    # ... and not at delay 0, where autograd completes this epoch's gradients.
    binned_cd0 = DelayedRemoteAggregates(tree, Communicator(), PhaseTimer(), 0, 1)
    renamed["settings"]["delay"] = 0
    with pytest.raises(GnnrunError, match="algorithm.backward=local"):
        binned_cd0.load_state_dict(renamed)


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("gat", "GAT's edge softmax is not completed across clones"),
        ("rgcn", "it models heterogeneous graphs (an aggregate per relation)"),
        ("hetero_sage", "it models heterogeneous graphs (an aggregate per relation)"),
    ],
)
def test_a_model_cd0_cannot_train_is_refused_for_its_own_reason(model, reason):
    cfg = SimpleNamespace(model=SimpleNamespace(name=model), algorithm=SimpleNamespace(name="cd0"))
    with pytest.raises(GnnrunError) as refused:
        CDR.check_config(cfg)
    assert f"not {model!r}: {reason}" in str(refused.value)
    assert model == "gat" or "GAT" not in str(refused.value)
