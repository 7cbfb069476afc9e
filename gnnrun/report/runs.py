"""Find and read what `gnnrun train` left behind: one run directory, or a sweep of them.

A run directory holds `.hydra/` (the composed config and the overrides),
`metrics.rank<R>.jsonl` (one record per epoch and rank) and, once rank 0 has
finished, `summary.json`. A sweep directory (`gnnrun train -m`) holds
`multirun.yaml` and one numbered run directory per point. Nothing here needs
torch: a report reads JSON and YAML only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from gnnrun.errors import GnnrunError
from gnnrun.io import shape_problem
from gnnrun.run_dir import recorded_failures

# Overrides that set the rank count: plots put them on the x axis rather than
# in a series' name.
RANK_KEYS = ("cluster.nprocs", "cluster.nodes", "cluster.tasks_per_node", "partitioner.num_parts")


@dataclass
class Run:
    """One training run (a sweep point or a lone run), finished or not."""

    path: Path
    point: str  # the sweep point's number, or the run directory's name
    overrides: list[str]
    config: dict[str, Any]
    summary: dict[str, Any] | None
    problem: str | None = None  # why summary.json could not be read, if it could not
    rank_files: int = 0  # metrics.rank<R>.jsonl files written so far
    failure: str | None = None  # the error a sweep recorded for this point, if it failed

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def algorithm(self) -> str:
        return self._field("algorithm", "algorithm", "name")

    @property
    def dataset(self) -> str:
        return self._field("dataset", "dataset", "name")

    @property
    def model(self) -> str:
        return self._field("model", "model", "name")

    @property
    def ranks(self) -> int | None:
        if self.summary is not None:
            return self.summary["ranks"]
        # cluster.nprocs is what was asked for, not what ran (`single` runs one
        # process whatever it says), so an unfinished run counts its rank files.
        return self.rank_files or None

    @property
    def target_epochs(self) -> int | None:
        return self.config.get("train", {}).get("epochs")

    @property
    def status(self) -> str:
        if self.problem is not None:
            return self.problem
        if self.summary is None:
            logged = len(self.history)
            target = f"/{self.target_epochs}" if self.target_epochs else ""
            if self.failure is not None:
                return f"failed ({logged}{target} epochs)" if logged else "failed"
            return f"unfinished ({logged}{target} epochs)" if logged else "no results yet"
        if self.summary.get("stopped_early"):
            target = f"/{self.target_epochs}" if self.target_epochs else ""
            return f"stopped early ({self.summary['epochs']}{target} epochs)"
        if not self.summary.get("complete", True):
            target = f"/{self.target_epochs}" if self.target_epochs else ""
            return f"partial ({self.summary['epochs']}{target} epochs)"
        return "done"

    @cached_property
    def history(self) -> list[dict[str, Any]]:
        """Rank 0's per-epoch records (the ones summary.json is computed from)."""
        return read_metrics(self.path / "metrics.rank0.jsonl")

    def _field(self, summary_key: str, *config_keys: str) -> str:
        if self.summary is not None and summary_key in self.summary:
            return str(self.summary[summary_key])
        node: Any = self.config
        for key in config_keys:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        return str(node) if node not in ({}, None) else "?"


@dataclass
class RunSet:
    """What one path given to `gnnrun report` names: a sweep, or a single run."""

    path: Path
    kind: str  # "sweep" or "run"
    runs: list[Run] = field(default_factory=list)
    label: str = ""  # "A" / "B" when two are compared, else empty
    # A sweep's point numbers without a directory, below its highest one or recorded as
    # failed: why (the recorded error, or that it has none).
    missing: dict[str, str] = field(default_factory=dict)


