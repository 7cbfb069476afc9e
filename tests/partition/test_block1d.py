"""block1d: renumbered row blocks of GCN's normalised adjacency, split into column tiles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges
from gnnrun.errors import GnnrunError
from gnnrun.models.gcn import GCNConv
from gnnrun.ops.block import Block
from gnnrun.partition import check_partition_kind, partition_dataset
from gnnrun.partition.block1d import (
    Block1DPartitionerConfig,
    block1d_partition,
    block_bounds,
    nonzero_balance,
)
from gnnrun.partition.book import open_partition
from gnnrun.partition.metis import MetisPartitionerConfig


def whole_matrix(book, prefix: str = "tile") -> torch.Tensor:
    """Â in original ids, put together from every part's tiles (prefix "tile_t": Â's
    transpose, from the transposed tiles)."""
    n = int(book.manifest["dataset"]["num_nodes"])
    bounds = book.manifest["summary"]["block_bounds"]
    dense = torch.zeros(n, n, dtype=torch.float64)
    for part in range(book.num_parts):
        arrays = book.load_part(part)
        nodes, indptr = np.asarray(arrays["nodes"]), np.asarray(arrays[f"{prefix}_indptr"])
        height = nodes.size
        stacked_row = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        tile, row = stacked_row // height, stacked_row % height
        order = np.concatenate(
            [np.asarray(book.load_part(p)["nodes"]) for p in range(book.num_parts)]
        )
        column = order[np.asarray(bounds)[tile] + np.asarray(arrays[f"{prefix}_indices"])]
        values = torch.from_numpy(np.asarray(arrays[f"{prefix}_values"], dtype=np.float64))
        dense.index_put_(
            (torch.from_numpy(nodes[row]), torch.from_numpy(column)), values, accumulate=True
        )
    return dense


def gcn_propagation(dataset, x: torch.Tensor) -> torch.Tensor:
    """Â x as the GCN model computes it on the whole graph (identity weight, no bias)."""
    layer = GCNConv(x.shape[1], x.shape[1]).to(x.dtype)
    with torch.no_grad():
        layer.linear.weight.copy_(torch.eye(x.shape[1]))
        return layer(Block.from_csr(dataset.indptr, dataset.indices), x)


@pytest.mark.parametrize("num_parts", [1, 3, 4])
def test_parts_round_trip_and_hold_the_models_matrix(tiny, tmp_path, num_parts):
    book = partition_dataset(
        tiny, Block1DPartitionerConfig(num_parts=num_parts, seed=3), tmp_path / "p"
    )
    book = open_partition(book.path, kind="block1d", world_size=num_parts)
    owner, local = np.asarray(book.node_owner()), np.asarray(book.node_local())
    nodes = [np.asarray(book.load_part(p)["nodes"]) for p in range(num_parts)]
    rows = [n.size for n in nodes]
    assert max(rows) - min(rows) <= 1 and sum(rows) == tiny.num_nodes
    for v in (0, 1, 17, tiny.num_nodes - 1):
        assert nodes[owner[v]][local[v]] == v
    every = np.concatenate(nodes)
    assert not np.array_equal(every, np.arange(tiny.num_nodes)) or num_parts == 1
    assert np.array_equal(np.sort(every), np.arange(tiny.num_nodes))
    part = book.load_part(num_parts - 1)
    np.testing.assert_array_equal(part["feat"], tiny.feat[nodes[-1]])
    np.testing.assert_array_equal(
        np.sort(nodes[-1][part["train_idx"]]), np.intersect1d(tiny.train_idx, nodes[-1])
    )
    # The tiles put together are the matrix GCNConv multiplies by.
    x = torch.from_numpy(np.asarray(tiny.feat, dtype=np.float64))
    expected = gcn_propagation(tiny, x)
    torch.testing.assert_close(whole_matrix(book) @ x, expected, rtol=1e-5, atol=1e-6)
    assert book.manifest["summary"]["symmetric"] is True
    assert "tile_t_indptr" not in part.arrays


def test_directed_graph_stores_the_transposed_tiles(tmp_path):
    src = np.array([0, 0, 1, 2, 3, 4, 4, 5])
    dst = np.array([1, 2, 2, 0, 0, 0, 5, 3])
    indptr, indices = csr_from_edges(src, dst, 6, symmetrize=False)
    dataset = GraphDataset(
        name="arrows",
        indptr=indptr,
        indices=indices,
        feat=np.eye(6, dtype=np.float32),
        label=np.zeros(6, dtype=np.int64),
        train_idx=np.arange(6),
        val_idx=np.arange(0),
        test_idx=np.arange(0),
        num_classes=2,
        directed=True,
        checksum="0" * 64,
    )
    book = partition_dataset(dataset, Block1DPartitionerConfig(num_parts=2), tmp_path / "p")
    assert book.manifest["summary"]["symmetric"] is False
    forward = whole_matrix(book)
    expected = gcn_propagation(dataset, torch.eye(6, dtype=torch.float64))
    torch.testing.assert_close(forward, expected, rtol=1e-6, atol=1e-7)
    assert not torch.equal(expected, expected.T)
    torch.testing.assert_close(whole_matrix(book, "tile_t"), expected.T, rtol=1e-6, atol=1e-7)


def chung_lu_hubs_first(num_nodes: int, num_edges: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """An undirected Chung-Lu graph whose ids follow decreasing expected degree, as in
    graphs numbered by degree or crawl order."""
    rng = np.random.default_rng(seed)
    weight = np.sort(rng.pareto(1.5, size=num_nodes) + 1.0)[::-1]
    weight = np.minimum(weight, 0.01 * num_nodes)
    p = weight / weight.sum()
    src = rng.choice(num_nodes, num_edges, p=p)
    dst = rng.choice(num_nodes, num_edges, p=p)
    keep = src != dst
    return csr_from_edges(src[keep], dst[keep], num_nodes, symmetrize=True)


@pytest.mark.parametrize("num_parts", [4, 8])
def test_permutation_balances_non_zeros_over_row_blocks(num_parts):
    n = 20_000
    indptr, indices = chung_lu_hubs_first(n, 200_000, seed=1)
    own = nonzero_balance(indptr, indices, np.arange(n), num_parts)
    position = np.random.default_rng(0).permutation(n)
    permuted = nonzero_balance(indptr, indices, position, num_parts)
    print(f"P={num_parts}: own order {own}, permuted {permuted}")
    assert own["row_blocks"] > 1.5  # the hubs pile up in the first block
    assert permuted["row_blocks"] <= 1.1
    assert permuted["tiles"] < own["tiles"]


def test_balance_figures_count_every_non_zero_of_a_hand_built_graph():
    # A star around vertex 0 plus self loops: 4 vertices, 2 blocks of 2 rows.
    indptr, indices = csr_from_edges(np.array([0, 0, 0]), np.array([1, 2, 3]), 4, True)
    balance = nonzero_balance(indptr, indices, np.arange(4), 2)
    # Rows 0-1: (3 + 1) + (1 + 1) = 6 non-zeros, rows 2-3: 4; mean 5.
    assert balance["row_blocks"] == pytest.approx(6 / 5)
    # Tiles (0,0): 0-1, 1-0, 2 loops = 4; (0,1): 0-2, 0-3 = 2; (1,0): 2; (1,1): 2 loops.
    assert balance["tiles"] == pytest.approx(4 / 2.5)
    assert block_bounds(10, 4).tolist() == [0, 3, 6, 8, 10]


def test_assignment_reports_both_orders_and_permute_false_keeps_the_order(tiny):
    kept = block1d_partition(tiny, Block1DPartitionerConfig(num_parts=4, permute=False))
    assert np.array_equal(kept.parts, np.arange(tiny.num_nodes))
    assert kept.info["nonzero_imbalance"] == kept.info["nonzero_imbalance_own_order"]
    permuted = block1d_partition(tiny, Block1DPartitionerConfig(num_parts=4, seed=5))
    assert sorted(permuted.parts.tolist()) == list(range(tiny.num_nodes))
    assert set(permuted.info["nonzero_imbalance"]) == {"row_blocks", "tiles"}


def test_spmm1d_refuses_other_partitioners():
    with pytest.raises(
        GnnrunError, match="trains on block1d partitions: choose partitioner= one of block1d"
    ):
        check_partition_kind(
            MetisPartitionerConfig(name="metis"), "block1d", "algorithm=spmm1d trains"
        )
