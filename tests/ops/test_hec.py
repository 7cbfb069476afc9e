"""The Historical Embedding Cache: its contract, and kernels/hec.cpp against the reference."""

from __future__ import annotations

import pytest
import torch

from gnnrun.ops.hec import HistoricalEmbeddingCache
from gnnrun.ops.native import native_op

IMPLEMENTATIONS = [
    pytest.param(False, id="reference"),
    pytest.param(
        True,
        id="native",
        marks=pytest.mark.skipif(
            native_op("hec_store", "hec") is None, reason="kernels/hec.cpp could not be built"
        ),
    ),
]


def rows_for(tags, width=3, scale=1.0):
    """A distinct, recognisable embedding per tag."""
    tags = torch.as_tensor(tags, dtype=torch.int64)
    return (tags[:, None].float() * 10 + torch.arange(width)) * scale


def cached(cache, tags, now, lifespan=100):
    """{tag: row} of the tags that hit at step `now`."""
    tags = torch.as_tensor(tags, dtype=torch.int64)
    lines = cache.search(tags, now, lifespan)
    hit = lines >= 0
    loaded = cache.load(lines[hit])
    return {int(t): row.tolist() for t, row in zip(tags[hit], loaded, strict=True)}


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_search_finds_stored_tags_and_misses_others(native):
    cache = HistoricalEmbeddingCache(
        torch.tensor([40, 7, 12, 99]), capacity=10, width=3, native=native
    )
    assert cache.num_lines == 4  # never more lines than cacheable vertices
    assert cache.store(torch.tensor([12, 40]), rows_for([12, 40]), now=0) == 2
    got = cached(cache, [7, 12, 40, 99], now=0)
    assert got == {12: rows_for([12])[0].tolist(), 40: rows_for([40])[0].tolist()}


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_lines_expire_after_their_lifespan(native):
    cache = HistoricalEmbeddingCache(torch.arange(5), capacity=5, width=2, native=native)
    cache.store(torch.tensor([1]), rows_for([1], 2), now=3)
    cache.store(torch.tensor([2]), rows_for([2], 2), now=5)
    # lifespan 2: a line stamped 3 is usable at steps 3, 4, 5 and purged from 6 on.
    assert set(cached(cache, [1, 2], now=5, lifespan=2)) == {1, 2}
    assert set(cached(cache, [1, 2], now=6, lifespan=2)) == {2}
    assert set(cached(cache, [1, 2], now=8, lifespan=2)) == set()
    # lifespan 0: usable only at the step it was stamped for.
    assert set(cached(cache, [2], now=5, lifespan=0)) == {2}
    assert set(cached(cache, [2], now=6, lifespan=0)) == set()


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_duplicate_tags_keep_the_last_row_and_resident_tags_are_overwritten(native):
    cache = HistoricalEmbeddingCache(torch.arange(10), capacity=3, width=3, native=native)
    rows = torch.stack([rows_for([4])[0], rows_for([5])[0], rows_for([4], scale=2)[0]])
    assert cache.store(torch.tensor([4, 5, 4]), rows, now=1) == 2
    assert cached(cache, [4], now=1)[4] == rows_for([4], scale=2)[0].tolist()
    line_of_5 = int(cache.search(torch.tensor([5]), 1, 0))
    cache.store(torch.tensor([5]), rows_for([5], scale=3), now=2)  # in place, newer stamp
    assert int(cache.search(torch.tensor([5]), 2, 0)) == line_of_5
    assert cached(cache, [5], now=2)[5] == rows_for([5], scale=3)[0].tolist()


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_a_full_cache_replaces_the_oldest_line_first(native):
    cache = HistoricalEmbeddingCache(torch.arange(10), capacity=3, width=3, native=native)
    cache.store(torch.tensor([0]), rows_for([0]), now=0)
    cache.store(torch.tensor([1]), rows_for([1]), now=1)
    cache.store(torch.tensor([2]), rows_for([2]), now=2)
    cache.store(torch.tensor([0]), rows_for([0]), now=3)  # 0 refreshed: 1 is now the oldest
    cache.store(torch.tensor([7]), rows_for([7]), now=4)
    assert set(cached(cache, range(10), now=4)) == {0, 2, 7}
    cache.store(torch.tensor([8, 9]), rows_for([8, 9]), now=5)  # evicts 2 (stamp 2), then 0 (3)
    assert set(cached(cache, range(10), now=5)) == {7, 8, 9}


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_expired_lines_are_replaced_before_valid_ones(native):
    cache = HistoricalEmbeddingCache(torch.arange(10), capacity=2, width=3, native=native)
    cache.store(torch.tensor([0]), rows_for([0]), now=0)
    cache.store(torch.tensor([1]), rows_for([1]), now=5)
    cache.store(torch.tensor([2]), rows_for([2]), now=6)
    assert set(cached(cache, range(10), now=6)) == {1, 2}


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_more_new_tags_than_lines_keeps_the_last_ones_and_spares_this_stores_writes(native):
    cache = HistoricalEmbeddingCache(torch.arange(10), capacity=3, width=3, native=native)
    cache.store(torch.tensor([0, 1, 2]), rows_for([0, 1, 2]), now=0)
    # 1 is resident (overwritten in place); only 2 lines are left for 5 new tags.
    kept = cache.store(torch.tensor([3, 4, 1, 5, 6, 7]), rows_for([3, 4, 1, 5, 6, 7]), now=1)
    assert kept == 3
    assert set(cached(cache, range(10), now=1)) == {1, 6, 7}


@pytest.mark.parametrize("native", IMPLEMENTATIONS)
def test_capacity_zero_stores_nothing(native):
    cache = HistoricalEmbeddingCache(torch.arange(4), capacity=0, width=3, native=native)
    assert cache.store(torch.tensor([1, 2]), rows_for([1, 2]), now=0) == 0
    assert cached(cache, range(4), now=0) == {}


def test_a_tag_that_is_not_a_halo_vertex_is_refused():
    cache = HistoricalEmbeddingCache(torch.tensor([3, 5]), capacity=2, width=1, native=False)
    with pytest.raises(ValueError, match=r"\[4\]"):
        cache.store(torch.tensor([4]), torch.zeros(1, 1), now=0)


@pytest.mark.skipif(native_op("hec_store", "hec") is None, reason="kernels/hec.cpp not built")
@pytest.mark.parametrize("capacity", [0, 1, 17, 64, 300])
def test_native_and_reference_agree_on_random_traffic(capacity):
    generator = torch.Generator().manual_seed(capacity)
    tags = torch.randperm(1000, generator=generator)[:200] * 3
    caches = [
        HistoricalEmbeddingCache(tags, capacity, width=8, native=native) for native in (False, True)
    ]
    for now in range(40):
        count = int(torch.randint(0, 60, (1,), generator=generator))
        pushed = tags[torch.randint(0, tags.numel(), (count,), generator=generator)]
        rows = torch.randn(count, 8, generator=generator)
        kept = {cache.store(pushed, rows, now) for cache in caches}
        assert len(kept) == 1
        probe = tags[torch.randint(0, tags.numel(), (50,), generator=generator)]
        lines = [cache.search(probe, now, lifespan=3) for cache in caches]
        assert torch.equal(lines[0], lines[1])
        hit = lines[0] >= 0
        assert torch.equal(caches[0].load(lines[0][hit]), caches[1].load(lines[1][hit]))
    for name in ("slot_line", "line_slot", "line_stamp", "data"):
        assert torch.equal(getattr(caches[0], name), getattr(caches[1], name)), name
