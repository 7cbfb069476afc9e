"""Libra vertex cut (DistGNN section 5.1): stream the edges, each to the least-loaded relevant part.

For an undirected graph both directions of an edge go to the same part (one
decision per vertex pair), so aggregation and its transpose stay local. The
stream order is a seeded permutation: Libra's greedy is order-sensitive, and a
sorted order would pile whole neighbourhoods onto one part.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.config import PartitionerConfig
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import edges_from_csr
from gnnrun.ops.native import native_kernels
from gnnrun.partition import PARTITIONERS, Assignment

# A part may run this far above the average load before an edge goes to the
# globally least-loaded part instead (keeps edge counts within a few percent).
BALANCE_SLACK = 0.05


def libra_assign_reference(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, slack: float) -> np.ndarray:
    """Pure-Python Libra: the test oracle for the native kernel and its fallback."""
    held = [0] * num_nodes
    load = [0] * num_parts
    everything = (1 << num_parts) - 1
    out = np.empty(src.size, dtype=np.int8)

    def least_loaded(mask: int) -> int:
        return min((p for p in range(num_parts) if mask >> p & 1), key=lambda p: (load[p], p))

    for e, (u, v) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        candidates = (held[u] & held[v]) or (held[u] | held[v]) or everything
        p = least_loaded(candidates)
        if load[p] > (1.0 + slack) * e / num_parts + 1.0:
            p = least_loaded(everything)
        out[e] = p
        load[p] += 1
        held[u] |= 1 << p
        held[v] |= 1 << p
    return out


def libra_assign(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, slack: float = BALANCE_SLACK) -> np.ndarray:
    kernels = native_kernels()
    if kernels is None:
        return libra_assign_reference(src, dst, num_nodes, num_parts, slack)
    return kernels.libra_assign(
        torch.from_numpy(np.ascontiguousarray(src, dtype=np.int64)),
        torch.from_numpy(np.ascontiguousarray(dst, dtype=np.int64)),
        num_nodes,
        num_parts,
        slack,
    ).numpy()


@PARTITIONERS.register("libra")
def libra_partition(dataset: GraphDataset, cfg: PartitionerConfig) -> Assignment:
    n = dataset.num_nodes
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    if dataset.directed:
        stream = np.random.default_rng(cfg.seed).permutation(src.size)
        edge_part = np.empty(src.size, dtype=np.int8)
        edge_part[stream] = libra_assign(src[stream], dst[stream], n, cfg.num_parts)
        return Assignment("vertex_cut", edge_part)
    # Undirected: decide once per pair {u, v}. CSR order sorts edges by (dst, src),
    # so the pairs (src < dst) are sorted by the key dst * n + src.
    forward = src < dst
    pair_keys = dst[forward] * n + src[forward]
    stream = np.random.default_rng(cfg.seed).permutation(pair_keys.size)
    pair_part = np.empty(pair_keys.size, dtype=np.int8)
    pair_part[stream] = libra_assign(src[forward][stream], dst[forward][stream], n, cfg.num_parts)
    edge_part = np.empty(src.size, dtype=np.int8)
    edge_part[forward] = pair_part
    backward = ~forward
    edge_part[backward] = pair_part[np.searchsorted(pair_keys, src[backward] * n + dst[backward])]
    return Assignment("vertex_cut", edge_part)
