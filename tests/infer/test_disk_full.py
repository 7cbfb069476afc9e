"""A full disk while inference writes its file-backed rows: an error naming the directory,
not a SIGBUS of the rank (the rows are memory-mapped files)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gnnrun.errors import GnnrunError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (root only); skips where it cannot be mounted."""
    mount = tmp_path / "full"
    mount.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a small tmpfs to fill ({exc})")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=30)


def test_scratch_rows_on_a_full_disk_name_it_instead_of_a_bus_error(small_tmpfs):
    """4 MiB of rows on a 1 MiB file system, written through the map: in a child
    process, since without the reservation the write kills it with SIGBUS."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from gnnrun.errors import GnnrunError
        from gnnrun.infer.run import _scratch_rows
        try:
            rows = _scratch_rows(Path({str(small_tmpfs / "halo.npy")!r}), 4096, 256)
            rows[:] = 1.0
        except GnnrunError as exc:
            print("error:", exc)
            raise SystemExit(1)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Bus error" not in done.stderr
    assert f"no space left on device on {small_tmpfs}" in done.stdout
    assert not (small_tmpfs / "halo.npy").exists()  # no half-reserved file left behind


def test_enospc_from_the_reservation_names_the_directory(tmp_path, monkeypatch):
    from gnnrun.infer.run import _scratch_rows

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(GnnrunError, match=f"no space left on device on {tmp_path}"):
        _scratch_rows(tmp_path / "rows.npy", 100, 8)
    assert not (tmp_path / "rows.npy").exists()


def test_reserved_rows_are_an_ordinary_npy(tmp_path):
    import numpy as np

    from gnnrun.infer.run import _scratch_rows

    rows = _scratch_rows(tmp_path / "rows.npy", 5, 3)
    rows[:] = 2.0
    del rows
    assert np.array_equal(np.load(tmp_path / "rows.npy"), np.full((5, 3), 2.0, np.float32))
