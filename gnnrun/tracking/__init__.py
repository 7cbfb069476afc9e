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
    """Refuse a run whose chosen tracker's package is missing, with the line that installs it."""
    for name in logger.chosen if logger is not None else []:
        backend = BACKENDS.get(name)
        if importlib.util.find_spec(backend.module) is None:
            raise GnnrunError(
                f"logger={name} needs the {backend.module} package, which is not installed: "
                f"{install_command(backend.extra)} (or leave {name} out of logger=...)"
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
