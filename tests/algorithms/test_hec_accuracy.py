"""DistGNN-MB's claim: `hec` reaches test accuracy within 1 point of `minibatch` (exact).

Both train the same model for the same epochs from the same seeds with the
same per-rank batch; the accuracy compared is the test accuracy at the epoch
of best validation accuracy, averaged over seeds. Evaluation is exact for both
(gnnrun/algorithms/hec.py), so the difference is what training on local
minibatches with cached halo embeddings costs. All runs of one (dataset,
ranks) pair go through one launch whose ranks call `train` once per config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

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
        "model.batch_size=256",
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


def test_hec_learns_like_minibatch_on_synthetic(configure, tmp_path):
    # Bytes are not compared here: on 2,000 vertices every halo fits in one push
    # (push_limit 2000), so hec pushes more than minibatch pulls; the slow tests
    # and scripts/bench_hec.py compare them at sizes where the limit binds.
    means = mean_test_accuracy(
        configure, tmp_path, "synthetic-tiny", 2, 20, 1, "model.hidden=32", "model.batch_size=32"
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
    assert means["hec_bytes"] < means["minibatch_bytes"], means
