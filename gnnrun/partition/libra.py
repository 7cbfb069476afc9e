"""Libra vertex cut (DistGNN section 5.1): stream the edges, each to the least-loaded relevant part.

An edge goes to the least-loaded part among those holding both its endpoints;
when they share none, `partitioner.rule` decides: `lower_degree` (DistGNN's
released code) takes the parts of the endpoint with the lower degree, so that
the hubs are the vertices replicated; `union` (the paper's text) takes the
parts of either endpoint. An edge with no endpoint placed goes to the
least-loaded part of all. `partitioner.balance_slack` passes over a part that
runs that fraction above the average load (gnnrun's addition; null: never, as
in the released code).

The stream runs in rounds of parallel streams, so that the job's ranks can run it
(gnnrun.partition.distributed_libra) and get the partition one process makes, whatever
their number. Every edge {u, v} gets a seeded 64-bit hash h of its endpoints; its
stream is h mod `partitioner.streams`, its round the top bits of h scaled to
`partitioner.rounds`, and within a round and stream the edges go in the order of h
(a seeded random order: Libra's greedy is order-sensitive, and a sorted order would pile
whole neighbourhoods onto one part). Each stream of a round starts from the replica
masks and loads of the round's start plus its own changes; at the round's end all
changes are merged. The streams and rounds are settings of their own, not the number
of ranks, so the assignment depends on the seed and the settings alone. With one stream
and one round it is the sequential greedy of the paper.

For an undirected graph both directions of an edge go to the same part (one
decision per vertex pair, the edge with src <= dst), so aggregation and its transpose
stay local.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import edges_from_csr
from gnnrun.ops.native import native_op, to_tensor
from gnnrun.partition.registry import Assignment, PartitionerConfig, register_partitioner

# A part may run this far above the average load before an edge goes to the
# globally least-loaded part instead (keeps edge counts within a few percent).
BALANCE_SLACK = 0.05
RULES = ("lower_degree", "union")
# Streams per round: the parallelism the ranks can use (up to this many ranks are busy).
STREAMS = 64
# Rounds the stream is cut into: the replica state is merged between rounds, so fewer,
# larger rounds replicate more (docs/partitions.md has the figures).
ROUNDS = 1024
# rounds * streams buckets of the hash's top 32 bits (`stream_keys`), whose product with
# them must fit in 64 bits.
MAX_BUCKETS = 1 << 30


@dataclass
class LibraPartitionerConfig(PartitionerConfig):
    name: str = "libra"
    rule: str = "lower_degree"  # endpoints sharing no part: see the module docstring
    balance_slack: float | None = BALANCE_SLACK
    streams: int = STREAMS  # parallel streams per round (not the number of ranks)
    rounds: int = ROUNDS  # rounds of the stream; the replica state is merged between them

    def validate(self) -> None:
        super().validate()
        # The parts holding a vertex are one 64-bit mask per vertex.
        check(self.num_parts <= 64, f"libra supports at most 64 parts, not {self.num_parts}")
        check(
            self.rule in RULES,
            f"partitioner.rule {self.rule!r}: choose one of {', '.join(RULES)}",
        )
        check(
            self.balance_slack is None or self.balance_slack >= 0,
            f"partitioner.balance_slack must be >= 0 or null (no balancing), "
            f"not {self.balance_slack}",
        )
        check(self.streams >= 1, f"partitioner.streams must be at least 1, not {self.streams}")
        check(self.rounds >= 1, f"partitioner.rounds must be at least 1, not {self.rounds}")
        check(
            self.streams * self.rounds <= MAX_BUCKETS,
            f"partitioner.streams x partitioner.rounds must be at most {MAX_BUCKETS:,}, not "
            f"{self.streams * self.rounds:,}: choose fewer rounds",
        )

    @property
    def slack(self) -> float:
        return math.inf if self.balance_slack is None else self.balance_slack


def _seed_key(seed: int) -> np.uint64:
    return np.uint64(np.random.default_rng([seed, 0x6C696272]).integers(0, 2**63, dtype=np.uint64))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment (odd: a bijection)


def stream_keys(
    u: np.ndarray, v: np.ndarray, num_nodes: int, seed: int, streams: int, rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    """(h, group) of each edge (u[i], v[i]), functions of the edge alone, so any process
    computes them for its edges. h is a seeded hash, one-to-one on the pairs (splitmix64
    of u * N + v: distinct pairs never tie). The group, round * streams + stream, is h's
    top 32 bits scaled to rounds * streams buckets: it grows with h, so sorting the edges
    by h alone puts them in stream order (by round, stream, then h)."""
    h = np.asarray(u, dtype=np.int64) * num_nodes
    h += np.asarray(v, dtype=np.int64)
    h = h.view(np.uint64)
    # splitmix64 in place (random._mix's steps without its temporaries: this is most of
    # one-process Libra's time on a large graph otherwise).
    t = np.empty_like(h)
    h *= _GOLDEN
    h += _seed_key(seed)
    for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
        np.right_shift(h, np.uint64(shift), out=t)
        h ^= t
        if factor is not None:
            h *= np.uint64(factor)
    del t
    buckets = np.uint64(rounds * streams)  # at most 2^30: the product fits in 64 bits
    group = ((h >> np.uint64(32)) * buckets) >> np.uint64(32)
    return h, group.astype(np.int64)


def stream_order(h: np.ndarray) -> np.ndarray:
    """The positions of the edges in stream order: by h (`stream_keys`). Only equal pairs
    have equal hashes, so the order of the pairs is the same in any process."""
    return np.argsort(h)


def group_bounds(sorted_groups: np.ndarray, streams: int) -> tuple[np.ndarray, np.ndarray]:
    """(bounds, stream) of the groups of edges sorted by group: group g is the edges
    [bounds[g], bounds[g + 1]) of stream stream[g]."""
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    if not sorted_groups.size:
        starts = np.zeros(0, np.int64)
    bounds = np.r_[starts, sorted_groups.size].astype(np.int64)
    return bounds, (sorted_groups[starts] % streams).astype(np.int64)


def libra_stream_reference(
    src: np.ndarray,
    dst: np.ndarray,
    bounds: np.ndarray,
    stream: np.ndarray,
    round_groups: np.ndarray,
    masks: np.ndarray,
    load: np.ndarray,
    num_parts: int,
    slack: float,
    scale: float,
    degree: np.ndarray | None = None,
) -> np.ndarray:
    """Pure-Python Libra in rounds of streams: the test oracle for the native kernel and its
    fallback. Edges [bounds[g], bounds[g + 1]) are stream stream[g]'s; round r is groups
    [round_groups[r], round_groups[r + 1]). `masks` (part bits per vertex, int64) and `load`
    are updated in place. `degree` given: the `lower_degree` rule; None: `union`. `slack`
    math.inf: no balancing. A stream sees the loads of the round's start plus `scale` times
    its own; ties go to the first part counting from its stream mod num_parts."""
    held = [int(x) & (2**64 - 1) for x in masks.tolist()]
    total = [int(x) for x in load.tolist()]
    everything = (1 << num_parts) - 1
    out = np.empty(src.size, dtype=np.int8)
    s_, d_ = src.tolist(), dst.tolist()

    def least_loaded(mask: int, view: list[float], first: int) -> int:
        return min(
            (p for p in range(num_parts) if mask >> p & 1),
            key=lambda p: (view[p], (p - first) % num_parts),
        )

    for r in range(round_groups.size - 1):
        start = list(total)
        before = sum(start)
        merged: dict[int, int] = {}
        for g in range(int(round_groups[r]), int(round_groups[r + 1])):
            delta: dict[int, int] = {}
            view = [float(x) for x in start]
            first = int(stream[g]) % num_parts
            for count, e in enumerate(range(int(bounds[g]), int(bounds[g + 1]))):
                u, v = s_[e], d_[e]
                hu, hv = held[u] | delta.get(u, 0), held[v] | delta.get(v, 0)
                candidates = hu & hv
                if not candidates and hu and hv and degree is not None:
                    candidates = hu if degree[u] < degree[v] else hv
                candidates = candidates or (hu | hv) or everything
                p = least_loaded(candidates, view, first)
                if view[p] > (1.0 + slack) * (before + scale * count) / num_parts + 1.0:
                    p = least_loaded(everything, view, first)
                out[e] = p
                view[p] += scale
                total[p] += 1
                delta[u] = delta.get(u, 0) | 1 << p
                delta[v] = delta.get(v, 0) | 1 << p
            for x, bits in delta.items():
                merged[x] = merged.get(x, 0) | bits
        for x, bits in merged.items():
            held[x] |= bits
    masks[:] = np.array(held, dtype=np.uint64).view(np.int64)
    load[:] = total
    return out


def libra_stream(
    src: np.ndarray,
    dst: np.ndarray,
    bounds: np.ndarray,
    stream: np.ndarray,
    round_groups: np.ndarray,
    masks: np.ndarray,
    load: np.ndarray,
    num_parts: int,
    slack: float,
    scale: float,
    degree: np.ndarray | None = None,
) -> np.ndarray:
    """The part of every edge (src[i], dst[i]) of the rounds of streams; `masks` and `load`
    (int64 arrays) updated in place. See libra_stream_reference."""
    op = native_op("libra_stream", "libra")
    if op is None:
        return libra_stream_reference(
            src, dst, bounds, stream, round_groups, masks, load, num_parts, slack, scale, degree
        )
    masks_t, load_t = to_tensor(masks, np.int64), to_tensor(load, np.int64)
    out = op(
        to_tensor(src, np.int64),
        to_tensor(dst, np.int64),
        to_tensor(bounds, np.int64),
        to_tensor(stream, np.int64),
        to_tensor(round_groups, np.int64),
        masks_t,
        load_t,
        None if degree is None else to_tensor(degree, np.int64),
        num_parts,
        slack,
        scale,
    ).numpy()
    masks[:] = masks_t.numpy()  # no copy made when they were int64 already; else write back
    load[:] = load_t.numpy()
    return out


def libra_assign(
    u: np.ndarray,
    v: np.ndarray,
    num_nodes: int,
    cfg: LibraPartitionerConfig,
    degree: np.ndarray | None = None,
) -> np.ndarray:
    """The part of each edge (u[i], v[i]) (one per vertex pair) under cfg's rounds of
    streams, in one process; `degree` for the `lower_degree` rule."""
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    h, group = stream_keys(u, v, num_nodes, cfg.seed, cfg.streams, cfg.rounds)
    order = stream_order(h)
    del h
    sorted_groups = group[order]
    bounds, stream = group_bounds(sorted_groups, cfg.streams)
    round_groups = np.searchsorted(
        sorted_groups[bounds[:-1]] // cfg.streams, np.arange(cfg.rounds + 1)
    ).astype(np.int64)
    masks = np.zeros(num_nodes, dtype=np.int64)
    load = np.zeros(cfg.num_parts, dtype=np.int64)
    parts = libra_stream(
        u[order], v[order], bounds, stream, round_groups, masks, load,
        cfg.num_parts, cfg.slack, float(cfg.streams), degree,
    )  # fmt: skip
    out = np.empty_like(parts)
    out[order] = parts
    return out


def libra_degree(dataset: GraphDataset) -> np.ndarray:
    """Each vertex's degree, as the `lower_degree` rule compares them."""
    degree = np.diff(dataset.indptr)  # an undirected graph stores both directions
    if dataset.directed:
        src = np.asarray(dataset.indices, dtype=np.int64)
        degree = degree + np.bincount(src, minlength=dataset.num_nodes)
    return degree.astype(np.int64)


