"""Huge pages and the preloaded allocator: what gnnrun sets before torch starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gnnrun import memory


def test_allocator_choice(monkeypatch, tmp_path):
    monkeypatch.setenv("GNNRUN_ALLOCATOR", "system")
    assert memory.allocator_library() is None
    library = tmp_path / "libmy_malloc.so"
    library.write_bytes(b"")
    monkeypatch.setenv("GNNRUN_ALLOCATOR", str(library))
    assert memory.allocator_library() == str(library)
    monkeypatch.setenv("GNNRUN_ALLOCATOR", str(tmp_path / "missing.so"))
    assert memory.allocator_library() is None


def test_preload_is_added_once_and_keeps_the_users(monkeypatch, tmp_path):
    library = tmp_path / "libmy_malloc.so"
    library.write_bytes(b"")
    monkeypatch.setenv("GNNRUN_ALLOCATOR", str(library))
    monkeypatch.setenv("LD_PRELOAD", "/opt/user.so")
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    memory.apply_memory_settings()
    memory.apply_memory_settings()
    assert os.environ["LD_PRELOAD"] == f"{library}:/opt/user.so"
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"


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
