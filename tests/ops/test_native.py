"""Where native kernels are cached, and what happens to a build lock a killed build left."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest

from gnnrun.ops import native


def test_cache_folder_names_the_cpu_torch_and_python(monkeypatch, tmp_path):
    monkeypatch.setenv("GNNRUN_KERNEL_CACHE", str(tmp_path))
    monkeypatch.delenv("GNNRUN_MARCH", raising=False)
    root = native.build_root()
    assert root.parent == tmp_path
    assert "native-" in root.name and f"torch{native.torch.__version__}" in root.name
    assert "-march=native" in native.compile_flags()
    monkeypatch.setattr(native, "cpu_signature", lambda: "model name=another CPU")
    assert native.build_root() != root  # another CPU never loads this one's binary
    other_cpu = native.build_root()
    monkeypatch.setattr(native, "torch_home", lambda: tmp_path / "other-venv" / "torch")
    assert native.build_root() != other_cpu  # nor another environment's torch its build
    monkeypatch.setenv("GNNRUN_MARCH", "x86-64-v3")
    assert native.build_root().name.endswith("x86-64-v3")
    assert "-march=x86-64-v3" in native.compile_flags()


def test_stale_build_lock_is_removed_and_a_live_one_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(native, "BUILD_NOTICE_SECONDS", 0.2)
    lock = tmp_path / "lock"
    lock.touch()
    threading.Timer(0.05, lock.unlink).start()  # another rank's quick look at a built kernel
    native._clear_stale_lock(lock, "aggregate")
    assert capsys.readouterr().err == ""  # no build: nothing to say
    lock.touch()
    native._clear_stale_lock(lock, "aggregate")
    assert lock.exists()  # a build may be running: wait for it, and say so
    assert "which another process is building" in capsys.readouterr().err
    old = time.time() - native.STALE_LOCK_SECONDS - 60
    os.utime(lock, (old, old))
    native._clear_stale_lock(lock, "aggregate")
    assert not lock.exists()
    assert "removed a stale build lock" in capsys.readouterr().err


def test_kernel_sources_are_built_by_content_not_by_path(monkeypatch, tmp_path):
    monkeypatch.setenv("GNNRUN_KERNEL_CACHE", str(tmp_path / "cache"))
    one, two = tmp_path / "clone1" / "k.cpp", tmp_path / "clone2" / "k.cpp"
    for path in (one, two):
        path.parent.mkdir()
        path.write_text("int f() { return 1; }")
    staged = native.stage_source(one)
    stamp = staged.stat().st_mtime_ns
    assert native.stage_source(two) == staged  # another clone, same code: same build
    assert staged.stat().st_mtime_ns == stamp  # not rewritten, so ninja sees nothing new
    two.write_text("int f() { return 2; }")
    changed = native.stage_source(two)
    assert changed.parent != staged.parent and changed.read_text() == two.read_text()


def test_a_failed_build_names_the_compilers_error(monkeypatch):
    monkeypatch.setenv("GNNRUN_MARCH", "bogus")
    failure = RuntimeError(
        "Error building extension 'gnnrun_dropout': [1/2] c++ -O3 -march=bogus -c dropout.cpp\n"
        "cc1plus: error: bad value 'bogus' for '-march=' switch\n"
        "ninja: build stopped: subcommand failed."
    )
    reason = native._build_failure(failure)
    assert reason.startswith("cc1plus: error: bad value 'bogus'")
    assert reason.endswith("built with GNNRUN_MARCH=bogus")


def test_the_build_uses_our_ninja_whatever_path_finds_first(tmp_path):
    """Two ninja versions rebuild each other's kernels (their build logs differ): a ninja
    found earlier on PATH must never be the one that runs."""
    other = tmp_path / "bin"
    other.mkdir()
    marker = tmp_path / "other-ninja-ran"
    (other / "ninja").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    (other / "ninja").chmod(0o755)
    env = {**os.environ, "PATH": f"{other}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("GNNRUN_NO_NATIVE", None)
    script = "from gnnrun.ops.native import load_kernel_file; assert load_kernel_file('dropout')"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_an_environment_using_another_ones_packages_builds_with_that_ones_ninja(tmp_path):
    """A venv that takes its packages from this environment (a .pth naming its
    site-packages, as `make test-package` builds) runs this environment's ninja, not the
    system's: two ninja versions read each other's build log as foreign, so each switch
    between the two environments rebuilt every kernel."""
    ours = native._our_ninja_dir()
    if ours is None:
        pytest.skip("the ninja package is not installed here")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = str(venv / "bin" / "python")
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    repo = str(Path(native.__file__).resolve().parents[2])  # gnnrun itself, from this clone
    script = "from gnnrun.ops.native import _our_ninja_dir; print(_our_ninja_dir())"
    env = {**os.environ, "PYTHONPATH": repo}
    found = subprocess.run([python, "-c", script], env=env, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == ours


def test_switching_path_rebuilds_nothing(tmp_path):
    """gnnrun run by name with the environment's bin on PATH, then by its full path without
    it (so another ninja, and here a ccache, come first): the second load builds nothing."""
    ours = os.path.dirname(sys.executable)
    system = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != ours]
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    marker = tmp_path / "ccache-ran"
    (wrappers / "ccache").write_text(f'#!/bin/sh\ntouch {marker}\nexec "$@"\n')
    (wrappers / "ccache").chmod(0o755)
    script = "from gnnrun.ops.native import load_kernel_file; assert load_kernel_file('dropout')"
    build = native.stage_source(native.KERNELS_DIR / "dropout.cpp").parent
    stamps = []
    for path in ([ours, *system], [str(wrappers), *system]):
        env = {**os.environ, "PATH": os.pathsep.join(path)}
        env.pop("GNNRUN_NO_NATIVE", None)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        stamps.append(
            {
                f.name: f.stat().st_mtime_ns
                for f in build.iterdir()
                if f.suffix in {".ninja", ".o", ".so"}
            }
        )
    assert stamps[1] == stamps[0]  # not rebuilt, nor its build file rewritten
    assert not marker.exists()
