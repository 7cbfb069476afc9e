"""Checkpoints that resume to the same trajectory, written atomically."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_file, write_error

CHECKPOINT = "checkpoint.pt"


def algorithm_checkpoint(rank: int, epoch: int) -> str:
    """The file of one rank's algorithm state (DRPA's delayed aggregates, ...) after `epoch`."""
    return f"algorithm.rank{rank}.epoch{epoch}.pt"


def save_checkpoint(directory: Path, state: dict[str, Any], name: str = CHECKPOINT) -> Path:
    """Write to a temporary file, fsync, rename: a crash leaves the previous checkpoint intact."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(directory, exc) from None
    path = directory / name
    try:
        with atomic_file(path, "wb") as f:
            torch.save(state, f)
    except RuntimeError as exc:
        # torch's zip writer reports a short write (a full disk) as "unexpected pos".
        free = shutil.disk_usage(directory).free
        raise GnnrunError(
            f"cannot write {path}: {exc} ({free / 2**20:.0f} MiB free on its device); "
            "free some space there, or set train.checkpoint_dir elsewhere"
        ) from None
    return path


def load_checkpoint(directory: Path, name: str = CHECKPOINT) -> dict[str, Any] | None:
    path = Path(directory) / name
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
