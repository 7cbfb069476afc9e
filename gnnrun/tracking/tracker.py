"""What the trainer tells the trackers, and how it reaches them without slowing an epoch.

The trainer calls `Tracker.started`, `epoch_done`, `checkpointed`, `finished` and
`close` (gnnrun.train.trainer). `started` opens each backend's run before the first
epoch; every later call only puts a job on a queue. One thread per run takes the jobs
in order and hands them to every chosen backend
(gnnrun.tracking.backends), so an epoch never waits for a disk or a server. The
thread runs at the lowest CPU priority: where training keeps every core busy it waits,
and the epochs queued meanwhile go out together (MLflow: one request for all of them),
so a tracker's cost per epoch falls as the epochs get shorter. A backend
that raises (a server gone, a full disk) is named once and left out from then on;
training goes on.

Resuming: each backend's run id, and the last epoch logged, are kept in
`tracking.rank<r>.json`, in the run directory (a restarted attempt finds it there)
and beside the checkpoint when one is written (a `train.resume=true` run in a new
directory finds it there). A resumed run goes on in the same MLflow / W&B run and at
the next TensorBoard step; epochs that were logged already are not logged twice.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnrun.progress import print_warning
from gnnrun.threads import lower_this_thread_priority
from gnnrun.tracking.backends import BACKENDS, Backend
from gnnrun.tracking.config import LoggerConfig
from gnnrun.tracking.figures import flat_params, scalars

# How long the end of a run waits for the trackers to send what is queued.
FLUSH_TIMEOUT_S = 120.0


@dataclass
class Sweep:
    """The sweep a run is a point of (its directory holds point.json: gnnrun.launch.sweep)."""

    dir: Path
    point: str
    overrides: list[str]


@dataclass
class RunInfo:
    """What every backend is told when the run starts."""

    cfg: Any
    run_dir: Path
    rank: int
    world_size: int
    all_ranks: bool
    name: str  # a readable name: the run directory's last two parts, or the sweep point
    params: dict[str, str]  # the resolved config, flattened to dotted keys
    hparams: dict[str, Any]  # the settings worth comparing across runs (TensorBoard HParams)
    config_yaml: str
    sweep: Sweep | None
    start_epoch: int = 0
    attempt: int = 0  # 0: first; n: after n restarts or requeues
    ids: dict[str, str] = field(default_factory=dict)  # backend -> run id, when resuming
    # The epochs an earlier attempt recorded as sent: this one sends the later ones (an
    # attempt killed while sending may have sent more than it recorded).
    logged_epochs: int = 0


def state_file(rank: int) -> str:
    return f"tracking.rank{rank}.json"


# Sections whose settings the HParams table shows (paths and cluster details are left out).
_HPARAM_SECTIONS = ("model.", "optimizer.", "algorithm.", "task.name", "train.seed", "train.epochs")


def comparable_hparams(params: dict[str, str], sweep: Sweep | None) -> dict[str, Any]:
    """Settings as numbers, booleans or strings, for TensorBoard's HParams table: those
    that shape what is learnt, the dataset, the ranks, and every key a sweep varies."""
    varied = {o.split("=", 1)[0].lstrip("+~") for o in (sweep.overrides if sweep else [])}
    chosen = {
        k: v
        for k, v in params.items()
        if k.startswith(_HPARAM_SECTIONS) or k in varied or k in ("dataset.name", "cluster.nprocs")
    }
    hparams: dict[str, Any] = {}
    for key, text in chosen.items():
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        hparams[key] = value if isinstance(value, bool | int | float | str) else str(value)
    return hparams


def find_sweep(run_dir: Path) -> Sweep | None:
    try:
        overrides = json.loads((run_dir / "point.json").read_text())["overrides"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Sweep(run_dir.parent, run_dir.name, [str(o) for o in overrides])


class Tracker:
    """One rank's trackers for one run (built by gnnrun.tracking.make_tracker)."""

    def __init__(self, logger: LoggerConfig, cfg: Any, run_dir: Path, rank: int, world: int):
        self.cfg, self.run_dir, self.rank = cfg, Path(run_dir), rank
        self.checkpoint_dir = Path(cfg.train.checkpoint_dir)
        sweep = find_sweep(self.run_dir)
        params = flat_params(cfg)
        from omegaconf import OmegaConf

        self.info = RunInfo(
            cfg=cfg,
            run_dir=self.run_dir,
            rank=rank,
            world_size=world,
            all_ranks=logger.all_ranks,
            name=(
                f"{sweep.dir.name} point {sweep.point}"
                if sweep
                else f"{self.run_dir.parent.name}/{self.run_dir.name}"
            ),
            params=params,
            hparams=comparable_hparams(params, sweep),
            config_yaml=OmegaConf.to_yaml(OmegaConf.structured(cfg)),
            sweep=sweep,
        )
        self.backends: list[Backend] = [BACKENDS.get(name)(logger) for name in logger.chosen]
        self.logged_epochs = 0  # epochs queued by this run, its earlier attempts included
        self._sent_epochs = 0  # of which sent (the tracking thread's count; the state file's)
        self._unsent: list[tuple[int, dict[str, float]]] = []  # queued epochs not yet taken
        self._unsent_lock = threading.Lock()
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="gnnrun-tracking", daemon=True)
        self._closed = False
        self._finished = False
        self.thread_cpu_s = 0.0  # the tracking thread's CPU time (the benchmark reads it)

    # ---------------------------------------------------------------- the trainer's calls

    def started(
        self,
        start_epoch: int,
        attempt: int,
        run_id: str | None,
        history: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> None:
        """The run starts at `start_epoch` (after a resume), in attempt `attempt` of run `run_id`;
        `history`: the epochs before it (rank 0's, from the checkpoint), logged now where they
        were not (an attempt killed before its tracker had sent them, a run resumed with a
        tracker it did not have)."""
        saved = self._saved_state(start_epoch, attempt, run_id)
        self.info.start_epoch, self.info.attempt = start_epoch, attempt
        self.info.ids = dict(saved.get("ids", {}))
        self.logged_epochs = self._sent_epochs = int(saved.get("logged_epochs", 0))
        self.info.logged_epochs = self.logged_epochs
        self._run_id = run_id
        # Before the first epoch, in this thread: importing a tracker's package and opening
        # its run take seconds of CPU that would otherwise be taken from the first epochs.
        for backend in self.backends:
            self._guarded(backend, "start", lambda b: b.start(self.info))
        self._thread.start()
        self._put(self._write_state)
        for record in history or self._own_records(start_epoch):
            self.epoch_done(record)
        if attempt or start_epoch:
            self._each("resumed", lambda b: b.resumed(start_epoch, attempt))

    def epoch_done(self, record: dict[str, Any]) -> None:
        epoch = int(record["epoch"]) + 1  # the step: the epoch's number, counted from 1
        if epoch <= self.logged_epochs:  # logged by an attempt that died after its checkpoint
            return
        self.logged_epochs = epoch
        with self._unsent_lock:
            self._unsent.append((epoch, scalars(record)))
        self._put(self._send_epochs)

    def checkpointed(self, epoch: int) -> None:
        """A checkpoint after `epoch` epochs was written: keep the run ids beside it."""
        self._put(lambda: self._write_state(self.checkpoint_dir, epoch))

    def finished(self, summary: dict[str, Any] | None) -> None:
        """The run ended with `summary` (summary.json is written; None on ranks other than
        0, which have none): its files, then close."""
        self._finished = True
        if summary is None:
            self.close()
            return
        files: list[Path] = []
        self._put(lambda: files.extend(self._artifacts()))
        summary = on_step_axis(summary)
        checkpoint = self.run_dir / "checkpoint.pt"
        self._each(
            "finish",
            lambda b: b.finish(summary, files, checkpoint if checkpoint.is_file() else None),
        )
        self.close()

    def _artifacts(self) -> list[Path]:
        """summary.json and the plots of `gnnrun report RUN_DIR` (written to RUN_DIR/report,
        where that command puts them)."""
        from gnnrun.report.plots import write_plots
        from gnnrun.report.runs import load_run_set

        files = [self.run_dir / "summary.json"]
        try:
            plots = write_plots([load_run_set(self.run_dir)], self.run_dir / "report")
        except Exception as exc:  # the plots are a nicety: their failure costs the rest nothing
            print_warning(f"experiment tracking: the report's plots were not made ({exc})")
            return files
        return files + plots.written

    def close(self) -> None:
        """Send what is queued (waiting at most FLUSH_TIMEOUT_S) and end every backend's run;
        a run that did not finish (an error, a stop to be requeued) is marked so."""
        if self._closed:
            return
        if not self._thread.is_alive():  # never started (an error before the first epoch)
            self._closed = True
            return
        finished = self._finished
        self._each("close", lambda b: b.close(finished))
        self._jobs.put(None)
        self._closed = True
        self._thread.join(FLUSH_TIMEOUT_S)
        if self._thread.is_alive():
            names = ", ".join(b.name for b in self.backends if not b.failed)
            print_warning(
                f"logger {names}: still sending after {FLUSH_TIMEOUT_S:.0f} s at the run's end; "
                "what was not sent is lost (metrics.rank*.jsonl and summary.json have it all)"
            )

    # ---------------------------------------------------------------- inside

    def _each(self, what: str, call: Callable[[Backend], None]) -> None:
        for backend in self.backends:
            self._put(lambda b=backend: self._guarded(b, what, call))

    def _put(self, job: Callable[[], None]) -> None:
        if not self._closed:
            self._jobs.put(job)

    def _send_epochs(self) -> None:
        """Every queued epoch, in one call per backend (a no-op where an earlier job took
        them), then the state file that says they were sent."""
        with self._unsent_lock:
            epochs, self._unsent = self._unsent, []
        if not epochs:
            return
        for backend in self.backends:
            new = [(epoch, figures) for epoch, figures in epochs if epoch > backend.logged_through]
            if new:
                self._guarded(backend, "epoch", lambda b, new=new: b.log_epochs(new))
        self._sent_epochs = epochs[-1][0]
        self._write_state()

    def _guarded(self, backend: Backend, what: str, call: Callable[[Backend], None]) -> None:
        if backend.failed:
            return
        try:
            call(backend)
        except Exception as exc:
            backend.failed = True
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            print_warning(
                f"logger {backend.name} failed ({what}: {type(exc).__name__}: {reason}); it logs "
                "nothing more for this run, and training goes on (metrics.rank*.jsonl and "
                "summary.json have every epoch)"
            )

    def _work(self) -> None:
        # Where the cores are busy with training, sending waits.
        lower_this_thread_priority()
        while True:
            job = self._jobs.get()
            if job is None:
                self._jobs.task_done()
                return
            cpu = time.thread_time()
            try:
                job()
            except Exception as exc:  # our own bookkeeping (the state file): warn, go on
                print_warning(f"experiment tracking: {type(exc).__name__}: {exc}")
            finally:
                self.thread_cpu_s += time.thread_time() - cpu
                self._jobs.task_done()

    def drain(self) -> None:
        """Wait until every queued job is done (the benchmark's measure of a tracker's work)."""
        self._jobs.join()

    def _own_records(self, start_epoch: int) -> list[dict[str, Any]]:
        """A rank's epochs before `start_epoch` from its metrics file (ranks other than 0
        have no history in the checkpoint; a restarted attempt's file holds them)."""
        try:
            lines = (self.run_dir / f"metrics.rank{self.rank}.jsonl").read_text().splitlines()
        except OSError:
            return []
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("epoch", start_epoch) < start_epoch:
                records.append(record)
        return records

    def _saved_state(self, start_epoch: int, attempt: int, run_id: str | None) -> dict[str, Any]:
        """The run ids to continue: a restarted attempt's from the run directory, a resumed
        run's from beside the checkpoint it resumed (when they were written together)."""
        candidates = []
        if attempt:
            candidates.append((self.run_dir / state_file(self.rank), None))
        if start_epoch:
            candidates.append((self.checkpoint_dir / state_file(self.rank), start_epoch))
        for path, epoch in candidates:
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(state, dict):
                continue
            if epoch is not None and state.get("checkpoint_epoch") != epoch:
                continue
            if epoch is None and state.get("run_id") != run_id:
                continue
            return state
        return {}

    def _write_state(self, directory: Path | None = None, checkpoint_epoch: int | None = None):
        ids = {b.name: b.run_id for b in self.backends if b.run_id}
        state = {
            "run_id": self._run_id,
            "ids": ids,
            "logged_epochs": self._sent_epochs,
            "written": time.time(),
        }
        if checkpoint_epoch is not None:
            state["checkpoint_epoch"] = checkpoint_epoch
        path = (directory or self.run_dir) / state_file(self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state) + "\n")
        tmp.replace(path)


def on_step_axis(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with its best epoch counted from 1, as the trackers' steps are (and the
    terminal's epochs; summary.json counts from 0, as the metrics files)."""
    best = summary.get("best")
    if not isinstance(best, dict) or not isinstance(best.get("epoch"), int):
        return summary
    return summary | {"best": best | {"epoch": best["epoch"] + 1}}
