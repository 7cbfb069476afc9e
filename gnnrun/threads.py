"""CPU priority of gnnrun's background threads."""

from __future__ import annotations

import contextlib
import os
import threading

LOWEST = 19  # the highest nice value: the thread runs on what the others leave


def lower_this_thread_priority(nice: int = LOWEST) -> None:
    """Give the calling thread alone the nice value `nice` (Linux keeps one per thread), so
    that the process's other threads come first on busy cores; where threads have no nice
    value of their own (not Linux), nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def this_thread_nice() -> int | None:
    """The calling thread's nice value (None where it has none of its own)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return None
