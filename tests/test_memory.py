"""Huge pages and the preloaded allocator: what gnnrun sets before torch starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gnnrun import memory

ELF_HEADER = b"\x7fELF"


def test_allocator_choice(monkeypatch, tmp_path):
    monkeypatch.setenv("GNNRUN_ALLOCATOR", "system")
    assert memory.allocator_library() is None and memory.allocator_problem() is None
    library = tmp_path / "libmy_malloc.so"
    library.write_bytes(ELF_HEADER)
    monkeypatch.setenv("GNNRUN_ALLOCATOR", str(library))
    assert memory.allocator_library() == str(library)
    for wrong in (tmp_path / "missing.so", tmp_path / "notes.txt"):
        wrong.parent.mkdir(exist_ok=True)
        if wrong.name == "notes.txt":
            wrong.write_text("not a library")
        monkeypatch.setenv("GNNRUN_ALLOCATOR", str(wrong))
        assert memory.allocator_library() is None
        assert "is not a shared library" in memory.allocator_problem()


def test_preload_is_added_once_and_keeps_the_users(monkeypatch, tmp_path):
    library = tmp_path / "libmy_malloc.so"
    library.write_bytes(ELF_HEADER)
    monkeypatch.setenv("GNNRUN_ALLOCATOR", str(library))
    monkeypatch.setenv("LD_PRELOAD", "/opt/user.so")
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    memory.apply_memory_settings()
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "8")
    memory.apply_memory_settings()
    assert os.environ["LD_PRELOAD"] == f"{library}:/opt/user.so"
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"
    assert os.environ["LRU_CACHE_CAPACITY"] == "8"  # the user's own value wins


@pytest.mark.skipif(
    memory.allocator_library() is None, reason="no tcmalloc installed (libtcmalloc-minimal4)"
)
def test_gnnrun_command_runs_on_tcmalloc():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GNNRUN_ALLOCATOR")}
    code = "from gnnrun.memory import allocator_in_use as a, reexec_with_allocator as r; r(); print(a())"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "tcmalloc" in result.stdout
    env["GNNRUN_ALLOCATOR"] = "system"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "system (glibc)"


def test_a_library_that_does_not_load_is_dropped_once(tmp_path):
    """ld.so refuses it on the restart; gnnrun says so once and keeps it from its children."""
    fake = tmp_path / "libfake.so"
    fake.write_bytes(ELF_HEADER + bytes(100))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["GNNRUN_ALLOCATOR"] = str(fake)
    code = (
        "import os, subprocess, sys\n"
        "from gnnrun.memory import reexec_with_allocator as r; r()\n"
        "print(os.environ.get('LD_PRELOAD', ''), os.environ['GNNRUN_ALLOCATOR'])\n"
        "subprocess.run([sys.executable, '-c', 'pass'])\n"  # a child: no ld.so complaint
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["system"]  # preload emptied, allocator switched off
    assert result.stderr.count("cannot be preloaded") == 1  # ld.so, at the restart only
    assert "could not be preloaded; running on the system allocator" in result.stderr


def test_peak_memory_windows_count_what_the_window_added_and_keep_the_run_peak():
    import numpy as np

    from gnnrun.memory import PeakMemory

    before_run = np.ones(200 * 2**20 // 8)  # 200 MiB resident before the first window
    del before_run
    memory = PeakMemory()
    run_peak = memory.run_peak_mb()
    memory.start_window()
    if memory.window_growth_mb() is None:
        pytest.skip("the kernel offers no resettable peak (/proc/self/clear_refs, VmHWM)")
    held = np.ones(100 * 2**20 // 8)  # touched: 100 MiB resident within the window
    growth = memory.window_growth_mb()
    del held
    assert 95 <= growth <= 130, growth
    memory.start_window()
    assert memory.window_growth_mb() < 20  # the freed array is not the next window's
    assert memory.run_peak_mb() >= run_peak  # resetting the window kept the run's peak


def test_a_rank_does_not_report_the_memory_of_the_process_that_started_it():
    # The parent holds 300 MiB when it starts the child: the child's ru_maxrss would
    # start there, its own peak must not.
    code = "from gnnrun.memory import PeakMemory; print(PeakMemory().run_peak_mb())"
    parent = (
        "import subprocess, sys\n"
        "held = bytearray(300 * 2**20)\n"
        "held[::4096] = b'x' * len(held[::4096])\n"
        f"subprocess.run([sys.executable, '-c', {code!r}], check=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, check=True
    )
    assert float(result.stdout) < 250, result.stdout


# torch imported before gnnrun; a stand-in, since the real import takes seconds.
TORCH_IMPORTED = "import sys, types; sys.modules['torch'] = types.ModuleType('torch')"


@pytest.mark.parametrize(
    ("code", "preset", "expected"),
    [
        ("import gnnrun", None, "1"),  # a library caller gets what `gnnrun train` runs with
        ("import gnnrun", "0", "0"),  # the user's own setting wins
        (f"{TORCH_IMPORTED}; import gnnrun", None, None),  # too late for torch: left alone
    ],
)
def test_importing_gnnrun_turns_on_huge_pages_before_torch(code, preset, expected):
    env = {k: v for k, v in os.environ.items() if k not in memory.SETTINGS}
    if preset is not None:
        env["THP_MEM_ALLOC_ENABLE"] = preset
    show = f"{code}; import os; print(os.environ.get('THP_MEM_ALLOC_ENABLE'))"
    show += "; print(os.environ.get('LRU_CACHE_CAPACITY'))"  # oneDNN's cache: bounded too
    result = subprocess.run(
        [sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    huge_pages, primitives = result.stdout.split()
    assert huge_pages == str(expected)
    assert primitives == ("None" if code.startswith(TORCH_IMPORTED) else "64")
