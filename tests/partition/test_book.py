"""The partition loader refuses what does not fit, and an interrupted write leaves nothing that loads."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

import gnnrun.partition.write as partition_module
from gnnrun.errors import GnnrunError
from gnnrun.partition import ensure_partition, find_partition, partition_dataset
from gnnrun.partition.book import open_partition
from gnnrun.partition.metis import MetisPartitionerConfig
from gnnrun.partition.registry import PartitionerConfig


@pytest.fixture
def written(tiny, tmp_path):
    return partition_dataset(tiny, MetisPartitionerConfig(num_parts=2), tmp_path / "part")


def test_open_checks_dataset_world_size_and_kind(tiny, written):
    book = open_partition(
        written.path, dataset_checksum=tiny.checksum, world_size=2, kind="edge_cut"
    )
    assert book.num_parts == 2
    with pytest.raises(GnnrunError, match="2 parts but the run has 4 ranks.*cluster.nprocs=2"):
        open_partition(written.path, world_size=4)
    with pytest.raises(
        GnnrunError, match="made from dataset 'synthetic-tiny'.*partition this dataset again"
    ):
        open_partition(written.path, dataset_checksum="0" * 64)
    with pytest.raises(GnnrunError, match="needs kind vertex_cut: choose partitioner=libra"):
        open_partition(written.path, kind="vertex_cut")


def test_missing_directory_says_how_to_create_it(tmp_path):
    with pytest.raises(GnnrunError, match="no partition at .*gnnrun partition"):
        open_partition(tmp_path / "nothing")


def test_missing_or_truncated_file_is_refused(written):
    victim = written.path / "part-001" / "indices.npy"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(GnnrunError, match="part-001/indices.npy has .* bytes, expected"):
        open_partition(written.path)
    victim.unlink()
    with pytest.raises(GnnrunError, match="part-001/indices.npy is missing"):
        open_partition(written.path)


def test_flipped_byte_is_refused_at_open(written):
    victim = written.path / "part-000" / "feat.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))  # the size still matches
    with pytest.raises(GnnrunError, match="part-000/feat.npy does not match its checksum"):
        open_partition(written.path)


def test_a_damaged_partition_is_rebuilt_saying_why(tiny, written, capsys):
    victim = written.path / "part-001" / "indices.npy"
    victim.write_bytes(victim.read_bytes()[:-8] + b"\xff" * 8)
    cfg = MetisPartitionerConfig(num_parts=2, output_dir=str(written.path))
    book = ensure_partition(tiny, cfg)
    err = " ".join(capsys.readouterr().err.split())
    assert "indices.npy does not match its checksum" in err and "partitioning again" in err
    assert "gnnrun partition" not in err  # what it is doing, not advice
    assert book.manifest["method"] == "metis" and open_partition(written.path).num_parts == 2


def test_an_invalid_manifest_is_one_clear_error(written):
    (written.path / "manifest.json").write_text("{not json")
    with pytest.raises(GnnrunError, match="manifest.json is not valid JSON"):
        open_partition(written.path)
    (written.path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(GnnrunError, match="manifest.json is not a gnnrun manifest.json"):
        open_partition(written.path)


def _drop_part_record(manifest):
    del manifest["files"]["part-001/halo_owner.npy"]


def _drop_bytes(manifest):
    del manifest["files"]["part-000/feat.npy"]["bytes"]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda m: m.update(dataset=5), "it has 'dataset' of type int, expected dict"),
        (lambda m: m["dataset"].pop("checksum"), "its 'dataset' lacks 'checksum'"),
        (lambda m: m.update(num_parts="2"), "it has 'num_parts' of type str, expected int"),
        (lambda m: m.update(num_parts=3), "2 part entries for num_parts=3"),
        (
            lambda m: m.update(kind="other"),
            "its kind 'other' is not one of edge_cut, vertex_cut, block1d",
        ),
        (lambda m: m.pop("parts"), "it lacks 'parts'"),
        (_drop_bytes, "the record of part-000/feat.npy lacks 'bytes'"),
        (_drop_part_record, "it lacks the record of part-001/halo_owner.npy"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_clear_error(tiny, written, capsys, damage, problem):
    path = written.path / "manifest.json"
    manifest = json.loads(path.read_text())
    damage(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(GnnrunError) as failure:
        open_partition(written.path, dataset_checksum=tiny.checksum, world_size=2)
    message = str(failure.value)
    assert f"{path} is damaged ({problem})" in message and "gnnrun partition" in message
    cfg = MetisPartitionerConfig(num_parts=2, output_dir=str(written.path))
    ensure_partition(tiny, cfg)  # gnnrun train partitions again, saying why
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path} is damaged ({problem}): partitioning again" in err
    assert open_partition(written.path).num_parts == 2


def test_interrupted_write_leaves_old_partition_and_no_debris(tiny, written, monkeypatch):
    before = {p.name for p in written.path.parent.iterdir()}
    manifest_before = (written.path / "manifest.json").read_text()
    calls = {"n": 0}
    real_save = partition_module.save_array

    def dying_save(directory, name, array):
        calls["n"] += 1
        if calls["n"] == 6:  # somewhere in the middle of part 0
            raise KeyboardInterrupt("simulated Ctrl-C mid-write")
        return real_save(directory, name, array)

    monkeypatch.setattr(partition_module, "save_array", dying_save)
    with pytest.raises(KeyboardInterrupt):
        partition_dataset(tiny, PartitionerConfig(name="random", num_parts=2), written.path)
    assert {p.name for p in written.path.parent.iterdir()} == before, "no temporary directory left"
    assert (written.path / "manifest.json").read_text() == manifest_before, (
        "old partition untouched"
    )
    assert open_partition(written.path).manifest["method"] == "metis"


def test_interrupted_first_write_leaves_nothing_that_loads(tiny, tmp_path, monkeypatch):
    target = tmp_path / "fresh"
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(partition_module, "save_array", lambda *a: (_ for _ in ()).throw(full))
    with pytest.raises(GnnrunError, match=f"cannot write {target}: no space left on device"):
        partition_dataset(tiny, PartitionerConfig(name="random", num_parts=2), target)
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == [".fresh.lock"]
    with pytest.raises(GnnrunError, match="no partition at"):
        open_partition(target)


def test_a_short_write_of_an_array_is_named_a_full_disk(tiny, tmp_path, monkeypatch):
    """numpy reports a write cut short by a full disk as "N requested and M written",
    without errno."""
    target = tmp_path / "fresh"
    short = OSError("971340 requested and 358368 written")
    monkeypatch.setattr(partition_module, "save_array", lambda *a: (_ for _ in ()).throw(short))
    with pytest.raises(GnnrunError) as failure:
        partition_dataset(tiny, PartitionerConfig(name="random", num_parts=2), target)
    assert str(failure.value) == (
        f"cannot write {target}: no space left on device on {tmp_path} (358368 of 971340 "
        "written); free some space there, or write elsewhere"
    )


def test_a_full_disk_while_writing_the_manifest_names_the_partition(tiny, written, monkeypatch):
    manifest_before = (written.path / "manifest.json").read_text()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # the first fsync is manifest.json's
    with pytest.raises(GnnrunError) as failure:
        partition_dataset(tiny, PartitionerConfig(name="random", num_parts=2), written.path)
    monkeypatch.undo()
    assert str(failure.value).startswith(f"cannot write {written.path}: no space left on device")
    assert sorted(p.name for p in written.path.parent.iterdir()) == [".part.lock", "part"]
    assert (written.path / "manifest.json").read_text() == manifest_before


def test_stale_temporaries_of_dead_writers_are_removed(tiny, written):
    debris = written.path.with_name(f"{written.path.name}.tmp-999999999-deadbeef")
    debris.mkdir()
    (debris / "junk.npy").write_bytes(b"x")
    partition_dataset(tiny, MetisPartitionerConfig(num_parts=2), written.path)
    assert not debris.exists()


def test_more_parts_than_vertices_is_refused(tiny, tmp_path):
    with pytest.raises(GnnrunError, match="num_parts=5000 exceeds the 2000 vertices"):
        partition_dataset(tiny, PartitionerConfig(name="random", num_parts=5000), tmp_path / "p")


def test_find_partition_reuses_only_a_matching_one(tiny, written):
    cfg = MetisPartitionerConfig(num_parts=2, output_dir=str(written.path))
    assert find_partition(tiny, cfg) is not None
    assert (
        find_partition(
            tiny, MetisPartitionerConfig(num_parts=2, seed=1, output_dir=str(written.path))
        )
        is None
    )
    assert os.path.isdir(written.path)


def test_part_ids_out_of_range(written):
    with pytest.raises(GnnrunError, match="part 2 does not exist"):
        written.load_part(2)
    assert np.asarray(written.load_part(1)["nodes"]).size > 0
