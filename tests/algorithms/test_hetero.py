"""Heterogeneous graphs in the minibatch algorithms: distributed sampling on real ranks
against one process, consistent weights after combining sparse embedding gradients,
and the refusals of the algorithms that train homogeneous graphs only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnrun.algorithms import check_dataset
from gnnrun.cli import main
from gnnrun.data import prepare_dataset
from gnnrun.errors import GnnrunError
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import hetero_checks  # noqa: E402

TINY = "dataset=synthetic-hetero-tiny"


@pytest.mark.parametrize(
    "nprocs", [pytest.param(2, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)]
)  # make test-slow (the default suite keeps under 10 minutes)
def test_owners_sample_heterogeneous_blocks_exactly(configure, nprocs, tmp_path):
    """Per-relation sampling by the owners gives one process's blocks, relations, vertex
    types and typed features bit for bit; every sampled edge exists with its relation and
    no relation exceeds its fanout; every rank ends an epoch with the same weights; and
    `pipeline`, its minibatches built ahead by threads, trains exactly as `minibatch`
    with the trainer (sparse embedding gradients combined across ranks)."""
    common = (TINY, "algorithm=minibatch", f"cluster.nprocs={nprocs}", "model=rgcn")
    sampled = [
        configure(*common, "algorithm.fanouts=[4,3]", "+algorithm.relation_fanouts.cites=[2,1]"),
        # Two featured types of other widths and a featureless one: one exchange per type.
        configure(
            "dataset=custom",
            f"dataset.path={write_two_featured_types(tmp_path)}",
            "dataset.name=two-featured",
            *common[1:],
            "algorithm.fanouts=[3,2]",
        ),  # fmt: skip
    ]
    trained = configure(*common, "algorithm.batch_size=256", "model.hidden=16")
    runs = [
        configure(
            TINY,
            "model=rgcn",
            f"algorithm={algorithm}",
            f"cluster.nprocs={nprocs}",
            "train.epochs=2",
            "train.eval_every=1",
            "model.hidden=16",
            "algorithm.batch_size=64",
            f"train.checkpoint_dir={tmp_path}/checkpoints/{algorithm}",
        )  # fmt: skip
        for algorithm in ("minibatch", "pipeline")
    ]
    results = run_on_ranks(
        hetero_checks.hetero_checks_and_runs, nprocs, sampled, trained, runs, str(tmp_path)
    )
    samples, weights = zip(*results, strict=True)
    synthetic, two_featured = zip(*samples, strict=True)
    assert all(r["edges"] > 0 for r in synthetic + two_featured)
    assert all(len(r["relations"]) == 8 for r in synthetic), "every relation must be sampled"
    assert all(r["input_types"] == [0, 1, 2, 3] for r in synthetic)
    assert all(len(r["relations"]) == 6 and r["featured_types"] == [0, 1] for r in two_featured)
    for kind in (synthetic, two_featured):
        assert any(r["remote_inputs"] > 0 for r in kind), "the test must involve remote vertices"
    assert all(w == weights[0] for w in weights[1:])
    for rank in range(nprocs):
        minibatch = trajectory(tmp_path / "run0", rank)
        assert minibatch == trajectory(tmp_path / "run1", rank)
        assert minibatch[-1][0] < minibatch[0][0]  # the loss falls
        assert minibatch[-1][2] > 1 / 8  # test accuracy above chance (8 classes; 10-20 steps)


def write_two_featured_types(folder) -> str:
    """A custom heterogeneous graph whose papers (12 features) and authors (5) have
    features and whose venues have none; 3 relations and their reverses."""
    rng = np.random.default_rng(0)
    papers, authors, venues = 300, 200, 10
    label = rng.integers(0, 4, papers)
    path = folder / "two_featured.npz"
    np.savez(
        path,
        node_types=np.array(["paper", "author", "venue"]),
        target=np.array("paper"),
        feat__paper=rng.normal(size=(papers, 12)) + label[:, None],
        feat__author=rng.normal(size=(authors, 5)),
        num_nodes__venue=np.array(venues),
        label=label,
        edge_index__author__writes__paper=np.stack(
            [rng.integers(0, authors, 1200), rng.integers(0, papers, 1200)]
        ),
        edge_index__paper__cites__paper=rng.integers(0, papers, (2, 900)),
        edge_index__paper__published_in__venue=np.stack(
            [np.arange(papers), rng.integers(0, venues, papers)]
        ),
    )
    return str(path)


def trajectory(run_dir, rank: int) -> list[tuple]:
    """Per epoch: the training loss and the evaluated accuracies."""
    records = (run_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()
    return [(r["loss"], r.get("val_acc"), r.get("test_acc")) for r in map(json.loads, records)]


@pytest.mark.parametrize("algorithm", ["hec", "cd0", "sar", "spmm1d"])
def test_homogeneous_only_algorithms_refuse_before_partitioning(
    tmp_path, monkeypatch, capsys, algorithm
):
    monkeypatch.chdir(tmp_path)
    code = main(["train", TINY, f"algorithm={algorithm}", "model=gcn", "cluster.nprocs=2"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1
    assert f"algorithm={algorithm} trains homogeneous graphs only" in err
    assert "choose algorithm= one of minibatch, pipeline, single" in err
    assert not (tmp_path / "data" / "partitions").exists()


@pytest.mark.parametrize("partitioner", ["libra", "block1d"])
def test_partitions_without_types_are_refused(tmp_path, monkeypatch, capsys, partitioner):
    monkeypatch.chdir(tmp_path)
    code = main(["partition", TINY, f"partitioner={partitioner}", "partitioner.num_parts=2"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "do not carry vertex types" in err and "metis" in err


def test_relation_fanouts_are_checked_against_the_relations(configure):
    sampled = ("algorithm=single", "algorithm.mode=minibatch")
    cfg = configure(TINY, *sampled, "model=rgcn", "+algorithm.relation_fanouts.cite=[2,2]")
    with pytest.raises(GnnrunError, match="'cite'.*did you mean cites"):
        check_dataset(cfg, prepare_dataset(cfg.dataset))
    homogeneous = configure(
        "dataset=synthetic-tiny", *sampled, "+algorithm.relation_fanouts.x=[2,2]"
    )
    with pytest.raises(GnnrunError, match="homogeneous"):
        check_dataset(homogeneous, prepare_dataset(homogeneous.dataset))


def test_unprojected_input_needs_one_feature_width(configure):
    cfg = configure(TINY, "algorithm=single", "model=rgcn", "model.input_projection=false")
    check_dataset(cfg, prepare_dataset(cfg.dataset))  # one featured type: its own width


def test_block_diagonal_blocks_must_divide_every_width(configure):
    cfg = configure(
        TINY, "algorithm=single", "model=rgcn", "model.decomposition=block_diagonal",
        "model.num_blocks=3",
    )  # fmt: skip
    with pytest.raises(GnnrunError, match=r"num_blocks=3 must divide.*64 -> 64 -> 8"):
        check_dataset(cfg, prepare_dataset(cfg.dataset))
    fits = configure(TINY, "algorithm=single", "model=rgcn", "model.decomposition=block_diagonal")
    check_dataset(fits, prepare_dataset(fits.dataset))  # 4 blocks divide 64 and 8
