"""The chunked input format: written from any dataset or drawn chunk by chunk, read back as
the same graph, its problems named in one line, its checksum fixed by its files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gnnrun.data import build_dataset, load_prepared, prepare_dataset
from gnnrun.data.chunked import ChunkedDatasetConfig, open_chunked, write_chunks
from gnnrun.data.custom import CustomDatasetConfig
from gnnrun.data.synthetic import SyntheticDatasetConfig
from gnnrun.errors import GnnrunError

TINY = {"name": "synthetic-tiny", "num_nodes": 2000, "avg_degree": 10, "num_classes": 8}
TINY |= {"feat_dim": 32, "max_degree_fraction": 0.05}
ARRAYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")


@pytest.fixture(scope="module")
def custom_npz(tmp_path_factory) -> Path:
    """A directed custom graph with self-loops and duplicate edges, as a user might have."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("custom") / "graph.npz"
    label = np.arange(500) % 4
    edges = rng.integers(0, 500, size=(3000, 2))
    feat = rng.normal(size=(500, 16)).astype(np.float64)
    np.savez(path, edges=edges, feat=feat, label=label)
    return path


def _chunked(metadata: Path, tmp_path: Path, name: str = "c") -> ChunkedDatasetConfig:
    return ChunkedDatasetConfig(
        name=name, path=str(metadata), prepared_dir=str(tmp_path / "prepared" / name)
    )


@pytest.mark.parametrize("to_undirected", [True, False])
def test_a_custom_npz_in_chunks_is_the_same_dataset(custom_npz, tmp_path, to_undirected):
    cfg = CustomDatasetConfig(name="g", path=str(custom_npz), to_undirected=to_undirected)
    metadata = write_chunks(
        tmp_path / "chunks", cfg, build_dataset, edges_per_file=700, rows_per_file=128
    )
    graph = open_chunked(metadata)
    assert len(graph.edges) > 4 and len(graph.feat) == 4 and graph.feat[-1].hi == 500
    original = build_dataset(cfg)
    again = build_dataset(_chunked(metadata, tmp_path))
    for name in ARRAYS:
        assert np.array_equal(getattr(original, name), getattr(again, name)), name
        assert getattr(original, name).dtype == getattr(again, name).dtype, name
    assert again.directed == original.directed == (not to_undirected)


def test_synthetic_drawn_in_chunks_is_deterministic_and_of_the_model(tmp_path):
    cfg = SyntheticDatasetConfig(**TINY)
    a = write_chunks(tmp_path / "a", cfg, None, edges_per_file=3000, rows_per_file=300)
    b = write_chunks(tmp_path / "b", cfg, None, edges_per_file=3000, rows_per_file=300)
    assert json.loads(a.read_text())["sha256"] == json.loads(b.read_text())["sha256"]
    graph = open_chunked(a)
    assert graph.num_edges == 10_000 and len(graph.edges) == 4 and len(graph.feat) == 7
    dataset = build_dataset(_chunked(a, tmp_path))
    assert dataset.num_nodes == 2000 and 0.8 * 20_000 < dataset.num_edges <= 20_000
    src = np.asarray(dataset.indices)
    dst = np.repeat(np.arange(2000), dataset.in_degrees())
    assert 0.7 < np.mean(dataset.label[src] == dataset.label[dst]) < 0.9  # homophily 0.8
    sizes = [getattr(dataset, s).size for s in ("train_idx", "val_idx", "test_idx")]
    assert sum(sizes) == 2000 and 100 < sizes[0] < 300  # 10% / 10% / 80% per vertex


def test_the_prepared_checksum_is_the_files_and_follows_them(custom_npz, tmp_path):
    cfg = CustomDatasetConfig(name="g", path=str(custom_npz))
    metadata = write_chunks(tmp_path / "chunks", cfg, build_dataset, edges_per_file=1000)
    chunked = _chunked(metadata, tmp_path)
    prepared = prepare_dataset(chunked)
    from gnnrun.data import dataset_identity

    assert prepared.checksum == open_chunked(metadata).checksum(dataset_identity(chunked))
    # Without recorded sha256s the files are hashed: the same checksum.
    doc = json.loads(metadata.read_text())
    del doc["sha256"]
    metadata.write_text(json.dumps(doc))
    assert open_chunked(metadata).checksum(dataset_identity(chunked)) == prepared.checksum
    label = np.load(tmp_path / "chunks" / "label" / "label-00000.npy")
    label[0] = (label[0] + 1) % 4
    np.save(tmp_path / "chunks" / "label" / "label-00000.npy", label)
    assert open_chunked(metadata).checksum(dataset_identity(chunked)) != prepared.checksum


