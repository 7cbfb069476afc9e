"""Terminal output: one rich console on stderr, stages with elapsed time, progress bars."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

T = TypeVar("T")

console = Console(stderr=True)


@contextlib.contextmanager
def stage(description: str) -> Iterator[None]:
    """Show a spinner while a step runs, then one line with how long it took."""
    start = time.perf_counter()
    with console.status(f"{description} ..."):
        yield
    console.print(f"[green]✓[/] {description} [dim]({time.perf_counter() - start:.1f} s)[/]")


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar (counts, elapsed time) that disappears when done."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        yield from progress.track(items, total=total, description=description)
