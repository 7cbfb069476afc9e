from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gnnrun.data import build_dataset
from gnnrun.data.graph import is_symmetric
from gnnrun.data.ogb import OgbDatasetConfig, dataset_meta
from gnnrun.errors import GnnrunError

sys.path.insert(0, str(Path(__file__).parent))
from ogb_files import assert_a_cut_file_is_named  # noqa: E402
from ogb_files import write_csv as _csv  # noqa: E402

N, F, C = 20, 5, 4
RNG = np.random.default_rng(0)
EDGES = np.array([[v, (v + 1) % N] for v in range(N)] + [[0, 5], [5, 0], [3, 3], [7, 2]]).T  # 2 x E
FEAT = RNG.standard_normal((N, F)).astype(np.float32)
LABEL = np.arange(N) % C
TRAIN, VALID, TEST = np.arange(0, 10), np.arange(10, 15), np.arange(15, 20)


def _write_csv_dataset(root, name="ogbn-arxiv", labels=LABEL):
    meta = dataset_meta(name)
    d = root / name.replace("-", "_")
    d.mkdir(parents=True)
    (d / f"RELEASE_v{meta['version']}.txt").write_text("offline test copy\n")
    _csv(d / "raw" / "edge.csv.gz", EDGES.T)
    _csv(d / "raw" / "num-node-list.csv.gz", [N])
    _csv(d / "raw" / "num-edge-list.csv.gz", [EDGES.shape[1]])
    _csv(d / "raw" / "node-feat.csv.gz", FEAT)
    _csv(d / "raw" / "node-label.csv.gz", np.asarray(labels).reshape(-1, 1))
    _csv(d / "raw" / "node_year.csv.gz", np.full((N, 1), 2020))
    for part, idx in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        _csv(d / "split" / meta["split"] / f"{part}.csv.gz", idx.reshape(-1, 1))
    return d


def _cfg(root, name="ogbn-arxiv", to_undirected=True):
    return OgbDatasetConfig(name=name, ogb_name=name, root=str(root), to_undirected=to_undirected)


def _pairs(directed: bool) -> set[tuple[int, int]]:
    """(src, dst) pairs expected after dropping the self-loop and duplicates."""
    edges = {(int(s), int(d)) for s, d in EDGES.T if s != d}
    return edges | {(d, s) for s, d in edges} if not directed else edges


def _stored_pairs(ds) -> set[tuple[int, int]]:
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ds.indptr))
    return set(zip(ds.indices.tolist(), dst.tolist(), strict=True))


def test_arxiv_layout_loads_offline(tmp_path, offline):
    ogb_was_imported = "ogb" in sys.modules
    outdated_was_imported = "outdated" in sys.modules
    d = _write_csv_dataset(tmp_path)
    ds = build_dataset(_cfg(tmp_path))
    assert ds.num_nodes == N and ds.num_classes == 40 and ds.task == "multiclass"
    assert np.array_equal(ds.feat, FEAT) and ds.feat.dtype == np.float32
    assert np.array_equal(ds.label, LABEL) and ds.label.dtype == np.int64
    assert np.array_equal(ds.train_idx, TRAIN) and np.array_equal(ds.val_idx, VALID)
    assert np.array_equal(ds.test_idx, TEST)
    assert not ds.directed and is_symmetric(ds.indptr, ds.indices)
    assert _stored_pairs(ds) == _pairs(directed=False)
    assert not (d / "processed").exists()
    if not ogb_was_imported and not outdated_was_imported:
        assert "outdated" not in sys.modules  # ogb's PyPI version check was not started


def test_arxiv_directed_when_not_to_undirected(tmp_path, offline):
    _write_csv_dataset(tmp_path)
    ds = build_dataset(_cfg(tmp_path, to_undirected=False))
    assert ds.directed
    assert _stored_pairs(ds) == _pairs(directed=True)
    assert ds.num_edges == len(_pairs(directed=True))


def test_products_raw_edges_are_undirected_always_symmetrised(tmp_path, offline):
    _write_csv_dataset(tmp_path, name="ogbn-products")
    ds = build_dataset(_cfg(tmp_path, name="ogbn-products", to_undirected=False))
    assert not ds.directed and _stored_pairs(ds) == _pairs(directed=False)
    assert ds.num_classes == 47


def test_binary_layout_with_nan_labels(tmp_path, offline):
    name = "ogbn-papers100M"
    meta = dataset_meta(name)
    d = tmp_path / "ogbn_papers100M"
    (d / "raw").mkdir(parents=True)
    np.savez(
        d / "raw" / "data.npz",
        edge_index=EDGES,
        num_nodes_list=np.array([N]),
        num_edges_list=np.array([EDGES.shape[1]]),
        node_feat=FEAT.astype(np.float16),
        node_year=np.full((N, 1), 2020),
    )
    labels = LABEL.astype(np.float64).reshape(-1, 1)
    labels[[12, 19]] = np.nan  # unlabelled papers
    np.savez(d / "raw" / "node-label.npz", node_label=labels)
    for part, idx in (("train", TRAIN), ("valid", VALID[VALID != 12]), ("test", TEST[TEST != 19])):
        _csv(d / "split" / meta["split"] / f"{part}.csv.gz", idx.reshape(-1, 1))
    ds = build_dataset(_cfg(tmp_path, name=name, to_undirected=False))
    assert ds.directed and _stored_pairs(ds) == _pairs(directed=True)
    assert ds.label[12] == -1 and ds.label[19] == -1 and ds.info["unlabelled_nodes"] == 2
    assert ds.feat.dtype == np.float32 and ds.num_classes == 172
    assert 12 not in ds.val_idx and 19 not in ds.test_idx


