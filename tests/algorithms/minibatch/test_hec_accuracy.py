"""DistGNN-MB's claim: `hec` reaches test accuracy within 1 point of `minibatch` (exact).

Both train the same model for the same epochs from the same seeds with the
same per-rank batch; the accuracy compared is the test accuracy at the epoch
of best validation accuracy, averaged over seeds. Evaluation is exact for both
(gnnrun/algorithms/minibatch/hec.py), so the difference is what training on local
minibatches with cached halo embeddings costs. All runs of one (dataset,
ranks) pair go through one launch whose ranks call `train` once per config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
from accuracy_runs import summaries_per_algorithm  # noqa: E402

ALGORITHMS = ("minibatch", "hec")


def mean_test_accuracy(configure, tmp_path, dataset, nprocs, epochs, seeds, *overrides) -> dict:
    runs_of = summaries_per_algorithm(
        configure,
        tmp_path,
        ALGORITHMS,
        dataset,
        nprocs,
        epochs,
        seeds,
        "model=sage",
        "algorithm.batch_size=256",
        *overrides,
    )
    print(f"\n{dataset} on {nprocs} ranks, {epochs} epochs:")
    means = {}
    for algorithm, runs in runs_of.items():
        best = [run["best"]["test_acc"] for run in runs]
        print(
            f"  {algorithm:>9}: test accuracy at best val {np.round(best, 4).tolist()} "
            f"mean {np.mean(best):.4f}; MB sent per epoch {runs[0]['bytes_per_epoch_rank0'] / 1e6:.2f}"
            + (
                f"; hit rate per layer {np.round(runs[0]['hit_rate'], 3).tolist()}"
                if "hit_rate" in runs[0]
                else ""
            )
        )
        means[algorithm] = float(np.mean(best))
        means[f"{algorithm}_bytes"] = float(np.mean([r["bytes_per_epoch_rank0"] for r in runs]))
    return means


@pytest.mark.slow  # the exactness of hec's pushes and loads is in tests/algorithms/minibatch/test_hec.py
def test_hec_learns_like_minibatch_on_synthetic(configure, tmp_path):
    # Bytes are not compared here: on 2,000 vertices every halo fits in one push
    # (push_limit 2000), so hec pushes more than minibatch pulls; the slow tests
    # and scripts/bench_hec.py compare them at sizes where the limit binds.
    means = mean_test_accuracy(
        configure,
        tmp_path,
        "synthetic-tiny",
        2,
        20,
        1,
        "model.hidden=32",
        "algorithm.batch_size=32",
    )
    assert means["minibatch"] > 0.85
    assert means["hec"] >= means["minibatch"] - 0.01, means


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.parametrize(("dataset", "epochs"), [("synthetic-small", 10), ("facebook", 20)])
def test_hec_within_one_point_of_minibatch(
    configure, tmp_path, shared_datasets, dataset, epochs, nprocs
):
    means = mean_test_accuracy(configure, tmp_path, dataset, nprocs, epochs, 3)
    # Within 1 point below minibatch (being better is allowed).
    assert means["hec"] >= means["minibatch"] - 0.01, means


def bytes_per_epoch(configure, tmp_path, nprocs, dataset, *overrides) -> dict[str, float]:
    """One epoch of each algorithm with the papers' minibatch preset (sage_products: batch
    1000, 3 layers, fanouts 15/10/5); training bytes rank 0 sent, by algorithm."""
    runs_of = summaries_per_algorithm(
        configure, tmp_path, ALGORITHMS, dataset, nprocs, 1, 1, "model=sage_products", *overrides
    )
    sent = {a: runs[0]["bytes_per_epoch_rank0"] for a, runs in runs_of.items()}
    print(
        f"\n{dataset}, {nprocs} ranks, MB per epoch: {sent}; fewer by {sent['minibatch'] / sent['hec']:.2f}x"
    )
    return sent


@pytest.mark.slow
def test_hec_sends_fewer_bytes_than_minibatch(configure, tmp_path):
    # hec's pushes have a fixed budget (push_limit rows per layer, peer and minibatch)
    # whatever the graph; minibatch pulls what its minibatches reach. On synthetic-small
    # the budget undercuts the pulls on 2 ranks (1.25x fewer) but not on 4 (0.63x: 3
    # peers' budgets, 2 minibatches per epoch); the test below checks the 3x target
    # where the benchmark measures it.
    sent = bytes_per_epoch(configure, tmp_path, 2, "synthetic-small")
    assert sent["hec"] < sent["minibatch"], sent


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 4])
def test_hec_sends_3x_fewer_bytes_on_synthetic_medium(configure, tmp_path, nprocs):
    # scripts/bench_hec.py's dataset: synthetic-medium with small evaluation splits.
    sent = bytes_per_epoch(
        configure,
        tmp_path,
        nprocs,
        "synthetic-medium",
        "dataset.name=synthetic-medium-bench",
        "dataset.split.val=0.02",
        "dataset.split.test=0.05",
    )
    assert sent["minibatch"] >= 3 * sent["hec"], sent
