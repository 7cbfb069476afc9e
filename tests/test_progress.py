"""gnnrun.progress: warnings and errors are one line with their prefix, printed literally."""

from __future__ import annotations

from gnnrun.progress import print_error, print_warning


def test_a_warning_starts_with_warning_and_keeps_its_brackets(capsys):
    print_warning("partitioning again: [1] changed")
    print_error("gone [2]")
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "warning: partitioning again: [1] changed",
        "error: gone [2]",
    ]
    assert captured.out == ""
