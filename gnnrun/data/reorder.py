"""Locality-aware vertex order: renumbering a graph so that neighbours get nearby ids.

Aggregation gathers one feature row per edge. When the ids of a vertex's
neighbours are scattered over the whole graph, every gather is a cache miss
and often a TLB miss; when neighbours have nearby ids, the rows they gather
share cache lines, pages and (between consecutive destinations) the cache
itself. A vertex order is a permutation `order` with `order[new] = old`;
`renumber` applies it to the whole dataset (CSR, features, labels, splits) and
keeps `input_ids`, the id each vertex had in the source, so that results can
be reported in the source's ids.

Orders:
- `none`: the source's order.
- `degree`: by decreasing total degree (in + out): the hubs, which most edges
  gather, share the first pages and stay in cache. O(n log n).
- `rcm`: reverse Cuthill-McKee over the symmetrised graph (scipy): a
  breadth-first order from a peripheral vertex that keeps every edge's two ends
  close (a small bandwidth), so consecutive destinations gather overlapping
  rows. O(m) time and a symmetrised copy of the structure in memory.
- `metis`: METIS cuts the graph into parts of about `METIS_PART_VERTICES`
  vertices with few edges between them, and the parts are numbered one after
  the other (the source's order inside a part). On a graph with communities
  most of a vertex's neighbours then lie in its own part, whose rows stay in
  cache while its destinations are aggregated. The slowest to compute (seconds
  per million edges), once, when the dataset is prepared.

Partitions are built from the prepared dataset and keep each part's vertices in
the dataset's order, so a reordered dataset also gives local orders with
locality.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import index_dtype
from gnnrun.errors import GnnrunError
from gnnrun.registry import Registry

VertexOrder = Callable[[np.ndarray, np.ndarray], np.ndarray]

VERTEX_ORDERS: Registry[VertexOrder | None] = Registry("vertex order")


def _register(name: str, order: VertexOrder | None) -> None:
    VERTEX_ORDERS.register(name)(order)


# Vertices per METIS part: 4096 rows of 128 float32 columns are 2 MiB, a core's L2. On a
# 500k-vertex graph with 32 communities, 32 to 2048 parts gave the same aggregation time;
# more parts only cost METIS time.
METIS_PART_VERTICES = 4096
METIS_MAX_PARTS = 1024


def symmetric_pattern(indptr: np.ndarray, indices: np.ndarray):
    """The scipy CSR pattern of A + A^T (no self-loops in, none out)."""
    import scipy.sparse as sp

    n = indptr.shape[0] - 1
    pattern = sp.csr_matrix(
        (np.ones(indices.shape[0], dtype=np.int8), np.asarray(indices), np.asarray(indptr)),
        shape=(n, n),
    )
    return (pattern + pattern.T).tocsr()


def degree_order(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Vertices by decreasing in + out degree; ties keep the source's order."""
    n = indptr.shape[0] - 1
    degree = np.diff(indptr) + np.bincount(np.asarray(indices), minlength=n)
    return np.argsort(-degree, kind="stable")


def rcm_order(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Reverse Cuthill-McKee over the pattern of A + A^T."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    symmetric = symmetric_pattern(indptr, indices)
    return np.asarray(reverse_cuthill_mckee(symmetric, symmetric_mode=True), dtype=np.int64)


def metis_order(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Vertices by METIS part (parts of about METIS_PART_VERTICES vertices), then by id."""
    import pymetis

    n = indptr.shape[0] - 1
    if n < 2:
        return np.arange(n, dtype=np.int64)
    num_parts = min(max(n // METIS_PART_VERTICES, 2), METIS_MAX_PARTS)
    symmetric = symmetric_pattern(indptr, indices)
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(
            np.ascontiguousarray(symmetric.indptr, dtype=np.int64),
            np.ascontiguousarray(symmetric.indices, dtype=np.int64),
        ),
        options=pymetis.Options(seed=0),
    )
    return np.argsort(np.frombuffer(result.vertex_part, dtype=np.int64), kind="stable")


_register("none", None)
_register("degree", degree_order)
_register("rcm", rcm_order)
_register("metis", metis_order)


def vertex_order(indptr: np.ndarray, indices: np.ndarray, method: str) -> np.ndarray | None:
    """`order[new] = old` for `method` (a name in VERTEX_ORDERS); None for `none`."""
    order = VERTEX_ORDERS.get(method)
    return None if order is None else order(indptr, indices)


def inverse(order: np.ndarray) -> np.ndarray:
    """`new_id[old] = new` of `order[new] = old`."""
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.shape[0], dtype=order.dtype)
    return new_id


def permute_csr(
    indptr: np.ndarray, indices: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The in-CSR of the graph with vertex `order[i]` renamed `i`, rows sorted as before."""
    import scipy.sparse as sp

    n = indptr.shape[0] - 1
    new_id = inverse(order)
    lengths = np.diff(indptr)[order]
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_indptr[1:])
    positions = np.repeat(indptr[order] - new_indptr[:-1], lengths) + np.arange(
        new_indptr[-1], dtype=np.int64
    )
    new_indices = new_id[np.asarray(indices)[positions]].astype(index_dtype(n))
    # scipy sorts each row's indices in place, in C (one sort of all edges by key is ~5x slower).
    rows = sp.csr_matrix(
        (np.empty(new_indices.shape[0], dtype=np.int8), new_indices, new_indptr), shape=(n, n)
    )
    rows.has_sorted_indices = False
    rows.sort_indices()
    return new_indptr, rows.indices.astype(index_dtype(n), copy=False)


def median_edge_span(indptr: np.ndarray, indices: np.ndarray) -> float:
    """Median |u - v| over the edges u -> v: how far apart in id (and memory) neighbours are."""
    if indices.shape[0] == 0:
        return 0.0
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    return float(np.median(np.abs(np.asarray(indices, dtype=np.int64) - dst)))


def renumber(dataset: GraphDataset, method: str) -> GraphDataset:
    """`dataset` in the vertex order `method`, with `input_ids` mapping back to the source's
    ids and the order's figures in `info["reorder"]`; `dataset` itself for `none`."""
    if method == "none":
        return dataset
    if dataset.hetero is not None:
        raise GnnrunError(
            f"dataset.reorder={method}: {dataset.name} is heterogeneous, and its vertex types "
            "keep consecutive id ranges; leave dataset.reorder out (none)"
        )
    start = time.perf_counter()
    order = vertex_order(dataset.indptr, dataset.indices, method)
    if order is None:
        return dataset
    new_id = inverse(order)
    indptr, indices = permute_csr(dataset.indptr, dataset.indices, order)

    def split(ids: np.ndarray) -> np.ndarray:
        return np.sort(new_id[np.asarray(ids)])

    previous = dataset.input_ids
    reordered = dataclasses.replace(
        dataset,
        indptr=indptr,
        indices=indices,
        feat=np.asarray(dataset.feat)[order],
        label=np.asarray(dataset.label)[order],
        train_idx=split(dataset.train_idx),
        val_idx=split(dataset.val_idx),
        test_idx=split(dataset.test_idx),
        input_ids=order if previous is None else np.asarray(previous)[order],
        info=dict(dataset.info),
        checksum=None,
        path=None,
    )
    reordered.info["reorder"] = {
        "method": method,
        "seconds": round(time.perf_counter() - start, 3),
        "median_edge_span_before": median_edge_span(dataset.indptr, dataset.indices),
        "median_edge_span_after": median_edge_span(indptr, indices),
    }
    return reordered