def load_run_set(path: Path, label: str = "") -> RunSet:
    """Read a sweep directory or a run directory; anything else is a GnnrunError."""
    path = Path(path)
    expected = (
        "expected a run directory (summary.json, metrics.rank0.jsonl or .hydra/ from "
        "`gnnrun train`) or a sweep directory (multirun.yaml and numbered points from "
        "`gnnrun train -m`)"
    )
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise GnnrunError(f"{path} {what}: {expected}")
    if is_run_dir(path):
        return RunSet(path, "run", [load_run(path, path.name)], label)
    points = sorted(
        (p for p in path.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    )
    # A point's directory exists before its first file, so a sweep is recognised
    # by multirun.yaml or by at least one numbered point holding run files.
    if (path / "multirun.yaml").is_file() or any(is_run_dir(p) for p in points):
        if not points:
            raise GnnrunError(
                f"{path} is a sweep with no points yet (multirun.yaml only): report it once "
                "its runs have started"
            )
        return _sweep(path, points, label)
    raise GnnrunError(f"{path} is neither a run nor a sweep directory: {expected}")


def _sweep(path: Path, points: list[Path], label: str) -> RunSet:
    failures = {
        n: f.get("error", "?") if isinstance(f, dict) else "?"
        for n, f in recorded_failures(path).items()
    }
    runs = [load_run(p, p.name) for p in points]
    for run in runs:
        run.failure = None if run.finished else failures.get(run.point)  # a retry finished it
    have = {run.point for run in runs}
    gaps = {str(n) for n in range(max(int(p) for p in have) + 1)} | set(failures)
    missing = {
        n: f"failed: {failures[n]}" if n in failures else "no directory (not started, or removed)"
        for n in sorted(gaps - have, key=int)
    }
    return RunSet(path, "sweep", runs, label, missing)


def is_run_dir(path: Path) -> bool:
    return (
        (path / "summary.json").is_file()
        or (path / "metrics.rank0.jsonl").is_file()
        or (path / ".hydra" / "config.yaml").is_file()
    )


def load_run(path: Path, point: str) -> Run:
    config = _read_yaml(path / ".hydra" / "config.yaml")
    overrides = _read_yaml(path / ".hydra" / "overrides.yaml")
    summary, problem = None, None
    summary_file = path / "summary.json"
    if summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text())
        except (OSError, ValueError) as exc:  # half written, or damaged (ValueError: bad UTF-8 too)
            problem = f"unreadable summary.json ({exc.__class__.__name__})"
        else:
            if (wrong := summary_problem(summary)) is not None:
                summary, problem = None, f"damaged summary.json ({wrong})"
    return Run(
        path=path,
        point=point,
        overrides=[str(o) for o in overrides] if isinstance(overrides, list) else [],
        config=config if isinstance(config, dict) else {},
        summary=summary if isinstance(summary, dict) else None,
        problem=problem,
        rank_files=len(list(path.glob("metrics.rank*.jsonl"))),
    )


# What the report reads of a summary.json, and the types the trainer writes.
_NUMBER = (int, float)
SUMMARY_FIELDS: dict[str, Any] = {"ranks": int, "epochs": int}
OPTIONAL_SUMMARY_FIELDS: dict[str, Any] = {
    "algorithm": str,
    "dataset": str,
    "model": str,
    "complete": bool,
    "final": dict,
    "best": dict,
    "time_median": dict,
    "to_target": dict,
    "stopped_early": dict,
    "hit_rate": list,
    "epoch_s_median": _NUMBER,
    "bytes_per_epoch_rank0": _NUMBER,
    "peak_rss_mb_rank0": _NUMBER,
    "comm_hidden_rank0": _NUMBER,
}


def summary_problem(summary: Any) -> str | None:
    """Why `summary` is not a summary.json the trainer writes (None: it is one)."""
    if problem := shape_problem(summary, SUMMARY_FIELDS, "it"):
        return problem
    for key, kind in OPTIONAL_SUMMARY_FIELDS.items():
        value = summary.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or (kind is _NUMBER and isinstance(value, bool)):
            return f"{key!r} is {type(value).__name__}"
        if kind is dict and key != "to_target":
            numbers = (v for k, v in value.items() if k != "epoch")
            if not all(v is None or isinstance(v, _NUMBER) for v in numbers):
                return f"{key!r} holds values that are not numbers"
    if summary["ranks"] < 1 or summary["epochs"] < 0:
        return "'ranks' or 'epochs' out of range"
    return None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Per-epoch records of one rank. A line that does not parse is skipped: the
    last one may be half written while the run is still going; so is one that is not
    UTF-8 (a damaged file)."""
    if not path.is_file():
        return []
    records = []
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # a damaged config only costs the row its names
        return None


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def distinguishing_overrides(runs: list[Run]) -> tuple[list[list[str]], list[str]]:
    """Each run's overrides that not every run shares, and the shared ones.

    A lone run has nothing to be told apart from, so all its overrides
    distinguish it (from the defaults).
    """
    if len(runs) <= 1:
        return [list(r.overrides) for r in runs], []
    shared = set(runs[0].overrides).intersection(*(r.overrides for r in runs[1:]))
    common = [o for o in runs[0].overrides if o in shared]
    return [[o for o in r.overrides if o not in shared] for r in runs], common
