"""The distributed minibatch baseline on 2 and 4 real ranks against single-process sampling."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402


@pytest.mark.parametrize("nprocs", [2, 4])
def test_owners_sample_exactly_what_one_process_samples(configure, nprocs):
    cfg = configure(
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "model=sage_products",
        f"cluster.nprocs={nprocs}",
    )
    results = run_on_ranks(rank_checks.minibatch_matches_single_process, nprocs, cfg, 12345)
    assert all(r["edges"] > 0 for r in results)
    assert any(r["remote_inputs"] > 0 for r in results), "the test must involve remote vertices"


@pytest.mark.parametrize("nprocs", [2, 4])
def test_gradients_are_identical_after_all_reduce(configure, nprocs):
    cfg = configure(
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "model=sage",
        "model.batch_size=128",
        f"cluster.nprocs={nprocs}",
    )
    weights = run_on_ranks(rank_checks.parameters_after_one_epoch, nprocs, cfg)
    assert all(w == weights[0] for w in weights[1:])
