"""Experiment trackers: TensorBoard, MLflow and Weights & Biases (docs/tracking.md).

Importing this package imports none of them: each backend imports its package when a
run chooses it, and `check_installed` refuses a run whose tracker is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from gnnrun.errors import GnnrunError
from gnnrun.resources import install_command
from gnnrun.tracking.backends import BACKENDS
from gnnrun.tracking.config import LoggerConfig


def check_installed(logger: LoggerConfig | None) -> None:
    """Refuse a run whose chosen trackers' packages are missing, with the line that
    installs them (every missing one at once)."""
    missing = [
        (name, BACKENDS.get(name))
        for name in (logger.chosen if logger is not None else [])
        if importlib.util.find_spec(BACKENDS.get(name).module) is None
    ]
    if not missing:
        return
    names = ", ".join(name for name, _ in missing)
    packages = " and ".join(f"the {backend.module} package" for _, backend in missing)
    install = "; ".join(install_command(backend.extra) for _, backend in missing)
    raise GnnrunError(
        f"logger={names} needs {packages}, which {'is' if len(missing) == 1 else 'are'} not "
        f"installed: {install} (or leave {names} out of logger=...)"
    )


def make_tracker(cfg: Any, run_dir: Path, rank: int, world_size: int):
    """This rank's Tracker, or None: no tracker chosen, or a rank other than 0 without
    logger.all_ranks."""
    logger = getattr(cfg, "logger", None)
    if logger is None or not logger.chosen or (rank != 0 and not logger.all_ranks):
        return None
    check_installed(logger)
    from gnnrun.tracking.tracker import Tracker

    return Tracker(logger, cfg, run_dir, rank, world_size)
