"""Link prediction in the sampled algorithms: distributed minibatches against one process
on real ranks, no held-out or target edge in any block, minibatch evaluation with every
neighbour against full batch, and the algorithms that refuse task=link."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gnnrun.algorithms import check_runnable
from gnnrun.errors import GnnrunError
from gnnrun.tasks import load_for_task
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import link_checks  # noqa: E402
from conftest import make_config  # noqa: E402


@pytest.mark.parametrize(
    "nprocs", [2, pytest.param(4, marks=pytest.mark.slow)]
)  # 4 ranks: make test-slow
def test_owners_build_one_process_link_minibatches_without_target_edges(
    configure, shared_datasets, nprocs
):
    cfg = configure(
        "dataset=cora", "task=link", "algorithm=minibatch", f"cluster.nprocs={nprocs}",
        "algorithm.fanouts=[5,5]", "algorithm.batch_size=256", "task.num_negatives=3",
    )  # fmt: skip
    results = run_on_ranks(link_checks.link_epoch_checks, nprocs, cfg)
    train_edges = 4488  # Cora's 5,278 pairs, 5% and 10% held out (seed 0)
    assert_checked(results, train_edges)


def test_owners_build_one_process_minibatches_of_a_target_relation(configure):
    """A heterogeneous graph, `writes` as the target: the same checks, typed features and
    relations included; its held-out edges and their `rev_writes` twins in no block."""
    cfg = configure(
        "dataset=synthetic-hetero-tiny", "task=link", "task.relation=writes", "model=rgcn",
        "algorithm=minibatch", "cluster.nprocs=2", "algorithm.fanouts=[4,3]",
        "algorithm.batch_size=512", "task.negatives=degree", "task.num_negatives=2",
    )  # fmt: skip
    results = run_on_ranks(link_checks.link_epoch_checks, 2, cfg)
    dataset = load_for_task(cfg.dataset, cfg.task)
    assert_checked(results, dataset.link_train.shape[1])


def assert_checked(results: list[dict], train_edges: int) -> None:
    assert sum(r["positives"] for r in results) >= train_edges
    assert all(r["steps"] == results[0]["steps"] for r in results)
    assert all(r["edges"] > 0 and r["targets_in_graph"] > 0 for r in results)
    assert any(r["remote_inputs"] > 0 for r in results), "the test must involve remote vertices"


@pytest.mark.parametrize(
    "graph",
    [
        ("dataset=cora",),
        ("dataset=synthetic-hetero-tiny", "task.relation=cites", "model=rgcn"),
    ],
)
def test_evaluation_with_every_neighbour_scores_as_full_batch(configure, shared_datasets, graph):
    """With fanout -1 the minibatch evaluation's embeddings are the full graph's, so the
    held-out edges and their negatives score as in full batch, for both scorers."""
    from gnnrun.algorithms.single import Single
    from gnnrun.comm import Communicator
    from gnnrun.models import build_model
    from gnnrun.timers import PhaseTimer

    for scorer in ("dot", "mlp"):
        common = (*graph, "task=link", "algorithm=single", f"task.scorer={scorer}")
        common += ("task.eval_negatives=50", "algorithm.fanouts=[-1,-1]", "model.hidden=32")
        full = Single(configure(*common, "algorithm.mode=full"), Communicator(), PhaseTimer())
        sampled = Single(configure(*common), Communicator(), PhaseTimer())
        torch.manual_seed(0)
        model = build_model(
            full.cfg.model, full.in_dim, full.num_classes, full.schema, scorer=scorer
        )
        exact, minibatch = full.evaluate(model), sampled.evaluate(model)
        for split in ("val", "test"):
            assert exact[split][1].shape == (full.objective.eval_ids[split].numel(), 50)
            for a, b in zip(exact[split], minibatch[split], strict=True):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("algorithm=cd0",), "algorithm=cd0 does not train task=link: choose algorithm= one of"),
        (("algorithm=hec",), "algorithm=hec does not train task=link"),
        (("algorithm=sar",), "algorithm=sar does not train task=link"),
    ],
)
def test_algorithms_without_link_prediction_refuse_it(overrides, message):
    with pytest.raises(GnnrunError, match=message):
        check_runnable(make_config("task=link", *overrides))


@pytest.mark.slow  # two 2-rank runs, 10 s: make test-slow
def test_pipeline_trains_link_prediction_exactly_as_minibatch(configure, shared_datasets, tmp_path):
    """The pipeline builds each link step (negatives, blocks without the target edges,
    features) ahead in threads: both ranks' losses and figures equal `minibatch`'s."""
    import json

    from gnnrun.launch.elastic import run_ranks

    def trajectories(algorithm: str) -> list[list[tuple]]:
        run_dir = tmp_path / algorithm
        run_dir.mkdir()
        cfg = configure(
            "dataset=cora", "task=link", f"algorithm={algorithm}", "cluster.nprocs=2",
            "model.hidden=32", "algorithm.batch_size=512", "train.epochs=2", "train.eval_every=2",
            "task.eval_negatives=100",
            "task.negatives=degree", "task.loss=margin", "task.scorer=mlp",
            f"train.checkpoint_dir={tmp_path}/checkpoints/{algorithm}",
        )  # fmt: skip
        run_ranks(cfg, run_dir)
        return [
            [
                (r["loss"], r.get("val_mrr"), r.get("test_hits@10"), r.get("test_auc"))
                for r in map(json.loads, (run_dir / f"metrics.rank{rank}.jsonl").open())
            ]
            for rank in range(2)
        ]

    minibatch = trajectories("minibatch")
    assert minibatch == trajectories("pipeline")
    assert minibatch[0][-1][0] < minibatch[0][0][0]  # the margin loss falls


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("dataset=synthetic-hetero-tiny",), "is heterogeneous: name the relation whose edges"),
        (
            ("dataset=synthetic-hetero-tiny", "task.relation=write"),
            r"task.relation=write is not a relation of synthetic-hetero-tiny \(did you mean writes\?\)",
        ),
        (("dataset=synthetic-tiny", "task.relation=writes"), "synthetic-tiny is homogeneous"),
    ],
)
def test_a_target_relation_is_named_exactly_where_there_are_relations(
    configure, overrides, message
):
    with pytest.raises(GnnrunError, match=message):
        configure(*overrides, "task=link", "algorithm=single")
