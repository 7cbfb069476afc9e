"""Run a function on several real local ranks (for tests), PyG `testing/distributed.py` style.

Each rank is a separate process started by PyTorch's elastic launcher, joined
in a gloo process group; the function's return values come back in rank order,
and a failing rank raises GnnrunError quoting its rank and error.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gnnrun.launch.elastic import launch_local
from gnnrun.launch.rank import in_gloo_group


def run_on_ranks(
    fn: Callable[..., Any], nprocs: int, *args: Any, timeout_s: int = 120
) -> list[Any]:
    """fn(rank, world_size, *args) on `nprocs` ranks; fn must be a module-level function."""
    # Spawned ranks import fn by its module's dotted name: make the folder that
    # name is relative to importable there (pytest may name a test module
    # `tests.comm.test_x` or `test_x`, depending on how it was started).
    folder = str(Path(inspect.getfile(fn)).resolve().parents[fn.__module__.count(".")])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in paths:  # once: a changed environment starts the ranks' server again
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *paths])
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return launch_local(in_gloo_group, (fn, timeout_s, args), nprocs, timeout_s)
