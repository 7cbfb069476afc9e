"""gnnrun.progress: warnings and errors are one line with their prefix, printed literally;
tables whole."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from gnnrun import progress
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


def test_a_table_to_a_file_keeps_every_figure_whole(monkeypatch):
    """A pipe or a SLURM log gets the table at the width it needs: squeezed into the
    80 columns rich assumes there, its figures would be cut to `…`."""
    buffer = io.StringIO()
    monkeypatch.setattr(progress, "out", Console(file=buffer, width=80))
    table = Table()
    for column in range(9):
        table.add_column(f"column {column}")
    table.add_row(*[f"{1_234_567_890 + c:,}" for c in range(9)])
    progress.print_table(table)
    printed = buffer.getvalue()
    assert "…" not in printed
    assert all(f"{1_234_567_890 + c:,}" in printed for c in range(9))
