"""DistGNN-MB (`hec`) on real ranks against its limits: local-only at cache size 0, and
with nothing limited, every halo embedding loaded is the latest one its owner pushed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402

UNLIMITED = (
    "algorithm.cache_size=100000000",
    "algorithm.lifespan=1000000",
    "algorithm.push_limit=100000000",
    "algorithm.push_budget=limit",
)


def hec_config(configure, nprocs, *overrides):
    return configure(
        "dataset=synthetic-tiny",
        "algorithm=hec",
        "model=sage",
        "model.dropout=0",
        "algorithm.batch_size=64",
        f"cluster.nprocs={nprocs}",
        *overrides,
    )


def without(setting: str, overrides: tuple[str, ...]) -> tuple[str, ...]:
    """`overrides` less the one of `setting`'s key."""
    return tuple(o for o in overrides if o.split("=")[0] != setting.split("=")[0])


# The 2-rank runs the tests below read (their settings and epochs), traced in one launch:
# each launch's rank start-up costs more than these runs' training.
BATCH_16 = "algorithm.batch_size=16"  # about 6 minibatches an epoch: pushes cross epochs
TRACED = {
    "delay 0": ((*UNLIMITED, "algorithm.delay_minibatches=0", BATCH_16), 2),
    "delay 2": ((*UNLIMITED, "algorithm.delay_minibatches=2", BATCH_16), 2),
    "lifespan 1": (
        (*without("algorithm.lifespan", UNLIMITED), "algorithm.lifespan=1", BATCH_16),
        2,
    ),
    "push limit 1": ((*UNLIMITED, "algorithm.push_limit=1", BATCH_16), 3),
    "usable budget": (("algorithm.push_budget=usable", BATCH_16), 2),
    "push limit 5": (("algorithm.push_limit=5", "algorithm.delay_minibatches=1"), 1),
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, list[dict]]:
    """rank_checks.hec_trace of every TRACED run on 2 ranks: per name, the ranks' results."""
    from tests.algorithms.conftest import prepared

    with pytest.MonkeyPatch.context() as patch:  # a root of the module's own (a test's: per test)
        patch.setenv("GNNRUN_DATA_ROOT", str(tmp_path_factory.mktemp("hec") / "data"))
        runs = [(hec_config(prepared, 2, *o), epochs) for o, epochs in TRACED.values()]
        per_rank = run_on_ranks(rank_checks.hec_traces, 2, runs)
    return {name: [rank[i] for rank in per_rank] for i, name in enumerate(TRACED)}


@pytest.mark.parametrize(
    "block",
    [
        "model.block=post_norm",
        # Platonov et al.'s block: its residual stream is what the halo rows would carry.
        pytest.param("model.block=pre_norm_ffn", marks=pytest.mark.slow),
    ],
)
def test_cache_size_zero_is_local_only_training(configure, block):
    cfg = hec_config(configure, 2, "algorithm.cache_size=0", block)
    results = run_on_ranks(rank_checks.hec_local_only_logits, 2, cfg)
    assert all(r["halo_edges"] > 0 for r in results), "the minibatches must reach halo vertices"
    assert all(r["max_error"] < 1e-5 for r in results), results
    assert all(r["sent"] == 0 for r in results)


@pytest.mark.parametrize("delay", [0, 2])
def test_a_loaded_halo_embedding_is_the_latest_its_owner_pushed_in_time(traces, delay):
    _assert_loads_are_the_latest_in_time(traces[f"delay {delay}"], delay)


@pytest.mark.slow  # make test-slow (the default suite keeps under 10 minutes)
def test_on_three_ranks_a_loaded_halo_embedding_is_the_latest_pushed_in_time(configure):
    cfg = hec_config(configure, 3, *UNLIMITED, "algorithm.delay_minibatches=1", BATCH_16)
    (results,) = zip(*run_on_ranks(rank_checks.hec_traces, 3, [(cfg, 2)]), strict=True)
    _assert_loads_are_the_latest_in_time(list(results), 1)


