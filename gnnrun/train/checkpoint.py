"""Checkpoints that resume to the same trajectory, written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

CHECKPOINT = "checkpoint.pt"


def algorithm_checkpoint(rank: int, epoch: int) -> str:
    """The file of one rank's algorithm state (DRPA's delayed aggregates, ...) after `epoch`."""
    return f"algorithm.rank{rank}.epoch{epoch}.pt"


def save_checkpoint(directory: Path, state: dict[str, Any], name: str = CHECKPOINT) -> Path:
    """Write to a temporary file, fsync, rename: a crash leaves the previous checkpoint intact."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    tmp = path.with_name(f"{name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(directory: Path, name: str = CHECKPOINT) -> dict[str, Any] | None:
    path = Path(directory) / name
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
