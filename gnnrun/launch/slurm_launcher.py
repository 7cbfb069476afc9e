"""The Hydra launcher cluster=slurm selects: Hydra's submitit_slurm launcher, gnnrun's way.

configs/cluster/slurm.yaml picks `hydra/launcher: submitit_slurm`, and
`gnnrun train` makes Hydra instantiate this subclass for it (`install()`: Hydra
only loads launchers from the `hydra_plugins` package, so gnnrun swaps its
class in under the stock one's name; a command that does not install it gets
the stock launcher). On top of the stock launcher this one:

- reads every point's own resources (its cluster.nodes, tasks_per_node, ...)
  and submits one job array per resource shape, so `cluster.tasks_per_node=1,2`
  really gets 1 and 2 tasks (the stock launcher uses the first config's for all);
- skips points whose summary.json is complete (resumed sweeps), with one line;
- validates every point's config, that its algorithm can run it, and what the
  dataset's config or prepared copy already tells against it, before anything is queued;
- prints each job's id, its log files and its run directory, and each point's
  result as its job ends;
- waits by watching result files and `squeue`, so it works without SLURM
  accounting (submitit's own wait needs sacct);
- on Ctrl-C cancels the jobs it submitted;
- in the job, turns a gnnrun error (SystemExit from the CLI) into a job error.

Every SLURM task of a job runs `__call__`, hence the Hydra task function
(`gnnrun.cli.run_hydra`'s entry, running `gnnrun.job.train`), which becomes
that task's rank (gnnrun.launch.slurm).
"""

from __future__ import annotations

import copy
import copyreg
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
    SlurmLauncher as SubmititSlurmLauncher,
)
from omegaconf import OmegaConf, open_dict, read_write
from rich.console import Console
from rich.markup import escape

import gnnrun.config  # noqa: F401  (registers the resolvers the configs use, in the job too)
from gnnrun.errors import GnnrunError
from gnnrun.launch import sweep
from gnnrun.progress import console, print_error


def _console_named(name: str):
    from gnnrun import progress

    return getattr(progress, name)


def _reduce_console(value):
    """gnnrun's two consoles travel to a job as references to the job's own consoles.

    The Hydra task function submitit pickles is the CLI's wrapper, which prints
    errors through gnnrun.progress.console; a rich Console itself (locks, the
    terminal) cannot be pickled.
    """
    from gnnrun import progress

    for name in ("console", "out"):
        if value is getattr(progress, name):
            return _console_named, (name,)
    raise TypeError("a rich Console other than gnnrun's cannot be sent to a SLURM job")


copyreg.pickle(Console, _reduce_console)

# srun stops every task of a job as soon as one exits with an error.
SRUN_ARGS = ["--kill-on-bad-exit=1"]
FINISHED_GRACE_S = 10  # an ended job's result file may take a moment to appear (shared FS)
_QUEUE_DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
# squeue's reasons for a pending job that the cluster, as configured, will never start
# (the job waits in the queue until cancelled); what to change.
_NEVER_STARTS = {
    "PartitionConfig": "the partition cannot hold it as asked (nodes, tasks per node)",
    "PartitionNodeLimit": "it asks for more nodes than its partition has or allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "BadConstraints": "no node has the features and resources it asks for",
}


@dataclass
class _Point:
    index: int
    overrides: list[str]
    run_dir: Path
    params: dict[str, Any]
    job: Any = None
    tasks: int = 1
    gone_since: float | None = None
    result: JobReturn | None = None
    error: str | None = None
    alone: bool = False  # `gnnrun train cluster=slurm` without -m: a run, not a sweep

    @property
    def label(self) -> str:
        return " ".join(filter_overrides(self.overrides)) or "(defaults)"

    @property
    def where(self) -> str:
        """What a line about this point starts with: nothing for a run of its own."""
        return "" if self.alone else f"point {self.index} ({self.label}): "


