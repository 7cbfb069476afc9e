"""Held-out edges for link prediction: a seeded train / validation / test split of a graph's edges.

An undirected graph (both directions stored) is split by vertex pair: {u, v}
goes to one split whole, and a held-out pair leaves the message-passing graph
in both directions, so that no model aggregates over an edge it is asked to
predict. A directed graph is split edge by edge. Each validation and test edge
(u, v) gets `num_negatives` fixed negatives (u, w), w drawn uniformly over the
vertices (OGB's ogbl-citation2 convention; a w may happen to be a true
neighbour), against which MRR and Hits@K rank it (gnnrun.train.link_metrics).
The same graph, fractions and seed give the same split and negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnrun.data.graph import csr_from_edges, edges_from_csr


@dataclass
class EdgeSplit:
    indptr: np.ndarray  # the message-passing graph: the training edges only (in-CSR)
    indices: np.ndarray
    train: np.ndarray  # [2, E] (source, destination); one direction per undirected pair
    val: np.ndarray  # [2, E]
    test: np.ndarray  # [2, E]
    val_negatives: np.ndarray  # [E_val, k] negative destinations of each validation edge
    test_negatives: np.ndarray  # [E_test, k]


def split_edges(
    indptr: np.ndarray,
    indices: np.ndarray,
    directed: bool,
    val_fraction: float,
    test_fraction: float,
    seed: int,
    num_negatives: int,
) -> EdgeSplit:
    """Split the in-CSR graph's edges (pairs, when undirected) as the module docstring says."""
    if min(val_fraction, test_fraction) < 0 or val_fraction + test_fraction >= 1:
        raise ValueError(
            f"held-out fractions {val_fraction} + {test_fraction} must be >= 0 and leave "
            "training edges"
        )
    n = indptr.shape[0] - 1
    src, dst = edges_from_csr(indptr, indices)
    if not directed:  # each pair once, as (smaller id, larger id)
        keep = src < dst
        src, dst = src[keep], dst[keep]
    rng = np.random.default_rng(seed)
    order = rng.permutation(src.size)
    num_val = int(round(val_fraction * src.size))
    num_test = int(round(test_fraction * src.size))
    parts = np.split(order, [num_val, num_val + num_test])
    val, test, train = (np.stack([src[np.sort(p)], dst[np.sort(p)]]) for p in parts)
    graph_indptr, graph_indices = csr_from_edges(train[0], train[1], n, symmetrize=not directed)
    return EdgeSplit(
        indptr=graph_indptr,
        indices=graph_indices,
        train=train,
        val=val,
        test=test,
        val_negatives=rng.integers(0, n, size=(val.shape[1], num_negatives)),
        test_negatives=rng.integers(0, n, size=(test.shape[1], num_negatives)),
    )
