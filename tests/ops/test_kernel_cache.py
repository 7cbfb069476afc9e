"""The kernel cache removes builds nothing uses, and only those."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import torch.utils.cpp_extension

from gnnrun.ops import kernel_cache, native

DAY = kernel_cache.DAY
NOW = time.time()


def make_build(environment: Path, name: str, used_days_ago: float | None, built_days_ago=0.0):
    """A build folder as gnnrun leaves one; `used_days_ago=None`: made before use stamps."""
    build = environment / name
    build.mkdir(parents=True)
    library = build / f"{name.split('-')[0]}.so"
    library.write_bytes(b"\0" * 100)
    age = NOW - built_days_ago * DAY
    os.utime(library, (age, age))
    if used_days_ago is not None:
        stamp = build / kernel_cache.LAST_USED
        stamp.touch()
        os.utime(stamp, (NOW - used_days_ago * DAY,) * 2)
    return build


def make_environment(cache: Path, name: str, torch_home: Path | None, host=None) -> Path:
    environment = cache / f"py311-torch2.13.0+cpu-{name}-native-0123456789"
    environment.mkdir(parents=True)
    if torch_home is not None:
        origin = f"{host or socket.gethostname()}\n{torch_home}\n"
        (environment / kernel_cache.ORIGIN).write_text(origin)
    return environment


def test_unused_builds_and_orphaned_environments_are_removed(tmp_path):
    cache, venv = tmp_path / "cache", tmp_path / "venv" / "torch"
    venv.mkdir(parents=True)
    gone = tmp_path / "deleted-clone" / ".venv" / "torch"

    live = make_environment(cache, "live", venv)
    current = make_build(live, "aggregate-0123456789ab", used_days_ago=0)
    old_source = make_build(live, "aggregate-ba9876543210", used_days_ago=31)
    unstamped = make_build(live, "dropout-0123456789ab", None, built_days_ago=10)
    orphan = make_environment(cache, "orphan", gone)
    make_build(orphan, "aggregate-0123456789ab", used_days_ago=2)
    just_orphaned = make_environment(cache, "recent", gone)
    make_build(just_orphaned, "aggregate-0123456789ab", used_days_ago=0.1)
    other_host = make_environment(cache, "nfs", gone, host="another-node")
    make_build(other_host, "aggregate-0123456789ab", used_days_ago=2)
    unknown = make_environment(cache, "unknown", None)
    make_build(unknown, "libra-0123456789ab", None, built_days_ago=40)
    building = make_environment(cache, "building", gone)
    make_build(building, "aggregate-0123456789ab", used_days_ago=5)
    (building / "aggregate-0123456789ab" / "lock").touch()
    not_ours = cache / "notes"
    not_ours.mkdir()
    os.utime(not_ours, (NOW - 100 * DAY,) * 2)

    removed = kernel_cache.prune(cache, stale_lock_seconds=600, now=NOW)

    assert sorted(removed) == sorted([old_source, orphan, unknown / "libra-0123456789ab", unknown])
    assert current.is_dir() and unstamped.is_dir()
    assert just_orphaned.is_dir()  # its clone may be mid-recreate: a day's grace
    assert other_host.is_dir()  # that host's paths mean nothing here
    assert building.is_dir()  # a build in progress is never pulled from under it
    assert not_ours.is_dir()  # not named as gnnrun names its folders
    assert not any(p.name.startswith(".removing") for p in cache.rglob("*"))
    assert kernel_cache.size_summary(cache) == "5 builds, 0.0 MB"


def test_a_second_pruner_finds_nothing_left_to_claim(tmp_path):
    environment = make_environment(tmp_path, "old", tmp_path / "gone")
    make_build(environment, "aggregate-0123456789ab", used_days_ago=3)
    assert kernel_cache.prune(tmp_path, 600, NOW) == [environment]
    assert kernel_cache.prune(tmp_path, 600, NOW) == []  # another rank reports nothing


def test_loading_stamps_the_build_and_a_new_build_prunes_the_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GNNRUN_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kwargs: None)
    stale = make_environment(tmp_path, "stale", tmp_path / "gone")
    make_build(stale, "aggregate-0123456789ab", used_days_ago=3)

    assert native.load_kernel_file.__wrapped__("dropout")
    build = native.stage_source(native.KERNELS_DIR / "dropout.cpp").parent
    assert (build / kernel_cache.LAST_USED).is_file()
    assert (build.parent / kernel_cache.ORIGIN).read_text().splitlines() == [
        socket.gethostname(),
        str(native.torch_home()),
    ]
    assert not stale.exists()
    assert "removed 1 kernel build folder(s)" in capsys.readouterr().err

    again = make_environment(tmp_path, "again", tmp_path / "gone")
    make_build(again, "aggregate-0123456789ab", used_days_ago=3)
    assert native.load_kernel_file.__wrapped__("dropout")
    assert again.is_dir()  # a build already in use: no pruning at every start