class SlurmLauncher(SubmititSlurmLauncher):
    """submitit_slurm with per-point resources, resume, job ids and a wait without sacct."""

    # ------------------------------------------------------------ in the job

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        from gnnrun.memory import apply_memory_settings

        apply_memory_settings()
        # Log files, not a terminal: one line per message, so that the submit
        # host can quote a rank's `error:` line whole.
        console.soft_wrap = True
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as exc:  # the CLI has printed the error to this task's stderr
            if exc.code in (0, None):
                return JobReturn(status=JobStatus.COMPLETED)
            raise RuntimeError(f"gnnrun exited with status {exc.code}") from None

    # ---------------------------------------------------- on the submit host

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        points = self._plan(job_overrides, initial_job_idx)
        failed = [p for p in points if p.error is not None]
        todo = [p for p in points if p.error is None and p.result is None]
        if todo:
            try:
                self._submit(todo)
                self._wait(todo)
            except KeyboardInterrupt:
                self._cancel(todo)
                raise
            except GnnrunError as exc:
                self._cancel(todo)
                print_error(exc)
                raise SystemExit(1) from None
            failed += [p for p in todo if p.error is not None]
        if failed:
            submitted = any(p.job is not None for p in failed)
            resume = f". Resume with: gnnrun train --resume-sweep {sweep_dir}" if submitted else ""
            if not all(p.alone for p in points):
                listed = ", ".join(f"{p.index} ({p.label})" for p in failed)
                print_error(f"{len(failed)} of {len(points)} point(s) failed: {listed}{resume}")
            elif submitted:  # a run refused before submission said why, in one line
                print_error(f"the run failed{resume}")
            raise SystemExit(1)
        if not all(p.alone for p in points):
            sweep.announce(sweep_dir)
        return [
            p.result or JobReturn(overrides=p.overrides, status=JobStatus.COMPLETED) for p in points
        ]

    def _plan(self, job_overrides, initial_job_idx: int) -> list[_Point]:
        """Each point's run directory and resources; finished points are answered at once."""
        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        hydra_config = HydraConfig.instance()
        saved = hydra_config.cfg
        points: list[_Point] = []
        try:
            for index, overrides in enumerate(job_overrides, initial_job_idx):
                overrides = list(overrides)
                cfg = loader.load_sweep_config(self.config, overrides)
                with open_dict(cfg.hydra.job):
                    cfg.hydra.job.num = index
                hydra_config.set_config(cfg)  # the ${hydra:job.num} of sweep.subdir
                run_dir = (Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)).absolute()
                params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
                assert isinstance(params, dict)
                params.pop("_target_", None)
                alone = str(cfg.hydra.sweep.subdir) == "."  # as gnnrun.cli makes a run
                point = _Point(index, overrides, run_dir, params, alone=alone)
                points.append(point)
                task_cfg = copy.deepcopy(cfg)
                with read_write(task_cfg), open_dict(task_cfg):
                    del task_cfg["hydra"]
                try:
                    sweep.check_point(task_cfg)  # as a local sweep checks its points
                    done = sweep.finished_point(run_dir, overrides)
                except GnnrunError as exc:
                    point.error = str(exc)
                    print_error(exc, where=point.where)
                    continue
                if done:
                    console.print(
                        sweep.skip_message(index, overrides, run_dir),
                        soft_wrap=True,
                        markup=False,
                    )
                    point.result = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
        finally:
            hydra_config.cfg = saved
        return points

    def _submit(self, points: list[_Point]) -> None:
        import submitit

        missing = [tool for tool in ("sbatch", "srun", "squeue") if shutil.which(tool) is None]
        if missing:
            raise GnnrunError(
                f"cluster=slurm: {', '.join(missing)} not found on PATH; submit from a SLURM "
                "login node (scripts/slurm_cluster.sh start runs a one-node SLURM here for tests)"
            )
        groups: dict[str, list[_Point]] = {}
        for point in points:
            groups.setdefault(json.dumps(point.params, sort_keys=True, default=str), []).append(
                point
            )
        base_keys = set(OmegaConf.structured(BaseQueueConf).keys())
        for members in groups.values():
            params = dict(members[0].params)
            folder = params.pop("submitit_folder")
            executor = submitit.AutoExecutor(
                folder=folder,
                cluster="slurm",
                slurm_max_num_timeout=params.pop("max_num_timeout", 0),
            )
            executor.update_parameters(
                **{k if k in base_keys else f"slurm_{k}": v for k, v in params.items()},
                slurm_srun_args=SRUN_ARGS,
            )
            arguments = [
                (p.overrides, "hydra.sweep.dir", p.index, f"job_id_for_{p.index}") for p in members
            ]
            state = Singleton.get_state()
            try:
                jobs = executor.map_array(
                    self, *zip(*[(*a, state) for a in arguments], strict=True)
                )
            except Exception as exc:  # sbatch refused: bad partition, account, limits ...
                said = _last_line(str(exc))
                raise GnnrunError(f"sbatch refused the job: {said}{_sbatch_fix(said)}") from None
            tasks = params.get("nodes", 1) * params.get("tasks_per_node", 1)
            for point, job in zip(members, jobs, strict=True):
                point.job, point.tasks = job, tasks
                logs = job.paths.folder / f"{job.job_id}_*_log.{{out,err}}"
                console.print(
                    f"{point.where}SLURM job {job.job_id}, "
                    f"{tasks} task(s); logs {logs}; run directory {point.run_dir}",
                    soft_wrap=True,
                    markup=False,
                )

    def _wait(self, points: list[_Point]) -> None:
        pending = list(points)
        start = time.monotonic()
        while pending:
            queue = _queue_states([p.job.job_id for p in pending])
            now = time.monotonic()
            for point in list(pending):
                if (reason := _never_starts(point, queue)) is not None:
                    pending.remove(point)
                    self._cancel([point])
                    point.error = reason
                    print_error(reason, where=point.where)
                    continue
                finished = _result_files_present(point)
                if not finished and queue is not None:
                    state = queue.get(point.job.job_id)
                    if state is None or state in _QUEUE_DONE:
                        point.gone_since = point.gone_since or now
                        finished = now - point.gone_since > FINISHED_GRACE_S
                if finished:
                    pending.remove(point)
                    self._collect(point, (queue or {}).get(point.job.job_id))
            if pending:
                time.sleep(min(2 + (time.monotonic() - start) / 30, 15))

    def _collect(self, point: _Point, queue_state: str | None) -> None:
        """Read task 0's result (and every task's error) once the job has ended."""
        from submitit.core.utils import JobPaths, pickle_load

        job = point.job
        errors = []
        for task in range(point.tasks):
            paths = JobPaths(job.paths.folder, job_id=job.job_id, task_id=task)
            if not paths.result_pickle.exists():
                continue
            outcome, value = pickle_load(paths.result_pickle)
            if outcome == "success" and task == 0 and isinstance(value, JobReturn):
                point.result = value
                if value.status == JobStatus.FAILED:
                    errors.append(f"rank {task}: {value._return_value}")
            elif outcome != "success":
                errors.append(f"rank {task}: {_gnnrun_error(paths.stderr) or _last_line(value)}")
        if point.result is None and not errors:
            state = _final_state(job.job_id) or queue_state or "ended"
            message = _first_task_error(job, point.tasks)
            errors.append(message or f"the job {state.lower()} without a result")
        if errors:
            others = f" ({len(errors) - 1} more rank(s) failed)" if len(errors) > 1 else ""
            point.error = errors[0] + others
            point.result = None
            console.print(
                f"{escape(point.where)}[bold red]failed[/] in job "
                f"{job.job_id}: {escape(point.error)}; logs {escape(str(job.paths.folder))}",
                soft_wrap=True,
            )
            return
        console.print(
            f"{point.where}done in job {job.job_id}",
            soft_wrap=True,
            markup=False,
        )
        summary_file = point.run_dir / "summary.json"
        if summary_file.is_file():
            from gnnrun.progress import out, print_table
            from gnnrun.report.tables import summary_table

            print_table(summary_table(json.loads(summary_file.read_text())))
            out.print(f"run directory: {point.run_dir}")

    def _cancel(self, points: list[_Point]) -> None:
        ids = [p.job.job_id for p in points if p.job is not None]
        if not ids:
            return
        for job_id in ids:
            subprocess.run(["scancel", job_id], check=False, capture_output=True)
        console.print(f"cancelled SLURM job(s) {', '.join(ids)}")


