"""Libra vertex cut (DistGNN section 5.1): stream the edges, each to the least-loaded relevant part.

An edge goes to the least-loaded part among those holding both its endpoints;
when they share none, `partitioner.rule` decides: `lower_degree` (DistGNN's
released code) takes the parts of the endpoint with the lower degree, so that
the hubs are the vertices replicated; `union` (the paper's text) takes the
parts of either endpoint. An edge with no endpoint placed goes to the
least-loaded part of all. `partitioner.balance_slack` passes over a part that
runs that fraction above the average load (gnnrun's addition; null: never, as
in the released code).

For an undirected graph both directions of an edge go to the same part (one
decision per vertex pair), so aggregation and its transpose stay local. The
stream order is a seeded permutation: Libra's greedy is order-sensitive, and a
sorted order would pile whole neighbourhoods onto one part.
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


@dataclass
class LibraPartitionerConfig(PartitionerConfig):
    name: str = "libra"
    rule: str = "lower_degree"  # endpoints sharing no part: see the module docstring
    balance_slack: float | None = BALANCE_SLACK

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


def libra_assign_reference(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    num_parts: int,
    slack: float,
    degree: np.ndarray | None = None,
) -> np.ndarray:
    """Pure-Python Libra: the test oracle for the native kernel and its fallback. `degree`
    given: the `lower_degree` rule; None: `union`. `slack` math.inf: no balancing."""
    held = [0] * num_nodes
    load = [0] * num_parts
    everything = (1 << num_parts) - 1
    out = np.empty(src.size, dtype=np.int8)

    def least_loaded(mask: int) -> int:
        return min((p for p in range(num_parts) if mask >> p & 1), key=lambda p: (load[p], p))

    for e, (u, v) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        candidates = held[u] & held[v]
        if not candidates and held[u] and held[v] and degree is not None:
            candidates = held[u] if degree[u] < degree[v] else held[v]
        candidates = candidates or (held[u] | held[v]) or everything
        p = least_loaded(candidates)
        if load[p] > (1.0 + slack) * e / num_parts + 1.0:
            p = least_loaded(everything)
        out[e] = p
        load[p] += 1
        held[u] |= 1 << p
        held[v] |= 1 << p
    return out


def libra_assign(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    num_parts: int,
    slack: float = BALANCE_SLACK,
    degree: np.ndarray | None = None,
) -> np.ndarray:
    """The part of every edge of the stream (src[i], dst[i]); see libra_assign_reference."""
    op = native_op("libra_assign", "libra")
    if op is None:
        return libra_assign_reference(src, dst, num_nodes, num_parts, slack, degree)
    return op(
        to_tensor(src, np.int64),
        to_tensor(dst, np.int64),
        num_nodes,
        num_parts,
        slack,
        None if degree is None else to_tensor(degree, np.int64),
    ).numpy()


@register_partitioner("libra", "vertex_cut", LibraPartitionerConfig)
def libra_partition(dataset: GraphDataset, cfg: LibraPartitionerConfig) -> Assignment:
    n = dataset.num_nodes
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    degree = np.diff(dataset.indptr)  # an undirected graph stores both directions
    if dataset.directed:
        degree = degree + np.bincount(src, minlength=n)
    slack = math.inf if cfg.balance_slack is None else cfg.balance_slack

    def assign(stream: np.ndarray) -> np.ndarray:
        return libra_assign(
            src[stream],
            dst[stream],
            n,
            cfg.num_parts,
            slack,
            degree if cfg.rule == "lower_degree" else None,
        )

    edge_part = np.full(src.size, -1, dtype=np.int8)
    if dataset.directed:
        stream = np.random.default_rng(cfg.seed).permutation(src.size)
        edge_part[stream] = assign(stream)
    else:
        # Decide once per pair {u, v} (the edge with src <= dst: a self-loop is its own
        # reverse) and give the reverse edge the same part.
        forward = np.flatnonzero(src <= dst)
        stream = forward[np.random.default_rng(cfg.seed).permutation(forward.size)]
        edge_part[stream] = assign(stream)
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
