"""gnnrun.io: manifests that are damaged or of the wrong shape are one clear error; a
directory write that fails names the directory and leaves nothing behind; an array
written by row blocks appears whole or not at all."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

from gnnrun.errors import GnnrunError
from gnnrun.io import (
    atomic_directory,
    atomic_file,
    atomic_link,
    atomic_rows,
    read_json,
    read_manifest,
    write_json,
)

RECORD = {"bytes": 128, "sha256": "0" * 64, "shape": [4], "dtype": "int64"}


def _manifest(directory, **changes):
    payload = {"format_version": 1, "files": {"a.npy": dict(RECORD)}, "name": "x"} | changes
    (directory / "manifest.json").write_text(json.dumps(payload))


def _read(directory):
    return read_manifest(
        directory, "manifest.json", 1, "thing", "make it", {"name": str}, "make it again"
    )


def test_read_json_names_the_file_and_the_fix(tmp_path):
    (tmp_path / "cut.json").write_text('{"a": [1, 2')
    with pytest.raises(GnnrunError, match=r"cut.json is not valid JSON \(.*\): write it again"):
        read_json(tmp_path / "cut.json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(GnnrunError, match="binary.json is not valid JSON"):
        read_json(tmp_path / "binary.json")
    with pytest.raises(GnnrunError, match=rf"cannot read {tmp_path} \(is a directory\): redo"):
        read_json(tmp_path, "redo")


def test_read_manifest_accepts_a_whole_one(tmp_path):
    _manifest(tmp_path)
    assert _read(tmp_path)["files"]["a.npy"] == RECORD


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"name": 3}, "it has 'name' of type int, expected str"),
        ({"files": {"a.npy": []}}, "the record of a.npy is list, not an object"),
        ({"files": {"a.npy": RECORD | {"bytes": "128"}}}, "the record of a.npy has 'bytes' of"),
        ({"files": {"a.npy": RECORD | {"bytes": True}}}, "the record of a.npy has 'bytes' of"),
        ({"files": {"a.npy": {"bytes": 1}}}, "the record of a.npy lacks 'sha256'"),
    ],
)
def test_read_manifest_refuses_the_wrong_shape(tmp_path, changes, problem):
    _manifest(tmp_path, **changes)
    with pytest.raises(GnnrunError) as failure:
        _read(tmp_path)
    message = str(failure.value)
    assert message.startswith(f"{tmp_path / 'manifest.json'} is damaged ({problem}")
    assert message.endswith("): make it again") and "\n" not in message


def test_read_manifest_missing_and_other_version(tmp_path):
    with pytest.raises(GnnrunError, match=r"no thing at .* \(manifest.json missing\); make it$"):
        _read(tmp_path)
    _manifest(tmp_path, format_version=2)
    with pytest.raises(GnnrunError, match="holds thing format 2, this gnnrun reads 1; make it$"):
        _read(tmp_path)
    (tmp_path / "manifest.json").write_text('"just a string"')
    with pytest.raises(GnnrunError, match="is not a gnnrun manifest.json.*: make it again$"):
        _read(tmp_path)


def test_a_failed_write_inside_atomic_directory_names_the_directory(tmp_path, monkeypatch):
    final = tmp_path / "out"
    with atomic_directory(final) as tmp:
        write_json(tmp / "manifest.json", {"v": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(GnnrunError) as failure, atomic_directory(final) as tmp:
        write_json(tmp / "manifest.json", {"v": 2})
    assert str(failure.value) == (
        f"cannot write {final}: no space left on device on {tmp_path}; free some space there, "
        "or write elsewhere"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the temporary is gone
    assert json.loads((final / "manifest.json").read_text()) == {"v": 1}


def test_atomic_rows_writes_a_whole_array_or_nothing(tmp_path):
    path = tmp_path / "rows.npy"
    with atomic_rows(path, (5, 2), np.float32) as append:
        append(np.zeros((3, 2)))
        append(np.ones((2, 2)))
    assert np.array_equal(np.load(path), np.r_[np.zeros((3, 2)), np.ones((2, 2))])
    short = atomic_rows(tmp_path / "short.npy", (5, 2), np.float32)
    with pytest.raises(ValueError, match="4 of 5 rows written"), short as append:
        append(np.zeros((4, 2)))
    wide = atomic_rows(tmp_path / "wide.npy", (5, 2), np.float32)
    with pytest.raises(ValueError, match="do not continue"), wide as append:
        append(np.zeros((1, 3)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.npy"]  # nothing half-written


def test_atomic_link_keeps_what_the_source_held_when_the_source_is_rewritten(tmp_path, monkeypatch):
    source, kept = tmp_path / "checkpoint.pt", tmp_path / "run" / "checkpoint.pt"
    kept.parent.mkdir()
    source.write_bytes(b"epoch 2")
    atomic_link(source, kept)
    atomic_link(source, kept)  # again onto itself: nothing changes, nothing is left over
    with atomic_file(source, "wb") as f:  # how gnnrun rewrites a checkpoint
        f.write(b"epoch 3")
    assert kept.read_bytes() == b"epoch 2"
    assert sorted(p.name for p in kept.parent.iterdir()) == ["checkpoint.pt"]

    def no_links(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)  # another file system: a copy
    atomic_link(source, kept)
    assert kept.read_bytes() == b"epoch 3" and not os.path.samefile(source, kept)