def _pushes_by_target(results: list[dict]) -> dict[tuple[int, int, int], list]:
    """pushes[(target, layer, vertex)] = [(minibatch, row), ...] in minibatch order."""
    pushes: dict[tuple[int, int, int], list] = {}
    for result in results:
        for kind, now, layer, peer, ids, rows in result["trace"]:
            if kind == "push":
                for vertex, row in zip(ids.tolist(), rows, strict=True):
                    pushes.setdefault((peer, layer, vertex), []).append((now, row))
    return pushes


def _assert_loads_are_the_latest_in_time(
    results: list[dict], delay: int, lifespan: int | None = None, capacity: int | None = None
) -> None:
    """Every load is the latest push in time (started delay minibatches ago or before) and,
    with a lifespan, no older than it. Without a capacity every miss is a vertex with no
    such push; with one, some misses are evictions and no minibatch loads more lines."""
    lag = max(delay, 1)
    pushes = _pushes_by_target(results)

    def latest_in_time(rank, layer, vertex, now):
        usable = [p for p in pushes.get((rank, layer, vertex), []) if p[0] <= now - lag]
        if not usable or (lifespan is not None and usable[-1][0] < now - lag - lifespan):
            return None
        return usable[-1]

    loads = misses = evicted = 0
    for rank, result in enumerate(results):
        for kind, now, layer, _, ids, rows in result["trace"]:
            if kind == "load":
                assert capacity is None or len(ids) <= capacity, (rank, now, layer, len(ids))
                for vertex, row in zip(ids.tolist(), rows, strict=True):
                    pushed = latest_in_time(rank, layer, vertex, now)
                    assert pushed is not None, (rank, now, layer, vertex)
                    assert torch.equal(row, pushed[1]), (rank, now, layer, vertex, pushed[0])
                    loads += 1
            elif kind == "miss":
                for vertex in ids.tolist():
                    in_time = latest_in_time(rank, layer, vertex, now) is not None
                    assert capacity is not None or not in_time, (rank, now, layer, vertex)
                    evicted += in_time
                    misses += 1
    assert loads > 0 and misses > 0, (loads, misses)
    assert capacity is None or evicted > 0, "the capacity never bound: choose a smaller one"
    # Hit rates count the same loads and misses.
    hits = sum(len(ids) for r in results for kind, *_, ids, _ in r["trace"] if kind == "load")
    assert hits == loads


def test_a_lifespan_bounds_what_a_rank_loads(traces):
    _assert_loads_are_the_latest_in_time(traces["lifespan 1"], 1, lifespan=1)


@pytest.mark.slow  # make test-slow (the default suite keeps under 10 minutes)
def test_a_capacity_bounds_what_a_rank_loads(configure):
    setting = "algorithm.cache_size=20"
    cfg = hec_config(configure, 2, *without(setting, UNLIMITED), setting, BATCH_16)
    results = run_on_ranks(rank_checks.hec_trace, 2, cfg, 2)
    _assert_loads_are_the_latest_in_time(results, 1, capacity=20)


def _eligible(results: list[dict], rank: int, sources: torch.Tensor) -> dict[int, set[int]]:
    """Per other rank q: the vertices of `sources` that `rank` owns and q holds as halos."""
    mine = set(results[rank]["solid"].tolist()) & set(sources.tolist())
    return {
        q: mine & set(result["halos"][result["halo_owner"] == rank].tolist())
        for q, result in enumerate(results)
        if q != rank
    }


def _pushes_with_eligible(results: list[dict]):
    """(rank, minibatch, layer, target, pushed ids, eligible ids) for every push."""
    for rank, result in enumerate(results):
        eligible = {}
        for kind, now, layer, peer, ids, _ in result["trace"]:
            if kind == "sources":
                eligible = _eligible(results, rank, ids)
            elif kind == "push" and peer != rank:
                yield rank, now, layer, peer, ids, eligible[peer]


