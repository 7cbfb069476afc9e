"""Vertex orders: each is a permutation, renumbering keeps the graph, ids map back, and the
prepared dataset records the order."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gnnrun.data import load_prepared, prepare_dataset
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import edges_from_csr
from gnnrun.data.prepare import dataset_identity
from gnnrun.data.reorder import VERTEX_ORDERS, inverse, permute_csr, renumber, vertex_order
from gnnrun.data.synthetic import SyntheticDatasetConfig
from gnnrun.errors import GnnrunError
from gnnrun.ops.aggregate import aggregate
from gnnrun.ops.block import Block

ORDERS = [name for name in VERTEX_ORDERS if name != "none"]


def tiny_cfg(tmp_path, **changes) -> SyntheticDatasetConfig:
    fields = {"name": "t", "num_nodes": 600, "avg_degree": 6, "num_classes": 4, "feat_dim": 8}
    return SyntheticDatasetConfig(**(fields | changes), prepared_dir=str(tmp_path / "t"))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> GraphDataset:
    return prepare_dataset(tiny_cfg(tmp_path_factory.mktemp("source")))


def edge_set(indptr, indices, ids=None) -> set[tuple[int, int]]:
    src, dst = edges_from_csr(np.asarray(indptr), np.asarray(indices))
    if ids is not None:
        src, dst = ids[src], ids[dst]
    return set(zip(src.tolist(), dst.tolist(), strict=True))


@pytest.mark.parametrize("method", ORDERS)
def test_every_order_is_a_permutation_that_moves_vertices(source, method):
    order = vertex_order(source.indptr, source.indices, method)
    assert np.array_equal(np.sort(order), np.arange(source.num_nodes))
    assert not np.array_equal(order, np.arange(source.num_nodes))
    assert vertex_order(source.indptr, source.indices, "none") is None


def test_degree_order_puts_the_hubs_first(source):
    order = vertex_order(source.indptr, source.indices, "degree")
    degree = np.diff(source.indptr) + np.bincount(source.indices, minlength=source.num_nodes)
    assert np.all(np.diff(degree[order]) <= 0)


def test_rcm_shrinks_the_edge_span_of_a_shuffled_path():
    n = 1000
    shuffled = np.random.default_rng(0).permutation(n)  # a path whose ids were shuffled
    src = np.concatenate([shuffled[:-1], shuffled[1:]])
    dst = np.concatenate([shuffled[1:], shuffled[:-1]])
    keys = np.sort(dst * n + src)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n, minlength=n), out=indptr[1:])
    indices = keys % n
    new_indptr, new_indices = permute_csr(indptr, indices, vertex_order(indptr, indices, "rcm"))
    dst_new = np.repeat(np.arange(n), np.diff(new_indptr))
    assert np.abs(new_indices - dst_new).max() == 1  # the path again, in order


@pytest.mark.parametrize("method", ORDERS)
def test_renumbering_keeps_graph_features_labels_and_splits(source, method):
    moved = renumber(source, method)
    moved.validate()
    ids = moved.input_ids
    assert edge_set(moved.indptr, moved.indices, ids) == edge_set(source.indptr, source.indices)
    for row in range(moved.num_nodes):  # rows stay sorted by source id
        assert np.all(np.diff(moved.indices[moved.indptr[row] : moved.indptr[row + 1]]) > 0)
    assert np.array_equal(moved.feat, np.asarray(source.feat)[ids])
    assert np.array_equal(moved.label, np.asarray(source.label)[ids])
    for split in ("train_idx", "val_idx", "test_idx"):
        new = getattr(moved, split)
        assert np.all(np.diff(new) > 0)
        assert np.array_equal(np.sort(moved.source_ids(new)), getattr(source, split))
    figures = moved.info["reorder"]
    assert figures["method"] == method and figures["median_edge_span_after"] >= 0
    assert renumber(source, "none") is source


def test_renumbering_twice_maps_to_the_first_source(source):
    twice = renumber(renumber(source, "degree"), "rcm")
    assert np.array_equal(twice.feat, np.asarray(source.feat)[twice.input_ids])
    assert np.array_equal(inverse(inverse(twice.input_ids)), twice.input_ids)


@pytest.mark.parametrize("method", ORDERS)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_aggregation_over_a_reordered_graph_is_the_same_after_mapping_back(source, method, reduce):
    moved = renumber(source, method)
    x = torch.randn(source.num_nodes, 16, dtype=torch.float64)

    def run(ds: GraphDataset, rows: torch.Tensor) -> torch.Tensor:
        indptr = torch.from_numpy(np.array(ds.indptr))
        block = Block(indptr, torch.from_numpy(np.array(ds.indices)), ds.num_nodes)
        return aggregate(block, rows, reduce)

    expected = run(source, x)
    ids = torch.from_numpy(moved.input_ids)
    got = torch.empty_like(expected)
    got[ids] = run(moved, x[ids])
    torch.testing.assert_close(got, expected)


def test_a_prepared_reordered_dataset_keeps_its_input_ids(tmp_path):
    cfg = tiny_cfg(tmp_path, reorder="rcm")
    prepared = prepare_dataset(cfg)
    assert (tmp_path / "t" / "input_ids.npy").is_file()
    again = load_prepared(cfg)
    assert np.array_equal(again.input_ids, prepared.input_ids)
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["info"]["reorder"]["method"] == "rcm"
    # The same config without a reorder prepares the source's order again.
    plain = prepare_dataset(tiny_cfg(tmp_path))
    assert plain.input_ids is None and not (tmp_path / "t" / "input_ids.npy").exists()
    assert np.array_equal(plain.feat[prepared.input_ids], prepared.feat)


def test_no_reorder_keeps_the_identity_of_copies_prepared_before_the_setting(tmp_path):
    assert "reorder" not in dataset_identity(tiny_cfg(tmp_path))
    assert dataset_identity(tiny_cfg(tmp_path, reorder="degree"))["reorder"] == "degree"


def test_a_misspelt_order_is_refused_with_the_choices(tmp_path):
    with pytest.raises(GnnrunError, match="dataset.reorder 'rcn': choose one of.*rcm"):
        tiny_cfg(tmp_path, reorder="rcn").validate()


def test_input_ids_that_are_not_a_permutation_are_refused(source):
    broken = renumber(source, "degree")
    broken.input_ids = np.zeros(source.num_nodes, dtype=np.int64)
    with pytest.raises(GnnrunError, match="input_ids is not a permutation"):
        broken.validate()
