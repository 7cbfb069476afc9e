"""DistGNN's claim: cdr (delay 5) and zero_comm reach test accuracy within 1 point of cd0.

Accuracy is the test accuracy at the epoch of best validation accuracy (every
epoch is evaluated), the usual model selection. On Cora the models peak within
about 30 epochs and then overfit its 140 training labels; after that, the
last epoch's test accuracy mostly measures how an overfit model drifts, and
cdr's stale aggregates make it drift more (README, DistGNN section). One
seed's accuracy varies by up to a few points, so means over seeds are compared. All
runs of one (dataset, ranks) pair go through one launch whose ranks call
`train` once per config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
from accuracy_runs import summaries_per_algorithm  # noqa: E402

ALGORITHMS = ("cd0", "cdr", "zero_comm")


def mean_test_accuracy(configure, tmp_path, dataset, nprocs, epochs, seeds, *model) -> dict:
    runs_of = summaries_per_algorithm(
        configure, tmp_path, ALGORITHMS, dataset, nprocs, epochs, seeds, *model
    )
    print(f"\n{dataset} on {nprocs} ranks, {epochs} epochs, test accuracy per seed:")
    means = {}
    for algorithm, runs in runs_of.items():
        best = [run["best"]["test_acc"] for run in runs]
        final = [run["final"]["test_acc"] for run in runs]
        print(
            f"  {algorithm:>9}: at best val {np.round(best, 4).tolist()} mean {np.mean(best):.4f}"
            f" (epochs {[run['best']['epoch'] for run in runs]}); "
            f"last epoch {np.round(final, 4).tolist()} mean {np.mean(final):.4f}"
        )
        means[algorithm] = float(np.mean(best))
    return means


def test_approximate_algorithms_learn_like_cd0_on_synthetic(configure, tmp_path):
    means = mean_test_accuracy(
        configure, tmp_path, "synthetic-tiny", 2, 20, 1, "model=sage_gcn", "model.hidden=32"
    )
    assert means["cd0"] > 0.85
    for algorithm in ("cdr", "zero_comm"):
        assert means[algorithm] >= means["cd0"] - 0.01


@pytest.mark.slow
# 200 epochs: what DistGNN trains for its claim on 2 and 4 sockets (Table 5). One
# seed's accuracy spreads over up to 4 points on Cora (1,000 test vertices, 140
# training labels) and about 0.5 on Facebook, so Cora takes 10 seeds (a mean's
# noise 1.8x smaller than with 3); its runs are short.
@pytest.mark.parametrize(
    ("dataset", "seeds", "nprocs"),
    [
        ("cora", 10, 2),
        ("cora", 10, 4),
        ("facebook", 3, 2),
        # Measured 2026-11-25 with Libra's default rule (lower_degree): cdr 0.9238
        # against cd0's 0.9328 (-0.90); -1.34 on 2026-11-23 under the union rule.
        ("facebook", 3, 4),
    ],
)
def test_approximate_algorithms_within_one_point_of_cd0(
    configure, tmp_path, shared_datasets, dataset, seeds, nprocs
):
    means = mean_test_accuracy(configure, tmp_path, dataset, nprocs, 200, seeds, "model=sage_gcn")
    # Within 1 point below cd0 (being better is allowed, as in DistGNN Table 5).
    assert means["zero_comm"] >= means["cd0"] - 0.01, means
    assert means["cdr"] >= means["cd0"] - 0.01, means