@pytest.mark.slow  # make test-slow (the default suite keeps under 10 minutes)
def test_with_nothing_limited_every_eligible_halo_vertex_is_pushed(configure):
    cfg = hec_config(configure, 3, *UNLIMITED, "algorithm.batch_size=16")
    results = run_on_ranks(rank_checks.hec_trace, 3, cfg, 1)
    pushed = 0
    for rank, now, layer, peer, ids, eligible in _pushes_with_eligible(results):
        assert len(ids) == len(eligible) and set(ids.tolist()) == eligible, (rank, now, layer, peer)
        pushed += len(ids)
    assert pushed > 0


def test_a_push_over_its_limit_draws_by_degree(traces):
    # A push of one row out of several eligible: the draw takes vertex v with probability
    # degree(v) / (sum of the eligible degrees), against 1 / (eligible) if it were uniform.
    results = traces["push limit 1"]
    observed = by_degree = uniform = 0.0
    draws = 0
    for rank, *_, ids, eligible in _pushes_with_eligible(results):
        if len(eligible) < 2:
            continue
        result = results[rank]
        degree_of = dict(zip(result["solid"].tolist(), result["degree"].tolist(), strict=True))
        degrees = np.array([max(degree_of[v], 1) for v in eligible], dtype=float)
        assert len(ids) == 1 and int(ids[0]) in eligible
        observed += max(degree_of[int(ids[0])], 1)
        by_degree += (degrees**2).sum() / degrees.sum()
        uniform += degrees.mean()
        draws += 1
    assert draws >= 50, draws
    assert abs(observed - by_degree) < abs(observed - uniform), (observed, by_degree, uniform)
    assert abs(observed - by_degree) < 0.1 * by_degree, (observed, by_degree, uniform)


def test_usable_budget_follows_the_lookups_of_the_last_epoch(traces):
    # Epoch 0 pushes at most ceil(halo / (lifespan + 1)) rows; epoch 1 at most the target's
    # halo lookups of the owner's vertices per minibatch in epoch 0. Every push is a
    # fixed-size buffer: the bytes are the budgets', whatever the rows carried.
    results = traces["usable budget"]
    steps = _minibatches_per_epoch(results[0])
    lookups = {}  # (rank looking up, layer) -> its halo lookups in epoch 0
    for rank, result in enumerate(results):
        for kind, now, layer, _, ids, _ in result["trace"]:
            if kind in ("load", "miss") and now < steps:
                lookups[(rank, layer)] = lookups.get((rank, layer), 0) + len(ids)
    bound = 0
    for rank, now, layer, peer, ids, _ in _pushes_with_eligible(results):
        if now < steps:
            budget = -(-int((results[peer]["halo_owner"] == rank).sum()) // 3)
        else:
            budget = -(-lookups.get((peer, layer), 0) // steps)
        assert len(ids) <= budget, (rank, now, layer, len(ids), budget)
        bound += len(ids) == budget
    assert bound > 0, "no push was as large as its budget: the test checks nothing"
    for result in results:
        for stats in result["epochs"]:
            rows = stats["push_rows"]
            buffers = sum(
                (b + 1) * 8 + b * w * 4 for b, w in zip(rows, result["widths"], strict=True)
            )
            assert stats["bytes"]["hec_push"] == steps * buffers, (rows, stats["bytes"])


def test_a_layer_without_budget_pushes_nothing_there(configure):
    cfg = hec_config(configure, 2, "algorithm.push_budget=limit", "algorithm.batch_size=16")
    results = run_on_ranks(rank_checks.hec_with_a_layer_unbudgeted, 2, cfg, 1)
    assert all(r["pushed"][1] == 0 and r["pushed"][0] > 0 for r in results), results
    assert all(np.isfinite(r["loss"]) for r in results)


def _minibatches_per_epoch(result: dict) -> int:
    first_layer = [
        now for kind, now, layer, *_ in result["trace"] if kind == "sources" and layer == 0
    ]
    return len(first_layer) // len(result["epochs"])


def test_push_limit_bounds_every_push(traces):
    results = traces["push limit 5"]
    sizes = [len(ids) for r in results for kind, *_, ids, _ in r["trace"] if kind == "push"]
    assert max(sizes) == 5
    assert all(r["epochs"][0]["bytes"].get("hec_push", 0) > 0 for r in results)
