"""Keep large freed CPU blocks for reuse (kernels/cpu_allocator.cpp), in every process that runs gnnrun's kernels.

glibc returns each block of 32 MiB or more to the kernel when it is freed, so each
epoch's large activations and gradients were fresh pages again, faulted and
zeroed by the kernel: on a 200k-vertex / 5M-edge graph a GCN epoch spent
0.35-1.1 s of its 1.3-1.8 s in the kernel, and the figure swung with the
machine's state. With the blocks kept, the same epoch took 1.04 s with no page
faults. The cache never holds more than the process once had of such blocks in
use at a time (a miss releases cached blocks first), so a run's peak memory
grows only by what smaller blocks, which glibc handles, add at that moment.

It is installed when the first native kernel loads (`gnnrun.ops.native`: `install`), so
library callers get it as the `gnnrun` command does, with nothing to set.
`GNNRUN_ALLOCATOR=system` leaves torch's allocator alone, as it does tcmalloc.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnrun.ops.native import cpu_allocator_installed as installed
from gnnrun.ops.native import install_cpu_allocator as install

__all__ = ["CacheStats", "describe", "install", "installed", "release", "stats"]


@dataclass(frozen=True)
class CacheStats:
    """Large-block figures since the cache was installed (bytes are in size classes)."""

    hits: int
    misses: int
    in_use_bytes: int
    cached_bytes: int
    peak_in_use_bytes: int
    released_bytes: int


def stats() -> CacheStats | None:
    """The cache's figures, None when it is not installed."""
    if not installed():
        return None
    return CacheStats(*torch.ops.gnnrun.cpu_allocator_stats())


def release() -> int:
    """Hand every cached block back to the system allocator; the bytes released.

    For a process about to wait long (a launcher whose ranks now train): what it keeps
    cached would otherwise stay resident meanwhile.
    """
    return int(torch.ops.gnnrun.cpu_allocator_release()) if installed() else 0


def describe() -> str:
    """One line for `gnnrun env` and a run's summary: whether large blocks are kept, and how often reused."""
    figures = stats()
    if figures is None:
        return "large blocks not kept (GNNRUN_ALLOCATOR=system, or no native kernel ran)"
    allocations = figures.hits + figures.misses
    if not allocations:
        return "large blocks kept for reuse, none allocated yet"
    return (
        f"large blocks kept for reuse, {figures.hits / allocations:.0%} of {allocations:,} reused"
    )
