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

Local sweeps (cluster=local or hosts) run through `LocalSweepLauncher`: every point
is checked before the first one runs, and a point that fails is recorded in the
sweep directory's `failed_points.json` while the sweep goes on. A resumed sweep
skips the points that failed, naming their error, unless `--retry-failed` asks
for them again.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from omegaconf import OmegaConf, open_dict, read_write

from gnnrun.errors import GnnrunError, ReportedError
from gnnrun.progress import console, out, print_error
from gnnrun.run_dir import FAILURES_FILE, recorded_failures

POINT_FILE = "point.json"
# An unfinished point's files, moved aside when it runs again; TensorBoard's event files
# and the trackers' run ids too (gnnrun.tracking), so that its new run starts clean.
PARTIAL_FILES = (
    "summary.json",
    "metrics.rank*.jsonl",
    "events.out.tfevents.*",
    "tracking.rank*.json",
)
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


# ------------------------------------------------------------- local sweeps

# `gnnrun train --retry-failed` (cli.cmd_train): run points that failed before again.
retry_failed = False


def _record(sweep_dir: Path, index: int, overrides: list[str], error: str | None) -> None:
    failures = recorded_failures(sweep_dir)
    if error is None:
        if failures.pop(str(index), None) is None:
            return
    else:
        failures[str(index)] = {"overrides": list(overrides), "error": error}
    path = Path(sweep_dir) / FAILURES_FILE
    if not failures:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(failures, indent=2) + "\n")
    tmp.replace(path)


def announce(sweep_dir: Path) -> None:
    """The last line of a sweep that ran every point, as `run directory:` ends a run: the
    directory `gnnrun report` and `--resume-sweep` take."""
    out.print(f"sweep directory: {sweep_dir}", markup=False, soft_wrap=True)


def check_point(task_cfg) -> None:
    """What a single `gnnrun train` of this point refuses before preparing anything."""
    from gnnrun.algorithms import check_known_dataset, check_runnable
    from gnnrun.config import to_objects
    from gnnrun.tracking import check_installed

    config = to_objects(task_cfg)
    check_runnable(config)
    check_installed(config.logger)
    check_known_dataset(config)


class LocalSweepLauncher(BasicLauncher):
    """Hydra's basic launcher, gnnrun's way: every point checked before the first runs,
    and a failed point recorded and named while the sweep goes on to the next."""

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        assert self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        points = self._check(job_overrides, initial_job_idx)
        failures = recorded_failures(sweep_dir)
        failed: list[str] = []
        for index, overrides, cfg in points:
            label = " ".join(filter_overrides(overrides)) or "(defaults)"
            before = failures.get(str(index))
            if before is not None and before.get("overrides") == overrides:
                if not retry_failed:
                    console.print(
                        f"point {index} ({label}): failed before ({before.get('error')}), "
                        "skipped; --retry-failed runs it again",
                        soft_wrap=True,
                        markup=False,
                    )
                    failed.append(f"{index} ({label})")
                    continue
                console.print(
                    f"point {index} ({label}): failed before; running it again",
                    soft_wrap=True,
                    markup=False,
                )
            error = self._run(cfg, index, label, sweep_dir)
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
            _record(sweep_dir, index, overrides, error)
            if error is not None:
                console.print(
                    f"point {index} ({label}): failed: {error}; going on with the next point",
                    soft_wrap=True,
                    markup=False,
                )
                failed.append(f"{index} ({label})")
        if failed:
            print_error(
                f"{len(failed)} of {len(points)} point(s) failed: {', '.join(failed)} "
                f"(recorded in {sweep_dir / FAILURES_FILE}). Once their cause is fixed: "
                f"gnnrun train --resume-sweep {sweep_dir} --retry-failed"
            )
            raise SystemExit(1)
        announce(sweep_dir)
        return [JobReturn(overrides=o, status=JobStatus.COMPLETED) for _, o, _ in points]

    def _check(self, job_overrides, initial_job_idx: int) -> list[tuple[int, list[str], object]]:
        """Each point's config, every one checked; bad points named, and then nothing runs."""
        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        hydra_config = HydraConfig.instance()
        saved = hydra_config.cfg
        points, bad = [], []
        try:
            for index, overrides in enumerate(job_overrides, initial_job_idx):
                overrides = list(overrides)
                cfg = loader.load_sweep_config(self.config, overrides)
                with open_dict(cfg):
                    cfg.hydra.job.id = index
                    cfg.hydra.job.num = index
                points.append((index, overrides, cfg))
                hydra_config.set_config(cfg)  # the ${hydra:job.num} of sweep.subdir
                run_dir = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
                task_cfg = copy.deepcopy(cfg)
                with read_write(task_cfg), open_dict(task_cfg):
                    del task_cfg["hydra"]
                try:
                    check_point(task_cfg)
                    finished_point(run_dir, overrides)
                except GnnrunError as exc:
                    label = " ".join(filter_overrides(overrides)) or "(defaults)"
                    print_error(exc, where=f"point {index} ({label}): ")
                    bad.append(str(index))
        finally:
            hydra_config.cfg = saved
        if bad:
            print_error(
                f"{len(bad)} of {len(points)} sweep point(s) cannot run ({', '.join(bad)}), "
                "so none was run: change or leave out the values named above"
            )
            raise SystemExit(1)
        return points

    def _run(self, cfg, index: int, label: str, sweep_dir: Path) -> str | None:
        """Run one point; its error, or None when it finished. A point stopped by a
        signal stops the sweep, not recorded as failed."""
        import traceback

        try:
            ret = run_job(
                hydra_context=self.hydra_context,
                task_function=self.task_function,
                config=cfg,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
            )
        except ReportedError as exc:  # printed already
            if exc.stopped:
                print_error(
                    f"the sweep stopped at point {index} ({label}); gnnrun train "
                    f"--resume-sweep {sweep_dir} continues it from there"
                )
                raise SystemExit(1) from None
            return exc.message
        except SystemExit as exc:
            return None if exc.code in (0, None) else f"exited with status {exc.code}"
        if ret.status == JobStatus.FAILED:  # not a GnnrunError: a bug, with its traceback
            exc = ret._return_value
            assert isinstance(exc, BaseException)
            console.print(
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                markup=False,
                highlight=False,
            )
            return f"{type(exc).__name__}: {exc}"
        return None


BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Within: Hydra instantiates LocalSweepLauncher wherever the config names the basic
    launcher (a `gnnrun train -m`); the basic one again afterwards (`partition -m`, or a
    later command in the same process)."""
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance().class_name_to_class
    previous = plugins.get(BASIC_LAUNCHER)
    plugins[BASIC_LAUNCHER] = LocalSweepLauncher
    try:
        yield
    finally:
        if previous is None:
            plugins.pop(BASIC_LAUNCHER, None)
        else:
            plugins[BASIC_LAUNCHER] = previous
