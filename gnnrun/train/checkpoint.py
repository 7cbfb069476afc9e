"""Checkpoints that resume to the same trajectory, written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(directory: Path, state: dict[str, Any]) -> Path:
    """Write to a temporary file, fsync, rename: a crash leaves the previous checkpoint intact."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT
    tmp = path.with_name(f"{CHECKPOINT}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(directory: Path) -> dict[str, Any] | None:
    path = Path(directory) / CHECKPOINT
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
