"""Resumable sweeps: a point whose summary.json says `"complete": true` is done.

Hydra numbers a sweep's points in the order it expands the overrides, so the
same `-m` command run again with `hydra.sweep.dir=<the old sweep dir>` (or
`gnnrun train --resume-sweep <dir>`, which reads the command back from the
sweep's multirun.yaml) gives every point its old directory. A finished point is
skipped with one line; an unfinished one runs again from the start, its earlier
partial files moved to `interrupted/<n>/` inside the point's directory (unless
train.resume=true continues from its checkpoint). Each point records its
overrides in `point.json`, so that a sweep directory made by another command is
refused instead of being mistaken for finished work.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from omegaconf import OmegaConf

from gnnrun.errors import GnnrunError

POINT_FILE = "point.json"
PARTIAL_FILES = ("summary.json", "metrics.rank*.jsonl")
# Hydra overrides gnnrun adds itself (cli.run_hydra), or that --resume-sweep replaces.
_OWN_HYDRA_OVERRIDES = (
    "hydra.job.name=",
    "hydra/job_logging=",
    "hydra/hydra_logging=",
    "hydra.output_subdir=",
    "hydra.run.dir=",
    "hydra.sweep.dir=",
    "hydra.mode=",
)


def is_complete(run_dir: Path) -> bool:
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and summary.get("complete") is True


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The overrides the point's results were made with: point.json, else Hydra's record."""
    run_dir = Path(run_dir)
    try:
        return [str(o) for o in json.loads((run_dir / POINT_FILE).read_text())["overrides"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    hydra_record = run_dir / ".hydra" / "overrides.yaml"
    if hydra_record.is_file():
        try:
            return [str(o) for o in OmegaConf.to_container(OmegaConf.load(hydra_record))]
        except Exception:
            return None
    return None


def finished_point(run_dir: Path, overrides: list[str]) -> bool:
    """Whether this point is already done; a done point of other overrides is an error."""
    if not is_complete(run_dir):
        return False
    recorded = recorded_overrides(run_dir)
    if recorded is not None and sorted(recorded) != sorted(overrides):
        raise GnnrunError(
            f"{run_dir} holds the finished point `{' '.join(recorded)}`, not "
            f"`{' '.join(overrides)}`: the sweep directory was made by another command. "
            "Resume a sweep with the command that made it (`gnnrun train --resume-sweep "
            "SWEEP_DIR` repeats it), or give a new hydra.sweep.dir"
        )
    return True


def skip_message(point: str | int, overrides: list[str], run_dir: Path) -> str:
    what = " ".join(overrides) or "(defaults)"
    return f"point {point} ({what}): complete in {run_dir}, skipped"


def begin_point(run_dir: Path, overrides: list[str], keep_partial: bool = False) -> Path | None:
    """Record the point's overrides; move an earlier attempt's files aside.

    Returns where they went (None when there were none, or `keep_partial`).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    moved_to = None
    partial = [p for pattern in PARTIAL_FILES for p in sorted(run_dir.glob(pattern))]
    if partial and not keep_partial:
        attempts = run_dir / "interrupted"
        attempts.mkdir(exist_ok=True)
        moved_to = attempts / str(sum(1 for _ in attempts.iterdir()))
        moved_to.mkdir()
        for path in partial:
            shutil.move(str(path), moved_to / path.name)
    (run_dir / POINT_FILE).write_text(json.dumps({"overrides": list(overrides)}, indent=2) + "\n")
    return moved_to


def resume_arguments(sweep_dir: Path) -> list[str]:
    """The `-m` arguments that made `sweep_dir`, pointed at it again (from its multirun.yaml)."""
    sweep_dir = Path(sweep_dir)
    record = sweep_dir / "multirun.yaml"
    if not record.is_file():
        what = "does not exist" if not sweep_dir.exists() else "has no multirun.yaml"
        raise GnnrunError(
            f"--resume-sweep {sweep_dir}: {what}; give the directory `gnnrun train -m` printed "
            "or wrote (outputs/multirun/<date>/<time>/ unless hydra.sweep.dir was set)"
        )
    try:
        saved = OmegaConf.load(record).hydra.overrides
        task = [str(o) for o in saved.task]
        hydra = [str(o) for o in saved.hydra if not str(o).startswith(_OWN_HYDRA_OVERRIDES)]
    except Exception as exc:
        raise GnnrunError(f"cannot read the sweep's command from {record}: {exc}") from None
    return ["-m", *task, *hydra, f"hydra.sweep.dir={_quote(str(sweep_dir))}"]


def _quote(value: str) -> str:
    """A path as one Hydra override value."""
    if all(c.isalnum() or c in "/._-:+@" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
