"""Checkpoint files: a failed write leaves nothing behind, a damaged file is refused in one line."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
import torch

from gnnrun.errors import GnnrunError
from gnnrun.train.checkpoint import load_checkpoint, save_checkpoint

STATE = {"epoch": 1, "model": {"w": torch.zeros(4)}, "history": []}


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs where this process may mount one (root); otherwise the test skips."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_names_the_file_and_leaves_no_temporary(small_disk):
    save_checkpoint(small_disk, STATE)
    big = {"epoch": 2, "model": {"w": torch.zeros(1 << 20)}, "history": []}  # 4 MiB
    with pytest.raises(GnnrunError) as failure:
        save_checkpoint(small_disk, big)
    message = str(failure.value)
    assert str(small_disk / "checkpoint.pt") in message and "free" in message
    assert sorted(os.listdir(small_disk)) == ["checkpoint.pt"]  # no checkpoint.pt.tmp-*
    assert load_checkpoint(small_disk)["epoch"] == 1  # the previous checkpoint is intact
    save_checkpoint(small_disk, STATE | {"epoch": 3})  # and the disk has room again
    assert load_checkpoint(small_disk)["epoch"] == 3


def test_a_failed_write_says_no_space_and_removes_its_temporary(tmp_path, monkeypatch):
    """The stand-in for a full disk where no tmpfs can be mounted: the OSError of a write."""

    def full_disk(state, f):
        f.write(b"x" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(GnnrunError, match="no space left on device"):
        save_checkpoint(tmp_path, STATE)
    assert os.listdir(tmp_path) == []


def test_leftover_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftover = tmp_path / f"checkpoint.pt.tmp-{dead.pid}-0123abcd"
    leftover.write_bytes(b"x" * 1000)
    live = tmp_path / f"checkpoint.pt.tmp-{os.getpid()}-0123abcd"  # a writer still at work
    live.write_bytes(b"x")
    save_checkpoint(tmp_path, STATE)
    assert not leftover.exists() and live.exists()


def test_a_run_keeps_its_own_checkpoint_when_another_run_replaces_the_shared_one(
    tmp_path, monkeypatch
):
    """Runs with the same train.checkpoint_dir (a sweep's points, splits side by side)
    replace each other's shared file. The copy in a run's own directory, which `gnnrun
    predict run=...` reads, stays that run's even when another run's rename lands right
    after this one's."""
    shared, run_dir = tmp_path / "shared", tmp_path / "run"
    replace = os.replace

    def another_run_renames_too(source, destination):
        replace(source, destination)
        if Path(destination) == shared / "checkpoint.pt":  # another run's file, its rename
            torch.save(STATE | {"epoch": 99}, tmp_path / "other")
            replace(tmp_path / "other", destination)

    monkeypatch.setattr(os, "replace", another_run_renames_too)
    assert save_checkpoint(shared, STATE, run_dir=run_dir) == run_dir / "checkpoint.pt"
    assert load_checkpoint(run_dir)["epoch"] == 1
    assert load_checkpoint(shared)["epoch"] == 99  # the shared file: whichever run was last


def _truncated(path: Path) -> None:
    save_checkpoint(path.parent, STATE)
    path.write_bytes(path.read_bytes()[:300])


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(b""),
        lambda p: p.write_text("not a checkpoint"),
        _truncated,
        lambda p: torch.save([1, 2, 3], p),  # a torch file, but not a checkpoint
    ],
    ids=["empty", "garbage", "truncated", "foreign"],
)
def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path, damage):
    path = tmp_path / "checkpoint.pt"
    damage(path)
    with pytest.raises(GnnrunError) as failure:
        load_checkpoint(tmp_path)
    message = str(failure.value)
    assert str(path) in message and "\n" not in message and "weights_only" not in message
    assert "train.checkpoint_dir" in message


def test_no_checkpoint_is_none(tmp_path):
    assert load_checkpoint(tmp_path) is None
