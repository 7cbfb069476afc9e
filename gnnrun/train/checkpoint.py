"""Checkpoints that resume to the same trajectory, written atomically."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_file, atomic_link, write_error

CHECKPOINT = "checkpoint.pt"
# train.keep_best: the model of the best evaluation so far (gnnrun predict predict.checkpoint=best).
BEST_CHECKPOINT = "best.pt"


def algorithm_checkpoint(rank: int, epoch: int) -> str:
    """The file of one rank's algorithm state (DRPA's delayed aggregates, ...) after `epoch`."""
    return f"algorithm.rank{rank}.epoch{epoch}.pt"


def save_checkpoint(
    directory: Path, state: dict[str, Any], name: str = CHECKPOINT, run_dir: Path | None = None
) -> Path:
    """Write to a temporary file, fsync, rename: a crash leaves the previous checkpoint intact.

    With `run_dir`, the run keeps its own copy, `run_dir/name` (`checkpoint.pt`: what
    `gnnrun predict run=...` reads, and a restarted attempt resumes from), written first;
    the shared `directory/name` is then made from that file (a hard link where it can
    be). Runs with the same train.checkpoint_dir (a sweep's points, splits trained side
    by side) replace each other's shared file, and made the other way round, a run's copy
    could be the file another run had just put there. Returns the file written first."""
    first = Path(run_dir or directory) / name
    _make_folder(first.parent)
    try:
        with atomic_file(first, "wb") as f:
            torch.save(state, f)
    except RuntimeError as exc:
        # torch's zip writer reports a short write (a full disk) as "unexpected pos".
        free = shutil.disk_usage(first.parent).free
        raise GnnrunError(
            f"cannot write {first}: {exc} ({free / 2**20:.0f} MiB free on its device); "
            "free some space there, or write it elsewhere (train.checkpoint_dir, "
            "hydra.run.dir)"
        ) from None
    if run_dir is not None:
        _make_folder(Path(directory))
        atomic_link(first, Path(directory) / name)
    return first


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(folder, exc) from None


# What to do about a damaged checkpoint when training (resume) and when predicting.
RESUME_FIX = (
    "Move it away to start this run afresh, or set train.checkpoint_dir to another "
    "checkpoint's directory"
)
PREDICT_FIX = (
    "Give an intact checkpoint of this run's model with train.checkpoint_dir=DIR, or train "
    "the run again"
)


def load_checkpoint(
    directory: Path, name: str = CHECKPOINT, fix: str = RESUME_FIX
) -> dict[str, Any] | None:
    """The checkpoint `directory/name`, None when there is none; a damaged one is refused
    with `fix`, what to do about it."""
    path = Path(directory) / name
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: not here
        raise GnnrunError(_damaged(path, "its contents are not a checkpoint's", fix)) from None
    except Exception as exc:  # torch raises a zoo of types for a cut or foreign file
        reason = str(exc).strip().split("\n")[0].split(". ")[0][:160] or type(exc).__name__
        raise GnnrunError(_damaged(path, reason, fix)) from None
    if not isinstance(state, dict) or "epoch" not in state:
        raise GnnrunError(_damaged(path, "not a gnnrun checkpoint", fix))
    return state


def _damaged(path: Path, reason: str, fix: str) -> str:
    return f"{path} cannot be read as a checkpoint ({reason}); it may have been cut short. {fix}"
