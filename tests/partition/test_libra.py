"""Libra's rules on hand-worked streams, the native kernel against its Python reference, and
Libra against random vertex cut."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError
from gnnrun.ops.native import load_kernel_file
from gnnrun.partition import partition_dataset
from gnnrun.partition.libra import (
    BALANCE_SLACK,
    LibraPartitionerConfig,
    group_bounds,
    libra_partition,
    libra_stream,
    libra_stream_reference,
    reverse_edges,
    stream_keys,
    stream_order,
)


def native_or_skip():
    if not load_kernel_file("libra"):
        pytest.skip("native kernels could not be built here (no compiler)")
    return libra_stream


IMPLEMENTATIONS = {"native": native_or_skip, "reference": lambda: libra_stream_reference}


def run(
    impl: str, edges, num_nodes, num_parts, slack=math.inf, degree=None, streams=None, scale=1.0
) -> list[int]:
    """Parts of a hand-made stream: one round; one stream, or `streams` [(stream, edges)...]."""
    src = np.array([u for u, _ in edges], dtype=np.int64)
    dst = np.array([v for _, v in edges], dtype=np.int64)
    streams = streams or [(0, len(edges))]
    bounds = np.cumsum([0] + [count for _, count in streams]).astype(np.int64)
    stream = np.array([s for s, _ in streams], dtype=np.int64)
    masks = np.zeros(num_nodes, np.int64)
    load = np.zeros(num_parts, np.int64)
    degree = None if degree is None else np.asarray(degree, dtype=np.int64)
    return IMPLEMENTATIONS[impl]()(
        src, dst, bounds, stream, np.array([0, stream.size]), masks, load, num_parts, slack,
        scale, degree,
    ).tolist()  # fmt: skip


# Three parts, no balancing. Edges 0-2 place fresh vertex pairs on the least-loaded part of all
# (0, 1, 2). Edge 3 joins vertex 1 (part 0) and vertex 2 (part 1), which share no part: `union`
# takes the least-loaded of parts 0 and 1 (a tie: part 0), `lower_degree` the parts of vertex 2,
# whose degree is lower than the hub 1's (part 1). Edge 4 repeats edge 3: now its endpoints share
# the part edge 3 went to, which wins though part 2 is lighter.
STREAM = [(0, 1), (2, 3), (4, 5), (1, 2), (1, 2)]
DEGREE = [1, 10, 2, 1, 1, 1]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_union_rule_by_hand(impl):
    assert run(impl, STREAM, 6, 3) == [0, 1, 2, 0, 0]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_lower_degree_rule_by_hand(impl):
    assert run(impl, STREAM, 6, 3, degree=DEGREE) == [0, 1, 2, 1, 1]
    # Equal degrees: the second endpoint's parts (vertex 2: part 1), as the released code does.
    assert run(impl, STREAM, 6, 3, degree=[1, 2, 2, 1, 1, 1])[3] == 1
    # The hub as the second endpoint: the first endpoint's parts (vertex 2: part 1).
    assert run(impl, [(0, 1), (2, 3), (4, 5), (2, 1)], 6, 3, degree=DEGREE)[3] == 1


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_balance_rule_by_hand(impl):
    """A star on 2 parts: every edge's only candidate is the centre's part, until that part runs
    more than 5% above the average load (edge 3: 3 > 1.05 * 3 / 2 + 1), and the edge goes to
    the least-loaded part of all; edge 4 then has both of the centre's parts to choose from."""
    star = [(0, leaf) for leaf in range(1, 6)]
    assert run(impl, star, 6, 2, slack=0.05) == [0, 0, 0, 1, 1]
    assert run(impl, star, 6, 2) == [0, 0, 0, 0, 0]  # no balancing: all with the centre


def undirected(edges: list[tuple[int, int]], num_nodes: int) -> GraphDataset:
    """Both directions of every edge (self-loops once), as an in-CSR with sorted rows."""
    pairs = sorted(
        {(v, u) for u, v in edges} | {(u, v) for u, v in edges}, key=lambda e: (e[1], e[0])
    )
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.add.at(indptr, [v + 1 for _, v in pairs], 1)
    return GraphDataset(
        name="hand",
        indptr=np.cumsum(indptr),
        indices=np.array([u for u, _ in pairs], dtype=np.int64),
        feat=np.zeros((num_nodes, 1), np.float32),
        label=np.zeros(num_nodes, np.int64),
        train_idx=np.arange(num_nodes),
        val_idx=np.arange(0),
        test_idx=np.arange(0),
        num_classes=1,
    )


@pytest.mark.parametrize("rule", ["lower_degree", "union"])
def test_both_directions_and_self_loops_get_a_part(tiny, rule):
    cfg = LibraPartitionerConfig(num_parts=4, rule=rule)
    part = libra_partition(tiny, cfg).parts
    reverse = reverse_edges(tiny.indptr, tiny.indices)
    assert np.all(part >= 0) and np.array_equal(part, part[reverse])
    # A self-loop is its own reverse: it is streamed too, not left without a part.
    looped = undirected([(0, 1), (1, 1), (1, 2), (2, 3), (3, 3)], 4)
    part = libra_partition(looped, LibraPartitionerConfig(num_parts=2, rule=rule)).parts
    assert np.all(part >= 0)
    assert np.array_equal(part, part[reverse_edges(looped.indptr, looped.indices)])


