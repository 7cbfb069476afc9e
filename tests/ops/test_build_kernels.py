"""`python -m gnnrun.ops.build_kernels`: what is missing is built, the allocator first."""

from __future__ import annotations

from gnnrun.ops import build_kernels
from gnnrun.ops.native import CPU_ALLOCATOR, KERNELS_DIR


def test_only_the_missing_kernels_are_built_the_allocator_first(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(build_kernels, "build", lambda stems, n: calls.append(stems) or [])
    monkeypatch.setattr(build_kernels, "is_built", lambda stem: stem not in ("gat", CPU_ALLOCATOR))
    assert build_kernels.main() == 0
    assert calls == [[CPU_ALLOCATOR], ["gat"]]
    assert "kernels built: cpu_allocator, gat" in capsys.readouterr().out

    calls.clear()
    monkeypatch.setattr(build_kernels, "is_built", lambda stem: True)
    assert build_kernels.main() == 0 and calls == []  # nothing to do: nothing started
    assert capsys.readouterr().out == ""
    assert len(list(KERNELS_DIR.glob("*.cpp"))) > 2


def test_a_kernel_that_does_not_build_is_named_and_fails_the_command(monkeypatch, capsys):
    assert build_kernels.build(["no_such_kernel"], 2) == ["no_such_kernel"]  # a real process
    monkeypatch.setattr(build_kernels, "is_built", lambda stem: stem != "gat")
    monkeypatch.setattr(build_kernels, "build", lambda stems, n: list(stems))
    assert build_kernels.main() == 1
    assert "kernels not built: gat" in capsys.readouterr().out