STOCK_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def install() -> None:
    """Have Hydra instantiate gnnrun's SlurmLauncher wherever the config names submitit_slurm."""
    from hydra.core.plugins import Plugins

    Plugins.instance().class_name_to_class[STOCK_LAUNCHER] = SlurmLauncher


# --------------------------------------------------------------------- helpers


# sbatch's words for what the user can change, and the change.
_SBATCH_FIXES = (
    (
        ("configuration source", "configuration file", "unable to contact slurm controller"),
        "the SLURM controller cannot be reached from here: submit from a login node of "
        "the cluster (SLURM_CONF names the configuration sbatch reads)",
    ),
    (("invalid partition",), "choose one with cluster.partition (`sinfo -s` lists them)"),
    (("invalid account",), "give yours with cluster.account (`sacctmgr show assoc user=$USER`)"),
    (("time limit",), "lower cluster.time_limit_min to the partition's limit (`sinfo -s`)"),
)


def _sbatch_fix(said: str) -> str:
    """ "; <what to change>" for a refusal whose cause is known, else nothing."""
    for words, fix in _SBATCH_FIXES:
        if any(word in said.lower() for word in words):
            return f"; {fix}"
    return ""


def _never_starts(point: _Point, queue: dict[str, str] | None) -> str | None:
    """Why `point`'s pending job will never start (None: it may), with what to change."""
    state = (queue or {}).get(point.job.job_id, "")
    reason = state.partition(" ")[2].strip("()")
    if not state.startswith("PENDING") or reason not in _NEVER_STARTS:
        return None
    return (
        f"SLURM will not start job {point.job.job_id} ({reason}: {_NEVER_STARTS[reason]}), "
        "so it was cancelled: ask for what the partition has (cluster.nodes, "
        "cluster.tasks_per_node, cluster.time_limit_min, cluster.partition; `sinfo -s` "
        "lists the partitions)"
    )


