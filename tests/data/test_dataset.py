"""The prepared format: round trip, memory mapping, refusals, stale configs, atomic writes."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

import gnnrun.io
from gnnrun.data import load_prepared, prepare_dataset
from gnnrun.data.dataset import ARRAY_NAMES, GraphDataset
from gnnrun.data.graph import check_edge_keys, csr_from_edges, sorted_unique, stratified_split
from gnnrun.data.synthetic import SyntheticDatasetConfig
from gnnrun.errors import GnnrunError


def tiny_cfg(tmp_path, **changes) -> SyntheticDatasetConfig:
    fields = {"name": "t", "num_nodes": 500, "avg_degree": 6, "num_classes": 4, "feat_dim": 8}
    return SyntheticDatasetConfig(**(fields | changes), prepared_dir=str(tmp_path / "t"))


def test_round_trip_is_memory_mapped_and_checked(tmp_path):
    ds = prepare_dataset(tiny_cfg(tmp_path))
    assert isinstance(ds.feat, np.memmap)
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert (
        meta["num_nodes"] == 500 and meta["format_version"] == 1 and meta["checksum"] == ds.checksum
    )
    again = GraphDataset.load(tmp_path / "t", verify=True)
    for name, array in ds.arrays().items():
        assert np.array_equal(array, again.arrays()[name]), name


def test_missing_truncated_and_corrupt_files_are_refused(tmp_path):
    prepare_dataset(tiny_cfg(tmp_path))
    feat = tmp_path / "t" / "feat.npy"
    data = bytearray(feat.read_bytes())
    data[-1] ^= 1
    feat.write_bytes(bytes(data))
    with pytest.raises(GnnrunError, match="feat.npy does not match its checksum.*--force"):
        GraphDataset.load(tmp_path / "t")  # the same size, a changed mtime: hashed again
    with pytest.raises(GnnrunError, match="does not match its checksum"):
        GraphDataset.load(tmp_path / "t", verify=True)
    feat.write_bytes(bytes(data[:100]))
    with pytest.raises(GnnrunError, match="feat.npy has 100 bytes"):
        GraphDataset.load(tmp_path / "t")
    feat.unlink()
    with pytest.raises(GnnrunError, match="feat.npy is missing.*gnnrun data prepare"):
        GraphDataset.load(tmp_path / "t")
    with pytest.raises(GnnrunError, match="no prepared dataset.*gnnrun data prepare"):
        GraphDataset.load(tmp_path / "nowhere")


def test_changed_config_rebuilds_and_load_prepared_refuses_stale(tmp_path):
    first = prepare_dataset(tiny_cfg(tmp_path))
    changed = tiny_cfg(tmp_path, num_nodes=600)
    with pytest.raises(GnnrunError, match="different config"):
        load_prepared(changed)
    second = prepare_dataset(changed)
    assert second.num_nodes == 600 and second.checksum != first.checksum
    # Moving the files is not a change of content.
    assert prepare_dataset(tiny_cfg(tmp_path, num_nodes=600)).checksum == second.checksum


def test_interrupted_prepare_keeps_the_old_dataset(tmp_path, monkeypatch):
    first = prepare_dataset(tiny_cfg(tmp_path))
    real = gnnrun.io.np.save
    calls = {"n": 0}

    def dying_save(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(gnnrun.io.np, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(tiny_cfg(tmp_path, seed=5))
    monkeypatch.undo()
    assert GraphDataset.load(tmp_path / "t", verify=True).checksum == first.checksum
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.lock", "t"]  # writers' lock


def test_validate_names_the_broken_invariant():
    good = dict(
        name="x",
        indptr=np.array([0, 1, 2]),
        indices=np.array([1, 0], dtype=np.int32),
        feat=np.zeros((2, 3), np.float32),
        label=np.array([0, 1]),
        train_idx=np.array([0]),
        val_idx=np.array([1]),
        test_idx=np.zeros(0, np.int64),
        num_classes=2,
    )
    GraphDataset(**good).validate()
    with pytest.raises(GnnrunError, match="indices has ids outside"):
        GraphDataset(**(good | {"indices": np.array([1, 5], dtype=np.int32)})).validate()
    with pytest.raises(GnnrunError, match="label has values >= num_classes"):
        GraphDataset(**(good | {"label": np.array([0, 2])})).validate()
    with pytest.raises(GnnrunError, match="train_idx contains unlabelled"):
        GraphDataset(**(good | {"label": np.array([-1, 1])})).validate()


def test_csr_from_edges_drops_loops_and_duplicates_and_symmetrises():
    indptr, indices = csr_from_edges(
        np.array([0, 0, 1, 2, 2]), np.array([1, 1, 2, 2, 0]), 3, symmetrize=True
    )
    rows = {v: sorted(indices[indptr[v] : indptr[v + 1]].tolist()) for v in range(3)}
    assert rows == {0: [1, 2], 1: [0, 2], 2: [0, 1]}
    indptr, indices = csr_from_edges(np.array([0, 1]), np.array([1, 2]), 3, symmetrize=False)
    assert indptr.tolist() == [0, 0, 1, 2] and indices.tolist() == [0, 1]
    with pytest.raises(ValueError, match="outside"):
        csr_from_edges(np.array([0]), np.array([3]), 3, symmetrize=False)


def test_a_graph_beyond_the_64_bit_edge_keys_is_refused_before_anything_is_built():
    """Above about 3.03 billion vertices dst * n + src overflows int64, and the edges would
    be sorted wrong without a word: such a graph is refused, naming the limit."""
    largest = 3_037_000_499  # the largest n with n * n below 2^63
    check_edge_keys(largest, largest)
    with pytest.raises(GnnrunError, match="beyond the 64-bit edge keys"):
        check_edge_keys(largest + 1, largest + 1)
    with pytest.raises(GnnrunError, match="not supported yet"):  # before any n-sized array
        csr_from_edges(np.array([0]), np.array([1]), 4_000_000_000, symmetrize=False)
    with pytest.raises(GnnrunError):  # a heterogeneous graph's rows: vertices x relations
        check_edge_keys(1_000_000_000 * 10, 1_000_000_000)


def test_sorted_unique_and_stratified_split():
    values = np.random.default_rng(0).integers(0, 50, 1000)
    assert np.array_equal(sorted_unique(values), np.unique(values))
    label = np.repeat(np.arange(3), [100, 50, 10])
    train, val, test = stratified_split(label, (0.5, 0.2, 0.3), seed=0)
    assert np.bincount(label[train]).tolist() == [50, 25, 5]
    assert len(np.intersect1d(train, test)) == 0 and len(np.intersect1d(val, test)) == 0
    assert np.array_equal(train, stratified_split(label, (0.5, 0.2, 0.3), seed=0)[0])


def test_small_files_are_hashed_at_every_load(tmp_path, monkeypatch):
    prepare_dataset(tiny_cfg(tmp_path))
    hashed = []
    real = gnnrun.io.sha256_file
    monkeypatch.setattr(gnnrun.io, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    GraphDataset.load(tmp_path / "t")
    assert sorted(hashed) == sorted(f"{n}.npy" for n in ARRAY_NAMES)


def test_verified_files_are_not_hashed_again_until_they_change(tmp_path, monkeypatch):
    monkeypatch.setattr(gnnrun.io, "REHASHED_BYTES", 0)  # every file counts as big
    prepare_dataset(tiny_cfg(tmp_path))
    stamps = json.loads((tmp_path / "t" / ".verified.json").read_text())
    assert sorted(stamps) == sorted(f"{n}.npy" for n in ARRAY_NAMES)  # written with the data
    hashed = []
    real = gnnrun.io.sha256_file
    monkeypatch.setattr(gnnrun.io, "sha256_file", lambda p: hashed.append(p.name) or real(p))
    GraphDataset.load(tmp_path / "t")
    assert hashed == []
    indices = tmp_path / "t" / "indices.npy"
    array = np.load(indices)
    array[0] = 10**6  # an id out of range, the file's size unchanged
    np.save(indices, array)
    with pytest.raises(GnnrunError, match="indices.npy does not match its checksum"):
        GraphDataset.load(tmp_path / "t")
    assert hashed == ["indices.npy"]


def test_a_read_only_directory_is_verified_at_every_load(tmp_path, monkeypatch):
    prepare_dataset(tiny_cfg(tmp_path))
    (tmp_path / "t" / ".verified.json").unlink()
    monkeypatch.setattr(gnnrun.io, "write_json_atomic", _refuse_write)
    GraphDataset.load(tmp_path / "t")  # hashes, cannot remember, still loads
    assert not (tmp_path / "t" / ".verified.json").exists()


def _refuse_write(path, payload):
    raise GnnrunError(f"cannot write {path}: read-only file system")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{cut", "meta.json is not valid JSON"),
        ('{"files": {}, "format_version": 1}', r"meta.json is damaged \(it lacks 'name'\)"),
        ("[1, 2]", "meta.json is not a gnnrun meta.json"),
    ],
)
def test_a_damaged_meta_json_is_one_clear_error(tmp_path, content, message):
    prepare_dataset(tiny_cfg(tmp_path))
    (tmp_path / "t" / "meta.json").write_text(content)
    with pytest.raises(GnnrunError, match=message):
        GraphDataset.load(tmp_path / "t")


def _without_bytes(meta):
    del meta["files"]["indices"]["bytes"]


def _without_indptr(meta):
    del meta["files"]["indptr"]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_without_bytes, "the record of indices lacks 'bytes'"),
        (lambda meta: meta["files"].update(feat="x"), "the record of feat is str, not an object"),
        (_without_indptr, "it lacks the record of indptr.npy"),
        (lambda meta: meta.update(info=5), "it has 'info' of type int, expected dict"),
        (lambda meta: meta.update(num_classes="4"), "it has 'num_classes' of type str"),
        (lambda meta: meta.update(task="regression"), "its task 'regression' is not one of"),
    ],
)
def test_a_meta_json_of_the_wrong_shape_is_one_clear_error(tmp_path, capsys, damage, problem):
    first = prepare_dataset(tiny_cfg(tmp_path))
    meta_path = tmp_path / "t" / "meta.json"
    meta = json.loads(meta_path.read_text())
    damage(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(GnnrunError) as failure:
        GraphDataset.load(tmp_path / "t")
    message = str(failure.value)
    assert f"{meta_path} is damaged ({problem}" in message and "\n" not in message
    assert "gnnrun data prepare dataset=" in message and "--force" in message
    assert prepare_dataset(tiny_cfg(tmp_path)).checksum == first.checksum  # made again
    assert "preparing it again" in capsys.readouterr().err


def test_a_damaged_prepared_copy_is_prepared_again_saying_why(tmp_path, capsys):
    first = prepare_dataset(tiny_cfg(tmp_path))
    indices = tmp_path / "t" / "indices.npy"
    indices.write_bytes(indices.read_bytes()[:-4] + b"\xff\xff\xff\x7f")
    again = prepare_dataset(tiny_cfg(tmp_path))
    err = " ".join(capsys.readouterr().err.split())
    assert "indices.npy does not match its checksum" in err and "preparing it again" in err
    assert again.checksum == first.checksum  # the same config makes the same data


def test_a_full_disk_while_writing_meta_json_names_the_directory(tmp_path, monkeypatch):
    first = prepare_dataset(tiny_cfg(tmp_path))

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # the first fsync is meta.json's, after the arrays
    with pytest.raises(GnnrunError) as failure:
        prepare_dataset(tiny_cfg(tmp_path), force=True)
    monkeypatch.undo()
    assert str(failure.value) == (
        f"cannot write {tmp_path / 't'}: no space left on device on {tmp_path}; free some "
        "space there, or write elsewhere"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.lock", "t"]  # no temporary left
    assert GraphDataset.load(tmp_path / "t", verify=True).checksum == first.checksum


def test_a_read_only_data_root_is_read_without_the_writers_lock(tmp_path, monkeypatch):
    first = prepare_dataset(tiny_cfg(tmp_path))
    (tmp_path / ".t.lock").unlink()
    real_open = os.open

    def read_only_open(path, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert prepare_dataset(tiny_cfg(tmp_path)).checksum == first.checksum
    with pytest.raises(GnnrunError, match=r"cannot write .*other/\.t\.lock: read-only file"):
        prepare_dataset(tiny_cfg(tmp_path / "other"))  # none there to read: refused


def test_a_big_file_rewritten_with_its_stamp_kept_is_refused_by_its_ids(tmp_path, monkeypatch):
    """Files over REHASHED_BYTES are trusted by size and mtime: damaged ids are still
    refused as the dataset loads, in one line, before any kernel reads them."""
    monkeypatch.setattr(gnnrun.io, "REHASHED_BYTES", 0)
    prepare_dataset(tiny_cfg(tmp_path))
    GraphDataset.load(tmp_path / "t")  # verified and remembered
    indices = tmp_path / "t" / "indices.npy"
    stat = indices.stat()
    array = np.load(indices)
    array[:10] = 10**6
    np.save(indices, array)
    os.utime(indices, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(GnnrunError) as refused:
        load_prepared(tiny_cfg(tmp_path))
    assert str(refused.value) == (
        f"{tmp_path / 't'} is damaged (indices has ids outside [0, num_nodes): a file was "
        "rewritten with its size and modification time kept): "
        f"prepare it again with `gnnrun data prepare dataset=t --force` (the directory is "
        f"{tmp_path / 't'})"
    )
