"""Housekeeping of the native kernel cache: record use, remove what nothing uses.

The cache (`native.build_root()`'s parent) holds one folder per environment
(Python, torch installation, CPU) and in it one folder per kernel source
(`<kernel>-<source hash>`). Every edit of a kernel and every clone with a
`.venv` of its own adds one, and builds are never needed again once their
clone is gone or their source has changed. So:

- each load touches `<build>/.last_used`, and each environment folder records
  the host and torch installation it was built for (`origin`);
- when a kernel is built, builds unused for `UNUSED_BUILD_DAYS` are removed
  (another branch may still want an old source's build, so not at once), and
  so is a whole environment whose torch installation is gone from this host
  (a deleted clone's `.venv`) and that nothing used for `ORPHAN_ENVIRONMENT_DAYS`.

Only folders named the way gnnrun names them are touched, and never one with a
build lock younger than a stale one.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from pathlib import Path

UNUSED_BUILD_DAYS = 30
ORPHAN_ENVIRONMENT_DAYS = 1
LAST_USED = ".last_used"
ORIGIN = "origin"
DAY = 86400.0

ENVIRONMENT_NAME = re.compile(r"py\d+-torch.+")
BUILD_NAME = re.compile(r"[A-Za-z0-9_]+-[0-9a-f]{12}")


def mark_used(build: Path, torch_home: Path) -> None:
    """Record that `build` was just loaded by the torch installed at `torch_home`."""
    try:
        (build / LAST_USED).touch()
        origin = build.parent / ORIGIN
        if not origin.is_file():
            partial = origin.with_name(f".{ORIGIN}.{os.getpid()}")
            partial.write_text(f"{socket.gethostname()}\n{torch_home}\n")
            os.replace(partial, origin)
    except OSError:
        pass  # a read-only cache still loads; it is only never pruned


def prune(cache: Path, stale_lock_seconds: float, now: float | None = None) -> list[Path]:
    """Remove unused builds and orphaned environments under `cache`; what was removed."""
    now = time.time() if now is None else now
    removed = []
    for environment in _children(cache, ENVIRONMENT_NAME):
        builds = list(_children(environment, BUILD_NAME))
        if any(_locked(b, now, stale_lock_seconds) for b in builds):
            continue
        idle = now - max((_last_used(b) for b in builds), default=_mtime(environment))
        if _orphaned(environment) and idle > ORPHAN_ENVIRONMENT_DAYS * DAY:
            removed += _remove(environment)
            continue
        for build in builds:
            if now - _last_used(build) > UNUSED_BUILD_DAYS * DAY:
                removed += _remove(build)
        if not any(_children(environment, BUILD_NAME)):
            removed += _remove(environment)
    return removed


def size_summary(cache: Path) -> str:
    """`N builds, X MB` for `gnnrun env`."""
    builds = [b for e in _children(cache, ENVIRONMENT_NAME) for b in _children(e, BUILD_NAME)]
    size = sum(f.stat().st_size for b in builds for f in b.rglob("*") if f.is_file())
    return f"{len(builds)} builds, {size / 1e6:.1f} MB"


def _children(folder: Path, name: re.Pattern) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and name.fullmatch(p.name))
    except OSError:
        return []


def _last_used(build: Path) -> float:
    """When `build` was last loaded; its newest file for a build made before stamps."""
    stamp = build / LAST_USED
    if stamp.is_file():
        return _mtime(stamp)
    return max((_mtime(f) for f in build.iterdir()), default=_mtime(build))


def _orphaned(environment: Path) -> bool:
    """Built on this host for a torch installation that no longer exists."""
    try:
        host, torch_home = (environment / ORIGIN).read_text().splitlines()[:2]
    except (OSError, ValueError):
        return False  # unknown origin: only the unused-build rule applies
    return host == socket.gethostname() and not Path(torch_home).exists()


def _locked(build: Path, now: float, stale_lock_seconds: float) -> bool:
    lock = build / "lock"
    return lock.exists() and now - _mtime(lock) < stale_lock_seconds


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _remove(folder: Path) -> list[Path]:
    """Remove `folder`; [folder] if this process did it (ranks prune side by side).

    Renamed first, atomically: exactly one process wins it, and no loader ever
    finds a half-deleted build under the name it looks for.
    """
    doomed = folder.with_name(f".removing-{os.getpid()}-{folder.name}")
    try:
        folder.rename(doomed)
    except OSError:
        return []
    shutil.rmtree(doomed, ignore_errors=True)
    return [folder]
