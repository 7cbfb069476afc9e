"""Terminal output: one rich console on stderr, stages with elapsed time, progress bars."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")

# Progress, warnings and errors go to stderr; results (tables) to stdout, so they can be piped.
console = Console(stderr=True)
out = Console()

# Live displays draw on stderr and leave stdout alone (rich would otherwise
# redirect it through the display while one is active).
_LIVE = {"console": console, "transient": True, "redirect_stdout": False, "redirect_stderr": False}


def print_error(message: object, where: str = "") -> None:
    """`error: MESSAGE` on stderr, the message printed literally (paths and gloo's
    messages hold square brackets, which rich would take for markup)."""
    console.print(f"{escape(where)}[bold red]error:[/] {escape(str(message))}", soft_wrap=True)


def print_warning(message: object) -> None:
    """`warning: MESSAGE` on stderr, the message printed literally (as `print_error`)."""
    console.print(f"[bold yellow]warning:[/] [yellow]{escape(str(message))}[/]", soft_wrap=True)


def print_table(table: RenderableType) -> None:
    """A result table on stdout. To a file or a pipe (a SLURM log, `| less`) at the width
    it needs: rich would squeeze it into 80 columns there, cutting figures short."""
    if out.is_terminal:
        out.print(table)
        return
    unbounded = out.options.update(max_width=1 << 16)
    width = max(out.width, Measurement.get(out, unbounded, table).maximum)
    # A console of that width: print(width=...) would not widen past the console's own.
    Console(file=out.file, width=width).print(table)


@contextlib.contextmanager
def stage(description: str) -> Iterator[None]:
    """Show a spinner while a step runs, then one line with how long it took."""
    start = time.perf_counter()
    spinner = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), **_LIVE
    )
    with spinner:
        spinner.add_task(f"{description} ...", total=None)
        yield
    console.print(
        f"[green]✓[/] {escape(description)} [dim]({time.perf_counter() - start:.1f} s)[/]"
    )


def bars(description: str = "{task.description}", remaining: bool = False) -> Progress:
    """A live display of progress bars on stderr (count, elapsed and, with `remaining`, the
    time left) that disappears when stopped; rows printed through its console go above."""
    columns = [TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    if remaining:
        columns.append(TimeRemainingColumn())
    return Progress(*columns, **_LIVE)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar (counts, elapsed time) that disappears when done."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, **_LIVE) as progress:
        yield from progress.track(items, total=total, description=description)