def _queue_states(job_ids: list[str]) -> dict[str, str] | None:
    """job id (with its array index) -> squeue state, a pending job's as "PENDING (reason)";
    None when squeue did not answer."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(arrays)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        # squeue exits 1 with "Invalid job id specified" once every job has left the queue
        return {} if "Invalid job id" in done.stderr else None
    states = {}
    for line in done.stdout.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        state = state.split()[0] if state.strip() else ""
        states[job_id] = f"{state} ({reason.strip()})" if state == "PENDING" else state
    return states


def _final_state(job_id: str) -> str | None:
    """sacct's word on an ended job, where accounting exists."""
    try:
        done = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def _result_files_present(point: _Point) -> bool:
    from submitit.core.utils import JobPaths

    folder, job_id = point.job.paths.folder, point.job.job_id
    return all(
        JobPaths(folder, job_id=job_id, task_id=t).result_pickle.exists()
        for t in range(point.tasks)
    )


def _gnnrun_error(stderr: Path) -> str | None:
    """The `error: ...` line gnnrun printed in a task's stderr, if any."""
    try:
        lines = stderr.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [line.split("error:", 1)[1].strip() for line in lines if line.startswith("error:")]
    return found[-1] if found else None


def _first_task_error(job, tasks: int) -> str | None:
    from submitit.core.utils import JobPaths

    for task in range(tasks):
        paths = JobPaths(job.paths.folder, job_id=job.job_id, task_id=task)
        message = _gnnrun_error(paths.stderr)
        if message:
            return f"rank {task}: {message}"
    return None


def _last_line(text: Any) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else str(text)
