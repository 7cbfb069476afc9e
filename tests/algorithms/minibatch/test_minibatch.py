"""The distributed minibatch baseline on 2 and 4 real ranks against single-process sampling."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402


@pytest.mark.parametrize(
    "nprocs", [2, pytest.param(4, marks=pytest.mark.slow)]
)  # 4 ranks: make test-slow
def test_owners_sample_exactly_and_gradients_are_identical_after_all_reduce(configure, nprocs):
    """What one process samples, the owners sample; every rank ends an epoch with the same
    weights (one launch for both: starting ranks costs more than the checks)."""
    common = ("dataset=synthetic-tiny", "algorithm=minibatch", f"cluster.nprocs={nprocs}")
    sampled = configure(*common, "model=sage_products")
    # Batch normalisation: each rank's statistics from its own minibatches, averaged.
    trained = configure(*common, "model=sage", "algorithm.batch_size=128", "model.norm=batch")
    results = run_on_ranks(rank_checks.minibatch_samples_and_weights, nprocs, sampled, trained)
    samples, weights = zip(*results, strict=True)
    assert all(r["edges"] > 0 for r in samples)
    assert all(r["feature_rows"] > 64 for r in samples), "features of seeds and neighbours"
    assert any(r["remote_inputs"] > 0 for r in samples), "the test must involve remote vertices"
    assert all(w == weights[0] for w in weights[1:])