def test_missing_files_are_named(tmp_path, offline):
    d = _write_csv_dataset(tmp_path)
    (d / "raw" / "node-feat.csv.gz").unlink()
    (d / "split" / "time" / "valid.csv.gz").unlink()
    with pytest.raises(GnnrunError) as err:
        build_dataset(_cfg(tmp_path))
    message = str(err.value)
    assert str(d / "raw" / "node-feat.csv.gz") in message
    assert str(d / "split" / "time" / "valid.csv.gz") in message
    assert str(d / "raw" / "edge.csv.gz") not in message.split("must hold")[0]
    assert dataset_meta("ogbn-arxiv")["url"] in message
    assert "unzip it into" in message and str(tmp_path) in message


def test_absent_dataset_directory(tmp_path, offline):
    with pytest.raises(GnnrunError, match="ogbn_products"):
        build_dataset(_cfg(tmp_path, name="ogbn-products"))
    _write_csv_dataset(tmp_path).rename(tmp_path / "arxiv")  # unzipped but not renamed
    with pytest.raises(GnnrunError, match="arxiv exists: rename it to .*ogbn_arxiv"):
        build_dataset(_cfg(tmp_path))


def test_unsupported_datasets(tmp_path, offline):
    with pytest.raises(GnnrunError, match="choose one of"):
        build_dataset(_cfg(tmp_path, name="ogbn-nothing"))


def _write_proteins(root, labels):
    """ogbn-proteins' layout: no vertex features, 8 per edge, N x 112 labels, by species."""
    d = root / "ogbn_proteins"
    edge_feat = RNG.random((EDGES.shape[1], 8)).astype(np.float32)
    _csv(d / "raw" / "edge.csv.gz", EDGES.T)
    _csv(d / "raw" / "num-node-list.csv.gz", [N])
    _csv(d / "raw" / "num-edge-list.csv.gz", [EDGES.shape[1]])
    _csv(d / "raw" / "edge-feat.csv.gz", edge_feat)
    _csv(d / "raw" / "node-label.csv.gz", labels)
    _csv(d / "raw" / "node_species.csv.gz", np.zeros((N, 1), dtype=np.int64))
    for part, idx in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        _csv(d / "split" / "species" / f"{part}.csv.gz", idx.reshape(-1, 1))
    return edge_feat


def test_proteins_loads_as_a_multi_label_dataset(tmp_path, offline):
    """Its N x 112 labels as they are; a vertex's features are the mean of its edges'."""
    labels = (RNG.random((N, 112)) < 0.3).astype(np.int64)
    edge_feat = _write_proteins(tmp_path, labels)
    ds = build_dataset(_cfg(tmp_path, name="ogbn-proteins"))
    assert ds.task == "multilabel" and ds.num_classes == 112
    assert np.array_equal(ds.label, labels) and ds.label.dtype == np.int64
    assert np.array_equal(ds.train_idx, TRAIN) and np.array_equal(ds.test_idx, TEST)
    assert ds.feat.shape == (N, 8) and not ds.directed
    for v in (0, 3, 7):  # 0 has four edges, 3 a self-loop among its own, 7 the 7 -> 2 edge
        ends = (EDGES[0] == v) | (EDGES[1] == v)
        touching = np.concatenate([edge_feat[EDGES[0] == v], edge_feat[EDGES[1] == v]])
        assert ends.any()
        np.testing.assert_allclose(ds.feat[v], touching.mean(axis=0), rtol=1e-5)
    damaged = labels.copy()
    damaged[2, 5] = 2
    _write_proteins(tmp_path / "bad", damaged)
    with pytest.raises(GnnrunError, match="labels outside 0 / 1"):
        build_dataset(_cfg(tmp_path / "bad", name="ogbn-proteins"))


def test_damaged_labels(tmp_path, offline):
    _write_csv_dataset(tmp_path, labels=np.full(N, 40))
    with pytest.raises(GnnrunError, match=r"labels outside \[0, 40\)"):
        build_dataset(_cfg(tmp_path))


@pytest.mark.parametrize(
    "rel", ["raw/edge.csv.gz", "raw/node-label.csv.gz", "split/time/valid.csv.gz"]
)
def test_a_cut_file_is_named_in_one_line(tmp_path, offline, rel):
    victim = _write_csv_dataset(tmp_path) / rel
    assert_a_cut_file_is_named(victim, _cfg(tmp_path), dataset_meta("ogbn-arxiv")["url"])
