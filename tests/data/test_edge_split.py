"""Held-out edges for link prediction: disjoint, whole pairs, reproducible, absent from the
message-passing graph in both directions."""

from __future__ import annotations

import numpy as np
import pytest

from gnnrun.data.edge_split import split_edges
from gnnrun.data.graph import csr_from_edges, edges_from_csr
from gnnrun.data.synthetic import SyntheticDatasetConfig, generate


@pytest.fixture(scope="module")
def undirected():
    dataset = generate(SyntheticDatasetConfig(name="t", num_nodes=500, avg_degree=8))
    return dataset.indptr, dataset.indices


def pairs(edges: np.ndarray, n: int) -> np.ndarray:
    """Each edge as one key of its unordered vertex pair."""
    low, high = np.minimum(edges[0], edges[1]), np.maximum(edges[0], edges[1])
    return low * n + high


def test_an_undirected_split_keeps_pairs_whole_and_out_of_the_graph(undirected):
    indptr, indices = undirected
    n = indptr.size - 1
    split = split_edges(indptr, indices, False, 0.1, 0.2, seed=3, num_negatives=7)
    train, val, test = (pairs(e, n) for e in (split.train, split.val, split.test))
    everything = pairs(np.stack(edges_from_csr(indptr, indices)), n)
    assert np.array_equal(np.sort(np.concatenate([train, val, test])), np.unique(everything))
    assert len(set(train) | set(val) | set(test)) == train.size + val.size + test.size
    assert val.size == round(0.1 * everything.size / 2) and test.size == round(
        0.2 * everything.size / 2
    )
    graph = pairs(np.stack(edges_from_csr(split.indptr, split.indices)), n)
    assert set(graph) == set(train)  # both directions of every training pair, nothing held out
    assert graph.size == 2 * train.size
    assert split.val_negatives.shape == (val.size, 7) and split.test_negatives.shape == (
        test.size,
        7,
    )
    assert split.test_negatives.min() >= 0 and split.test_negatives.max() < n


def test_the_same_seed_gives_the_same_split_and_another_another(undirected):
    indptr, indices = undirected
    first = split_edges(indptr, indices, False, 0.1, 0.1, seed=1, num_negatives=5)
    again = split_edges(indptr, indices, False, 0.1, 0.1, seed=1, num_negatives=5)
    other = split_edges(indptr, indices, False, 0.1, 0.1, seed=2, num_negatives=5)
    for name in ("indptr", "indices", "train", "val", "test", "val_negatives", "test_negatives"):
        assert np.array_equal(getattr(first, name), getattr(again, name)), name
    assert not np.array_equal(first.test, other.test)


def test_a_directed_split_is_by_edge():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 100, 800), rng.integers(0, 100, 800)
    indptr, indices = csr_from_edges(src, dst, 100, symmetrize=False)
    split = split_edges(indptr, indices, True, 0.25, 0.25, seed=0, num_negatives=3)
    keys = [e[1] * 100 + e[0] for e in (split.train, split.val, split.test)]
    graph_src, graph_dst = edges_from_csr(split.indptr, split.indices)
    assert np.array_equal(np.sort(graph_dst * 100 + graph_src), np.sort(keys[0]))
    assert sum(k.size for k in keys) == indices.size
    assert not set(keys[1]) & set(keys[0]) and not set(keys[2]) & set(keys[0])


def test_fractions_that_leave_no_training_edges_are_refused(undirected):
    with pytest.raises(ValueError, match="leave training edges"):
        split_edges(*undirected, False, 0.5, 0.5, seed=0, num_negatives=1)
