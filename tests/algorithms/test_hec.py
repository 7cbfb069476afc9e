"""DistGNN-MB (`hec`) on real ranks against its limits: local-only at cache size 0, and
with nothing limited, every halo embedding loaded is the latest one its owner pushed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402

UNLIMITED = (
    "algorithm.cache_size=100000000",
    "algorithm.lifespan=1000000",
    "algorithm.push_limit=100000000",
)


def hec_config(configure, nprocs, *overrides):
    return configure(
        "dataset=synthetic-tiny",
        "algorithm=hec",
        "model=sage",
        "model.dropout=0",
        "model.batch_size=64",
        f"cluster.nprocs={nprocs}",
        *overrides,
    )


def test_cache_size_zero_is_local_only_training(configure):
    cfg = hec_config(configure, 2, "algorithm.cache_size=0")
    results = run_on_ranks(rank_checks.hec_local_only_logits, 2, cfg)
    assert all(r["halo_edges"] > 0 for r in results), "the minibatches must reach halo vertices"
    assert all(r["max_error"] < 1e-5 for r in results), results
    assert all(r["sent"] == 0 for r in results)


@pytest.mark.parametrize("nprocs, delays", [(2, (0, 2)), (3, (1,))], ids=["2-ranks", "3-ranks"])
def test_a_loaded_halo_embedding_is_the_latest_its_owner_pushed_in_time(configure, nprocs, delays):
    # Batches of 16: about 6 minibatches per epoch, so that pushes cross epochs too.
    cfgs = [
        hec_config(
            configure, nprocs, *UNLIMITED, f"algorithm.delay_minibatches={d}", "model.batch_size=16"
        )
        for d in delays
    ]
    per_rank = run_on_ranks(rank_checks.hec_traces, nprocs, cfgs, 2)
    for c, delay in enumerate(delays):
        _assert_loads_are_the_latest_in_time([rank[c] for rank in per_rank], delay)


def _assert_loads_are_the_latest_in_time(results: list[dict], delay: int) -> None:
    lag = max(delay, 1)
    # pushes[(target, layer, vertex)] = [(minibatch, row), ...] in minibatch order
    pushes: dict[tuple[int, int, int], list] = {}
    for result in results:
        for kind, now, layer, peer, ids, rows in result["trace"]:
            if kind == "push":
                for vertex, row in zip(ids.tolist(), rows, strict=True):
                    pushes.setdefault((peer, layer, vertex), []).append((now, row))

    def latest_in_time(rank, layer, vertex, now):
        usable = [p for p in pushes.get((rank, layer, vertex), []) if p[0] <= now - lag]
        return usable[-1] if usable else None

    loads = misses = 0
    for rank, result in enumerate(results):
        for kind, now, layer, _, ids, rows in result["trace"]:
            if kind == "load":
                for vertex, row in zip(ids.tolist(), rows, strict=True):
                    pushed = latest_in_time(rank, layer, vertex, now)
                    assert pushed is not None, (rank, now, layer, vertex)
                    assert torch.equal(row, pushed[1]), (rank, now, layer, vertex, pushed[0])
                    loads += 1
            elif kind == "miss":
                for vertex in ids.tolist():
                    assert latest_in_time(rank, layer, vertex, now) is None, (
                        rank,
                        now,
                        layer,
                        vertex,
                    )
                    misses += 1
    assert loads > 0 and misses > 0, (loads, misses)
    # Hit rates count the same loads and misses.
    hits = sum(len(ids) for r in results for kind, *_, ids, _ in r["trace"] if kind == "load")
    assert hits == loads


def test_push_limit_bounds_every_push(configure):
    cfg = hec_config(configure, 2, "algorithm.push_limit=5", "algorithm.delay_minibatches=1")
    results = run_on_ranks(rank_checks.hec_trace, 2, cfg, 1)
    sizes = [len(ids) for r in results for kind, *_, ids, _ in r["trace"] if kind == "push"]
    assert max(sizes) == 5
    assert all(r["epochs"][0]["bytes"].get("hec_push", 0) > 0 for r in results)