def test_rule_and_slack_are_checked():
    with pytest.raises(GnnrunError, match="partitioner.rule 'released'.*lower_degree, union"):
        LibraPartitionerConfig(num_parts=2, rule="released").validate()
    with pytest.raises(GnnrunError, match="balance_slack must be >= 0 or null"):
        LibraPartitionerConfig(num_parts=2, balance_slack=-0.1).validate()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_streams_of_a_round_see_the_round_start_by_hand(impl):
    """Two streams of one round on 2 parts, no balancing. Stream 0 places (0, 1) on part 0,
    then (1, 2) with it. Stream 1 does not see that: its (2, 3) meets fresh vertices, and
    its ties start from part 1 (its stream number), so it goes to part 1, and (3, 4) with
    it. One stream would have put all four edges together on part 0."""
    edges = [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert run(impl, edges, 5, 2, streams=[(0, 2), (1, 2)]) == [0, 0, 1, 1]
    assert run(impl, edges, 5, 2) == [0, 0, 0, 0]


@pytest.mark.parametrize("lower_degree", [True, False])
@pytest.mark.parametrize("num_parts", [1, 2, 5, 64])
def test_native_kernel_matches_reference(num_parts, lower_degree):
    """Rounds of streams on a random stream with a hub and self-loops: the same parts, and
    the same masks and loads after it."""
    native_or_skip()
    rng = np.random.default_rng(num_parts)
    n, streams, rounds = 300, 8, 5
    # A hub (vertex 0) and self-loops exercise the corner cases of the masks.
    src = np.concatenate([rng.integers(0, n, 3000), np.zeros(200, np.int64), [5, 7]])
    dst = np.concatenate([rng.integers(0, n, 3000), rng.integers(0, n, 200), [5, 7]])
    degree = np.bincount(np.concatenate([src, dst]), minlength=n) if lower_degree else None
    h, group = stream_keys(src, dst, n, 0, streams, rounds)
    order = stream_order(h)
    bounds, stream = group_bounds(group[order], streams)
    round_groups = np.searchsorted(group[order][bounds[:-1]] // streams, np.arange(rounds + 1))
    results = []
    for assign in (libra_stream, libra_stream_reference):
        masks, load = np.zeros(n, np.int64), np.zeros(num_parts, np.int64)
        parts = assign(
            src[order], dst[order], bounds, stream, round_groups, masks, load, num_parts,
            BALANCE_SLACK, float(streams), degree,
        )  # fmt: skip
        results.append((parts, masks, load))
    (native, masks, load), reference = results[0], results[1]
    assert np.array_equal(native, reference[0])
    assert np.array_equal(masks, reference[1]) and np.array_equal(load, reference[2])
    assert np.array_equal(load, np.bincount(native, minlength=num_parts))
    assert load.max() <= (1 + BALANCE_SLACK) * src.size / num_parts + 2 * streams
    held = np.zeros(n, np.uint64)  # the masks are the parts of each vertex's edges
    np.bitwise_or.at(held, src[order], np.uint64(1) << native.astype(np.uint64))
    np.bitwise_or.at(held, dst[order], np.uint64(1) << native.astype(np.uint64))
    assert np.array_equal(masks.view(np.uint64), held)


def test_streams_and_rounds_are_checked():
    with pytest.raises(GnnrunError, match="partitioner.streams must be at least 1"):
        LibraPartitionerConfig(num_parts=2, streams=0).validate()
    with pytest.raises(GnnrunError, match="partitioner.rounds must be at least 1"):
        LibraPartitionerConfig(num_parts=2, rounds=0).validate()
    with pytest.raises(GnnrunError, match="at most 1,073,741,824, not 2,147,483,648"):
        LibraPartitionerConfig(num_parts=2, streams=2**7, rounds=2**24).validate()


def test_libra_replicates_less_than_random_edge_assignment(tiny, tmp_path):
    book = partition_dataset(tiny, LibraPartitionerConfig(num_parts=4), tmp_path / "p")
    # Random vertex cut: every edge to a uniformly random part.
    rng = np.random.default_rng(0)
    src = np.asarray(tiny.indices, dtype=np.int64)
    dst = np.repeat(np.arange(tiny.num_nodes), np.diff(tiny.indptr))
    part = rng.integers(0, 4, src.size)
    pairs = np.unique(np.concatenate([src * 4 + part, dst * 4 + part]))
    random_factor = pairs.size / tiny.num_nodes  # distinct (vertex, part) clones per vertex
    assert book.manifest["summary"]["replication_factor"] < 0.75 * random_factor


def test_reverse_edges_native_matches_reference(tiny, monkeypatch):
    native = reverse_edges(tiny.indptr, tiny.indices)
    monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
    load_kernel_file.cache_clear()
    try:
        reference = reverse_edges(tiny.indptr, tiny.indices)
    finally:
        load_kernel_file.cache_clear()
    assert np.array_equal(native, reference)
    src = np.asarray(tiny.indices)
    dst = np.repeat(np.arange(tiny.num_nodes), np.diff(tiny.indptr))
    assert np.array_equal(src[native], dst) and np.array_equal(dst[native], src)
