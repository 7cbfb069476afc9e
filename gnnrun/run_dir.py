"""Run and sweep directories that belong to one invocation.

Hydra names a run's directory after the second it started, so two runs started
in the same second would share it and interleave their files. Instead, gnnrun
claims a directory before Hydra starts: `claim` creates `<root>/<date>/<time>`
with `os.mkdir`, which fails for everyone but one process even on a shared file
system, and takes the next free `<time>_2`, `<time>_3`, ... otherwise. A
directory the user names is locked (`flock` on the directory itself) for as long
as the process runs, so that a second gnnrun on it is refused instead of mixed in.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from datetime import datetime
from pathlib import Path

from gnnrun.errors import GnnrunError
from gnnrun.io import write_error

# Files that show a directory already holds a run's results. Hydra's `.hydra` alone is
# not one: a run that stopped before its first epoch (a dataset not found, a bad
# setting) leaves only that, and the same command, fixed, may run there again.
RUN_FILES = ("summary.json", "metrics.rank*.jsonl", "checkpoint.pt")

_held: dict[Path, int] = {}  # locked directories and their descriptors, open until released


def claim(root: Path, now: datetime | None = None) -> Path:
    """Create and lock a new directory `root/<date>/<H-M-S>[_k]` that no other run has."""
    now = now or datetime.now()
    parent = Path(root) / now.strftime("%Y-%m-%d")
    stem = now.strftime("%H-%M-%S")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(parent, exc) from None
    for k in range(1, 10_000):
        path = parent / (stem if k == 1 else f"{stem}_{k}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(path, exc) from None
        lock(path)
        return path
    raise GnnrunError(f"{parent} has no free run directory for {stem}: clean it up")


def lock(path: Path) -> None:
    """Lock `path` (created if needed) for this process, refusing one that another holds."""
    path = Path(path)
    if path.resolve() in _held:  # this process has it already (a run that became a sweep)
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise GnnrunError(
            f"{path} is in use by another gnnrun process: wait for it to finish, or choose "
            "another directory (leave hydra.run.dir / hydra.sweep.dir out for a new one)"
        ) from None
    except OSError:  # a file system without locks: the mkdir claim still holds
        os.close(fd)
        return
    _held[path.resolve()] = fd


def remove_if_unused(path: Path) -> None:
    """Remove a run directory this invocation claimed when it holds only Hydra's `.hydra`
    (the run was refused before it wrote anything): a refused command leaves nothing to
    mistake for a run. Its date folder stays, for another process may be claiming there."""
    with contextlib.suppress(OSError):
        if not {p.name for p in Path(path).iterdir()} - {".hydra"}:
            shutil.rmtree(path)


def refuse_occupied(path: Path) -> None:
    """Refuse a run directory that already holds another run's results."""
    found = sorted({p.name for pattern in RUN_FILES for p in Path(path).glob(pattern)})
    if found:
        raise GnnrunError(
            f"{path} already holds a run ({', '.join(found)}): a second run there would mix "
            "its files with the first one's. Choose another hydra.run.dir, leave it out "
            "for a new directory, or add train.resume=true to continue that run there"
        )


def release_all() -> None:
    """Unlock every directory this process holds (tests; a process's end does it too)."""
    while _held:
        with contextlib.suppress(OSError):
            os.close(_held.popitem()[1])


# In a sweep directory: the points that failed, by number (a local sweep goes on to the
# next point; `gnnrun report` shows them, `--retry-failed` runs them again).
FAILURES_FILE = "failed_points.json"


def recorded_failures(sweep_dir: Path) -> dict[str, dict]:
    """The sweep's points that failed, by number: {"overrides": [...], "error": "..."}."""
    try:
        failures = json.loads((Path(sweep_dir) / FAILURES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return failures if isinstance(failures, dict) else {}
