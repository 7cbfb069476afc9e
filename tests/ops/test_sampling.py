"""Neighbour sampling: valid edges, exact fanouts, determinism, native == numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.ops.native import native_op
from gnnrun.ops.sampling import (
    compact,
    compact_reference,
    sample_blocks,
    sample_neighbors,
    sample_neighbors_reference,
    sample_relations,
)

HAVE_NATIVE = native_op("sample_neighbors", "sampler") is not None
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="kernels/sampler.cpp did not build")
BACKENDS = [
    pytest.param(True, id="native", marks=needs_native),
    pytest.param(False, id="reference"),
]
HUB, EMPTY, LOOP = 3, 7, 11  # a vertex of high degree, one without in-edges, one with a self-loop


def make_graph(n: int, avg_degree: int, hub_degree: int, seed: int = 0, dtype=np.int32):
    """A simple (no multi-edge) in-CSR with empty rows, a hub, self-loops."""
    rng = np.random.default_rng(seed)
    m = n * avg_degree
    dst = rng.integers(0, n, m)
    src = rng.integers(0, n, m)
    hub_src = rng.choice(n, hub_degree, replace=False)
    dst = np.concatenate([dst, np.full(hub_degree, HUB), [LOOP, 0, 1]])
    src = np.concatenate([src, hub_src, [LOOP, 0, 1]])
    keep = (dst != EMPTY) & (dst % 17 != 5)  # rows 5, 22, 39, ... and EMPTY have no in-edges
    pairs = np.unique(dst[keep] * n + src[keep])
    dst, src = pairs // n, pairs % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return torch.from_numpy(indptr), torch.from_numpy(src.astype(dtype))


@pytest.fixture(scope="module")
def graph():
    return make_graph(3000, 12, hub_degree=2500)


@pytest.fixture(scope="module")
def big_graph():  # large enough for the kernels to run every loop on several threads
    return make_graph(60_000, 20, hub_degree=20_000, seed=1)


def rows(indptr: torch.Tensor, indices: torch.Tensor, v: int) -> np.ndarray:
    return indices[indptr[v] : indptr[v + 1]].numpy().astype(np.int64)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype == torch.int64
        assert torch.equal(x, y)


def assert_blocks_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.num_src == y.num_src
        assert_same((x.indptr, x.indices, x.src_ids), (y.indptr, y.indices, y.src_ids))


@pytest.mark.parametrize("native", BACKENDS)
@pytest.mark.parametrize("fanout", [1, 4, 15, 40, -1])
def test_samples_are_distinct_existing_edges_with_exact_fanout(graph, native, fanout):
    indptr, indices = graph
    nodes = torch.tensor([HUB, EMPTY, LOOP, 0, 1, 5, 2999] + list(range(100, 400)))
    offsets, nbrs = sample_neighbors(indptr, indices, nodes, fanout, seed=3, layer=1, native=native)
    assert offsets.numel() == nodes.numel() + 1 and offsets[-1] == nbrs.numel()
    for i, v in enumerate(nodes.tolist()):
        row = rows(indptr, indices, v)
        got = nbrs[offsets[i] : offsets[i + 1]].numpy()
        want = row.size if fanout < 0 else min(row.size, fanout)
        assert got.size == want
        assert np.unique(got).size == got.size  # without replacement
        assert np.isin(got, row).all()  # every sampled edge exists
        # neighbours come in CSR order (the picks are sorted positions)
        position = np.searchsorted(row, got)  # rows of a simple graph are sorted by source
        assert (np.diff(position) > 0).all()
    hub = nbrs[offsets[0] : offsets[1]].numpy()
    assert fanout < 0 or hub.size == fanout  # the hub's 2500 in-edges are subsampled


@pytest.mark.parametrize("native", BACKENDS)
def test_sample_blocks_structure(graph, native):
    indptr, indices = graph
    seeds = torch.tensor([HUB, EMPTY, LOOP, 42, 43, 44, 1000])
    fanouts = [6, 4, 3]
    blocks = sample_blocks(indptr, indices, seeds, fanouts, seed=9, native=native)
    assert len(blocks) == 3
    assert torch.equal(blocks[-1].src_ids[: blocks[-1].num_dst], seeds)  # output layer last
    for i, block in enumerate(blocks):
        block.validate()
        fanout = fanouts[len(blocks) - 1 - i]  # blocks[-1] took fanouts[0]
        dst_ids = block.src_ids[: block.num_dst]
        if i + 1 < len(blocks):  # this block's destinations are the next block's sources
            assert torch.equal(dst_ids, blocks[i + 1].src_ids)
        assert block.src_ids.unique().numel() == block.num_src  # distinct sources
        # src_ids[indices] recovers the sampled edges (as ids of the graph)
        edge_src = block.src_ids[block.indices].numpy()
        edge_dst = dst_ids[block.dst_of_edges()].numpy()
        for u, v in zip(edge_src.tolist(), edge_dst.tolist(), strict=True):
            assert u in set(rows(indptr, indices, v).tolist())
        deg = (indptr[dst_ids + 1] - indptr[dst_ids]).numpy()
        assert np.array_equal(block.in_degrees().numpy(), np.minimum(deg, fanout))
        # new sources come in order of first appearance in the edge list
        new = block.indices[block.indices >= block.num_dst].numpy()
        _, first = np.unique(new, return_index=True)
        assert np.array_equal(new[np.sort(first)], np.arange(block.num_dst, block.num_src))
    # the empty row has no in-edges; the self-loop points at the vertex's own position
    out = blocks[-1]
    assert out.in_degrees()[1] == 0
    loop_row = out.indices[out.indptr[2] : out.indptr[3]]
    assert 2 in loop_row.tolist() or rows(indptr, indices, LOOP).size > fanouts[0]


@pytest.mark.parametrize("native", BACKENDS)
def test_same_seed_same_blocks_other_seed_other_blocks(graph, native):
    indptr, indices = graph
    seeds = torch.arange(200, 260)
    a = sample_blocks(indptr, indices, seeds, [5, 5], seed=1, native=native)
    b = sample_blocks(indptr, indices, seeds, [5, 5], seed=1, native=native)
    c = sample_blocks(indptr, indices, seeds, [5, 5], seed=2, native=native)
    assert_blocks_equal(a, b)
    assert not torch.equal(a[-1].src_ids, c[-1].src_ids)
    # the hop number keys the draw too
    x = sample_neighbors(indptr, indices, seeds, 5, seed=1, layer=0, native=native)[1]
    y = sample_neighbors(indptr, indices, seeds, 5, seed=1, layer=1, native=native)[1]
    assert not torch.equal(x, y)


@pytest.mark.parametrize("native", BACKENDS)
def test_a_vertex_samples_the_same_in_any_batch(graph, native):
    indptr, indices = graph
    rng = np.random.default_rng(0)
    batch_a = torch.from_numpy(rng.permutation(3000)[:500])
    batch_b = torch.cat([torch.from_numpy(rng.permutation(3000)[:700]), batch_a.flip(0)[::3]])
    off_a, nbr_a = sample_neighbors(indptr, indices, batch_a, 5, seed=4, layer=2, native=native)
    off_b, nbr_b = sample_neighbors(indptr, indices, batch_b, 5, seed=4, layer=2, native=native)
    where_b = {v: i for i, v in enumerate(batch_b.tolist())}
    for i, v in enumerate(batch_a.tolist()):
        if v in where_b:
            j = where_b[v]
            assert torch.equal(nbr_a[off_a[i] : off_a[i + 1]], nbr_b[off_b[j] : off_b[j + 1]])
        alone_off, alone = sample_neighbors(
            indptr, indices, torch.tensor([v]), 5, seed=4, layer=2, native=native
        )
        assert torch.equal(alone, nbr_a[off_a[i] : off_a[i + 1]])


@needs_native
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_native_matches_reference_bit_for_bit(big_graph, dtype):
    indptr, indices = big_graph
    indices = indices.to(torch.int32 if dtype == np.int32 else torch.int64)
    seeds = torch.from_numpy(np.random.default_rng(5).permutation(60_000)[:3000])
    for fanouts, seed in (([15, 10, 5], 0), ([5, 10, 15], 1), ([40, 2], -7), ([-1, 3], 2**40)):
        native = sample_blocks(indptr, indices, seeds, fanouts, seed, native=True)
        reference = sample_blocks(indptr, indices, seeds, fanouts, seed, native=False)
        assert_blocks_equal(native, reference)


@needs_native
def test_thread_count_does_not_change_the_sample(big_graph):
    indptr, indices = big_graph
    seeds = torch.from_numpy(np.random.default_rng(6).permutation(60_000)[:4000])
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(sample_blocks(indptr, indices, seeds, [15, 10, 5], 11, native=True))
        assert results[0][0].num_edges > 100_000  # big enough for every kernel loop to split
        for other in results[1:]:
            assert_blocks_equal(results[0], other)
    finally:
        torch.set_num_threads(before)


BIG = 2**40  # ids this large take the hash-table compaction instead of the dense map


@needs_native
@pytest.mark.parametrize("offset", [0, BIG], ids=["dense", "hashed"])
def test_compact_matches_reference_with_repeats(offset):
    # destinations with a repeat; neighbours that are destinations, repeated, or new
    dst = torch.tensor([50, 7, 50, 3]) + offset
    nbrs = torch.tensor([7, 50, 9, 9, 100, 3, 100, 8, 50]) + offset
    offsets = torch.tensor([0, 2, 5, 5, 9])
    assert_same(compact(dst, offsets, nbrs, native=True), compact_reference(dst, offsets, nbrs))
    indptr, indices, src_ids = compact_reference(dst, offsets, nbrs)
    assert (src_ids - offset).tolist() == [50, 7, 50, 3, 9, 100, 8]
    assert indices.tolist() == [1, 0, 4, 4, 5, 3, 5, 6, 0]


@needs_native
def test_hashed_compaction_any_thread_count(big_graph):
    # a sampled hop of the big graph with its ids spread far apart (same order)
    indptr, indices = big_graph
    dst = torch.from_numpy(np.random.default_rng(8).permutation(60_000)[:20_000])
    offsets, nbrs = sample_neighbors(indptr, indices, dst, 5, seed=0, layer=0, native=True)
    dst, nbrs = dst * 1_000_003 + BIG, nbrs * 1_000_003 + BIG
    want = compact_reference(dst, offsets, nbrs)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            assert_same(compact(dst, offsets, nbrs, native=True), want)
    finally:
        torch.set_num_threads(before)


def _fmix64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


@needs_native
def test_hashed_compaction_survives_skewed_hashes():
    # ids whose hash sends them all to one thread's part of the table: it
    # overflows on two threads and compaction starts over with more room
    rng = np.random.default_rng(7)
    candidates = np.arange(BIG, BIG + 400_000)
    skewed = candidates[(_fmix64(candidates) >> np.uint64(63)) == 0][:70_000]
    nbrs = torch.from_numpy(rng.permutation(skewed))  # 0.75 * 70k slots round to 64k
    dst = torch.from_numpy(skewed[:10])
    offsets = torch.tensor([0] + [nbrs.numel()] * 10)
    want = compact_reference(dst, offsets, nbrs)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            assert_same(compact(dst, offsets, nbrs, native=True), want)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("native", BACKENDS)
def test_draws_look_uniform(native):
    # 4000 vertices with the same 10 in-neighbours, 3 picks each: every
    # position should be picked about 1200 times.
    n, d = 4000, 10
    indptr = torch.arange(0, (n + 1) * d, d, dtype=torch.int64)
    indices = torch.arange(d, dtype=torch.int32).repeat(n)
    _, nbrs = sample_neighbors(indptr, indices, torch.arange(n), 3, seed=0, layer=0, native=native)
    counts = np.bincount(nbrs.numpy(), minlength=d)
    chi2 = ((counts - 1200) ** 2 / 1200).sum()
    assert chi2 < 40  # 9 degrees of freedom: p < 1e-5


@pytest.mark.parametrize("native", BACKENDS)
def test_bad_ids_are_refused(graph, native):
    indptr, indices = graph
    with pytest.raises((RuntimeError, ValueError)):
        sample_neighbors(indptr, indices, torch.tensor([0, 3000]), 5, 0, 0, native=native)
    with pytest.raises((RuntimeError, ValueError)):
        compact(torch.tensor([1]), torch.tensor([0, 1]), torch.tensor([-2]), native=native)


def test_reference_handles_empty_input(graph):
    indptr, indices = graph
    offsets, nbrs = sample_neighbors_reference(
        indptr, indices, torch.zeros(0, dtype=torch.int64), 5, 0, 0
    )
    assert offsets.tolist() == [0] and nbrs.numel() == 0
    if HAVE_NATIVE:
        native = sample_neighbors(indptr, indices, torch.zeros(0, dtype=torch.int64), 5, 0, 0)
        assert_same(native, (offsets, nbrs))
        assert_same(
            compact(torch.zeros(0, dtype=torch.int64), offsets, nbrs),
            compact_reference(torch.zeros(0, dtype=torch.int64), offsets, nbrs),
        )


@pytest.mark.parametrize("native", BACKENDS)
def test_per_relation_fanouts_sample_each_relation_as_its_own_rows(graph, native):
    """Rows v * R + r of a per-relation CSR, relation r with fanouts[r]: each row's sample
    is what sample_neighbors draws for that row alone with its fanout."""
    indptr, indices = graph
    relations, fanouts = 3, [2, -1, 5]
    rows = torch.arange(indptr.numel() - 1)  # read as rows of (v, r) = divmod(row, 3)
    offsets, merged = sample_relations(
        indptr, indices, rows, fanouts, seed=9, layer=1, native=native
    )
    for r in range(relations):
        chosen = rows[rows % relations == r]
        alone_offsets, alone = sample_neighbors(
            indptr, indices, chosen, fanouts[r], 9, 1, native=native
        )
        for i, row in enumerate(chosen.tolist()):
            got = merged[offsets[row] : offsets[row + 1]]
            assert torch.equal(got, alone[alone_offsets[i] : alone_offsets[i + 1]])
    same = sample_relations(indptr, indices, rows, [4, 4, 4], seed=9, layer=1, native=native)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            same, sample_neighbors(indptr, indices, rows, 4, 9, 1, native=native), strict=True
        )
    )