@register_partitioner("libra", "vertex_cut", LibraPartitionerConfig)
def libra_partition(dataset: GraphDataset, cfg: LibraPartitionerConfig) -> Assignment:
    n = dataset.num_nodes
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    degree = libra_degree(dataset) if cfg.rule == "lower_degree" else None
    edge_part = np.full(src.size, -1, dtype=np.int8)
    if dataset.directed:
        edge_part[:] = libra_assign(src, dst, n, cfg, degree)
    else:
        # Decide once per pair {u, v} (the edge with src <= dst: a self-loop is its own
        # reverse) and give the reverse edge the same part.
        forward = np.flatnonzero(src <= dst)
        edge_part[forward] = libra_assign(src[forward], dst[forward], n, cfg, degree)
        reverse = reverse_edges(dataset.indptr, dataset.indices)
        edge_part[reverse[forward]] = edge_part[forward]
    unset = int(np.count_nonzero(edge_part < 0))
    if unset:  # every edge is in the stream or the reverse of one that is
        raise AssertionError(f"libra left {unset} edges without a part")
    return Assignment(edge_part)


def reverse_edges(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Position of each edge's reverse in a symmetric CSR."""
    op = native_op("csr_reverse_edges", "libra")
    if op is None:
        # Stable by source keeps (src, dst) order, which in a symmetric graph is
        # the CSR order of the reverse edges.
        return np.argsort(np.asarray(indices), kind="stable")
    return op(to_tensor(indptr, np.int64), to_tensor(indices)).numpy()