def test_a_path_to_nothing_never_opens_the_copy_another_path_prepared(custom_npz, tmp_path):
    """The prepared copy is found by dataset.name: a dataset.path naming no graph is
    refused, not answered with the copy of the graph prepared under that name; the
    folder holding metadata.json names the same graph as the file."""
    cfg = CustomDatasetConfig(name="g", path=str(custom_npz))
    metadata = write_chunks(tmp_path / "chunks", cfg, build_dataset, edges_per_file=1000)
    prepared = prepare_dataset(_chunked(metadata, tmp_path))
    folder = prepare_dataset(_chunked(metadata.parent, tmp_path))
    assert folder.checksum == prepared.checksum
    with pytest.raises(GnnrunError, match="chunked graph .*nowhere/metadata.json not found"):
        prepare_dataset(_chunked(tmp_path / "nowhere" / "metadata.json", tmp_path))
    stale = _chunked(tmp_path / "nowhere" / "metadata.json", tmp_path)
    with pytest.raises(GnnrunError, match="gnnrun data prepare dataset=chunked dataset.name=c "):
        load_prepared(stale)


def test_parquet_edge_files_read_as_npy_ones(custom_npz, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    cfg = CustomDatasetConfig(name="g", path=str(custom_npz))
    metadata = write_chunks(tmp_path / "chunks", cfg, build_dataset, edges_per_file=2000)
    listed = open_chunked(metadata).num_edges
    doc = json.loads(metadata.read_text())
    first = doc["edges"][0]
    src, dst = (np.load(tmp_path / "chunks" / first[k]) for k in ("src", "dst"))
    table = pa.table({"src": src, "dst": dst})
    pq.write_table(table, tmp_path / "chunks" / "edges" / "e.parquet", row_group_size=300)
    doc["edges"][0] = {"parquet": "edges/e.parquet"}
    metadata.write_text(json.dumps(doc))
    graph = open_chunked(metadata)
    assert graph.edges[0].parquet is not None and graph.num_edges == listed
    got = build_dataset(_chunked(metadata, tmp_path))
    want = build_dataset(cfg)
    assert np.array_equal(got.indices, want.indices) and np.array_equal(got.indptr, want.indptr)
    s, d = next(graph.read_edges(290, 620, 1000))  # across row groups
    assert np.array_equal(s, src[290:620]) and np.array_equal(d, dst[290:620])


def _broken(metadata: Path, tmp_path: Path, change) -> str:
    folder = tmp_path / "broken"
    shutil.copytree(metadata.parent, folder)
    doc = json.loads((folder / "metadata.json").read_text())
    change(doc, folder)
    (folder / "metadata.json").write_text(json.dumps(doc))
    with pytest.raises(GnnrunError) as refused:
        open_chunked(folder / "metadata.json")
    message = str(refused.value)
    assert "\n" not in message and "docs/large-graphs.md" in message
    return message


def test_bad_metadata_is_named_in_one_line(custom_npz, tmp_path):
    cfg = CustomDatasetConfig(name="g", path=str(custom_npz))
    metadata = write_chunks(
        tmp_path / "chunks", cfg, build_dataset, edges_per_file=1000, rows_per_file=200
    )

    def gap(doc, folder):
        doc["feat"][1]["rows"] = [250, 400]

    def missing(doc, folder):
        (folder / doc["edges"][1]["dst"]).unlink()

    def wrong_width(doc, folder):
        doc["feat_dim"] = 3

    def float_ids(doc, folder):
        np.save(folder / doc["edges"][0]["src"], np.zeros(1000, np.float32))

    def short(doc, folder):
        doc["num_nodes"] = 600

    assert "rows must follow each other from 0" in _broken(metadata, tmp_path / "1", gap)
    assert "is missing" in _broken(metadata, tmp_path / "2", missing)
    assert "expected [200, 3] numbers" in _broken(metadata, tmp_path / "3", wrong_width)
    assert "1-d integer ids of equal length" in _broken(metadata, tmp_path / "4", float_ids)
    assert "covers rows [0, 500), but num_nodes is 600" in _broken(metadata, tmp_path / "5", short)
    with pytest.raises(GnnrunError, match="not found: set dataset.path"):
        open_chunked(tmp_path / "nowhere" / "metadata.json")
