"""The trackers themselves: TensorBoard event files, MLflow runs, W&B runs.

Each backend imports its package only when a run chooses it (the `logger` group),
and is called from the tracking thread only (gnnrun.tracking.tracker), one call at a
time, in the order the trainer made them. A call that raises stops that backend.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from gnnrun.registry import Registry
from gnnrun.tracking.config import LoggerConfig


class Backend:
    name: ClassVar[str]
    module: ClassVar[str]  # the package it needs, and the gnnrun extra that installs it
    extra: ClassVar[str]

    def __init__(self, logger: LoggerConfig) -> None:
        self.logger = logger
        self.failed = False
        self.run_id: str | None = None  # kept for resuming (tracking.rank<r>.json)
        # The last epoch the run's record is known to hold already (set by `start` when it
        # reopens a run it can ask): a restarted attempt sends none of those again.
        self.logged_through = 0

    def start(self, info) -> None:
        """Open (or, with info.ids, reopen) this run's record."""

    def resumed(self, start_epoch: int, attempt: int) -> None:
        """The run continues after `start_epoch` epochs, in attempt `attempt` (0: resumed by
        train.resume, not restarted)."""

    def log_epoch(self, epoch: int, figures: dict[str, float]) -> None:
        """Epoch `epoch`'s figures (counted from 1: the step)."""

    def log_epochs(self, epochs: list[tuple[int, dict[str, float]]]) -> None:
        """Several epochs at once (those queued while the tracking thread waited for a
        core); a backend whose cost is per request sends them in one."""
        for epoch, figures in epochs:
            self.log_epoch(epoch, figures)

    def finish(self, summary: dict[str, Any], artifacts: list[Path], checkpoint: Path | None):
        """The run's summary, and its files to keep (summary.json, the report's plots)."""

    def close(self, finished: bool) -> None:
        """End the run's record: finished, or stopped before its end."""


BACKENDS: Registry[type[Backend]] = Registry("logger")


def headline_tags(cfg: Any) -> list[str]:
    """The per-epoch figures a run is judged by (the HParams table's metric columns): the
    loss, the task's validation and test figures (gnnrun.tasks), the epoch's time."""
    from gnnrun.tasks import task_of

    figures = [key for key, _ in task_of(cfg).figures]
    return ["loss", *(f"{split}_{key}" for key in figures for split in ("val", "test")), "epoch_s"]


def run_label(info) -> str:
    return f"{info.name} rank {info.rank}" if info.all_ranks else info.name


# ---------------------------------------------------------------------- TensorBoard


@BACKENDS.register("tensorboard")
class TensorBoard(Backend):
    """Event files in the run directory (rank<r>/ below it when every rank logs)."""

    name, module, extra = "tensorboard", "tensorboard", "tensorboard"

    def start(self, info) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        log_dir = Path(self.logger.tensorboard.log_dir or info.run_dir)
        if info.all_ranks:
            log_dir = log_dir / f"rank{info.rank}"
        # Reopened, the steps from the first epoch this attempt sends on are hidden in the
        # earlier event files (an attempt killed while sending wrote some it did not record):
        # TensorBoard shows those of this attempt's file.
        reopened = bool(info.ids.get(self.name))
        purge_step = info.logged_epochs + 1 if reopened else None
        self.writer = SummaryWriter(str(log_dir), flush_secs=10, purge_step=purge_step)
        self.run_id = str(log_dir)
        step = info.start_epoch
        self.writer.add_text("config", _markdown_code(info.config_yaml), step)
        # The HParams plugin: this run's settings beside the figures it is judged by, so
        # that a sweep's points line up in one table (`tensorboard --logdir SWEEP_DIR`).
        for part in hparams(info.hparams, dict.fromkeys(headline_tags(info.cfg), 0.0)):
            self.writer.file_writer.add_summary(part)
        self.writer.flush()

    def resumed(self, start_epoch: int, attempt: int) -> None:
        self.writer.add_scalar("restarts", attempt, start_epoch)
        how = f"restarted (attempt {attempt + 1})" if attempt else "resumed (train.resume)"
        self.writer.add_text("restarts", f"{how} after epoch {start_epoch}", start_epoch)

    def log_epoch(self, epoch: int, figures: dict[str, float]) -> None:
        for tag, value in figures.items():
            self.writer.add_scalar(tag, value, epoch)
        self.writer.flush()

    def finish(self, summary, artifacts, checkpoint) -> None:
        step = summary.get("epochs") or 0
        self.writer.add_text("summary", _markdown_code(json.dumps(summary, indent=2)), step)

    def close(self, finished: bool) -> None:
        self.writer.close()


def _markdown_code(text: str) -> str:
    """Text shown as it is by TensorBoard's text plugin (markdown: a code block)."""
    return "\n".join("    " + line for line in text.splitlines())


# ---------------------------------------------------------------------- MLflow

# MLflow names allow letters, digits, _ - . / and spaces.
_MLFLOW_UNSAFE = re.compile(r"[^\w\-./ ]")
_MLFLOW_BATCH = 100  # params per log_batch request (MLflow's limit)
_MLFLOW_METRICS = 1000  # metrics per log_batch request (MLflow's limit)
_MLFLOW_VALUE = 6000  # characters per param value (MLflow's limit)
_MLFLOW_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def mlflow_key(key: str) -> str:
    return _MLFLOW_UNSAFE.sub("_", key.replace("@", "_at_"))


@BACKENDS.register("mlflow")
class Mlflow(Backend):
    """A run per `gnnrun train`; a sweep's points are children of one parent run."""

    name, module, extra = "mlflow", "mlflow", "mlflow"

    def start(self, info) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        # Its INFO lines (creating tables, ...) would cut into rank 0's progress display.
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        # A server that is gone is given up on in seconds, not after MLflow's default
        # minutes of retries (the user's own settings of these win).
        for name, value in _MLFLOW_HTTP.items():
            os.environ.setdefault(name, value)

        settings = self.logger.mlflow
        self.client = MlflowClient(tracking_uri=settings.tracking_uri)
        experiment = self.client.get_experiment_by_name(settings.experiment)
        self.experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(settings.experiment)
        )
        if info.ids.get(self.name):  # the same run goes on
            self.run_id = info.ids[self.name]
            self.client.update_run(self.run_id, status="RUNNING")
            # The server's record, not the state file, says which epochs it holds: an
            # attempt killed while a request was in flight sent epochs it did not record.
            history = self.client.get_metric_history(self.run_id, mlflow_key("loss"))
            self.logged_through = max((m.step for m in history), default=0)
            return
        tags = {"gnnrun.run_dir": str(info.run_dir.resolve())}
        if info.all_ranks:
            tags["gnnrun.rank"] = str(info.rank)
        if info.sweep is not None:
            tags["mlflow.parentRunId"] = self._parent(info.sweep)
            tags["gnnrun.sweep_point"] = info.sweep.point
            tags["gnnrun.overrides"] = " ".join(info.sweep.overrides)
        run = self.client.create_run(self.experiment_id, run_name=run_label(info), tags=tags)
        self.run_id = run.info.run_id
        params = [
            Param(mlflow_key(k), str(v)[:_MLFLOW_VALUE]) for k, v in sorted(info.params.items())
        ]
        for first in range(0, len(params), _MLFLOW_BATCH):
            self.client.log_batch(self.run_id, params=params[first : first + _MLFLOW_BATCH])
        self.client.log_text(self.run_id, info.config_yaml, "config.yaml")

    def _parent(self, sweep) -> str:
        """The sweep's parent run, made by its first point and found by the others (its id
        is kept in the sweep directory, under a lock: points may start together)."""
        record = sweep.dir / "tracking.sweep.json"
        with open(sweep.dir / ".tracking.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                saved = json.loads(record.read_text())
            except (OSError, ValueError):
                saved = {}
            key = f"mlflow:{self.client.tracking_uri}:{self.experiment_id}"
            if key in saved:
                return saved[key]
            run = self.client.create_run(
                self.experiment_id,
                run_name=f"sweep {sweep.dir.parent.name}/{sweep.dir.name}",
                tags={"gnnrun.sweep_dir": str(sweep.dir.resolve())},
            )
            saved[key] = run.info.run_id
            record.write_text(json.dumps(saved, indent=2) + "\n")
            return run.info.run_id

    def resumed(self, start_epoch: int, attempt: int) -> None:
        self.client.set_tag(self.run_id, "gnnrun.restarts", str(attempt))
        self.client.set_tag(self.run_id, "gnnrun.resumed_after_epoch", str(start_epoch))
        self.client.log_metric(self.run_id, "restarts", attempt, step=start_epoch)

    def log_epoch(self, epoch: int, figures: dict[str, float]) -> None:
        self.log_epochs([(epoch, figures)])

    def log_epochs(self, epochs: list[tuple[int, dict[str, float]]]) -> None:
        # One request per _MLFLOW_METRICS figures: a request costs milliseconds of CPU
        # (a sqlite transaction, or HTTP and the server's) whatever it holds.
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(mlflow_key(k), v, now, epoch) for epoch, figures in epochs
            for k, v in figures.items()
        ]  # fmt: skip
        for first in range(0, len(metrics), _MLFLOW_METRICS):
            self.client.log_batch(self.run_id, metrics=metrics[first : first + _MLFLOW_METRICS])

    def finish(self, summary, artifacts, checkpoint) -> None:
        from mlflow.entities import Metric

        from gnnrun.tracking.figures import scalars

        now, step = int(time.time() * 1000), summary.get("epochs") or 0
        figures = scalars({"summary": summary})
        self.client.log_batch(
            self.run_id, metrics=[Metric(mlflow_key(k), v, now, step) for k, v in figures.items()]
        )
        for path in artifacts:
            self.client.log_artifact(self.run_id, str(path), _artifact_folder(path))
        if checkpoint is not None and self.logger.mlflow.log_checkpoint:
            self.client.log_artifact(self.run_id, str(checkpoint), "checkpoint")

    def close(self, finished: bool) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if finished else "KILLED")
        parent = self.client.get_run(self.run_id).data.tags.get("mlflow.parentRunId")
        if parent and finished:  # the sweep's run ends with its last point (until another runs)
            self.client.set_terminated(parent, "FINISHED")


def _artifact_folder(path: Path) -> str | None:
    return "report" if path.suffix == ".png" else None


# ---------------------------------------------------------------------- Weights & Biases


@BACKENDS.register("wandb")
class Wandb(Backend):
    """A W&B run, offline unless asked (`wandb sync` sends it later); a sweep's points
    share a group named after the sweep directory."""

    name, module, extra = "wandb", "wandb", "wandb"

    def start(self, info) -> None:
        import wandb

        settings = self.logger.wandb
        mode = os.environ.get("WANDB_MODE") or settings.mode
        directory = Path(settings.dir or info.run_dir)
        directory.mkdir(parents=True, exist_ok=True)
        resuming = info.ids.get(self.name)
        tags = [f"rank{info.rank}"] if info.all_ranks else []
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            dir=str(directory),
            mode=mode,
            id=resuming or uuid.uuid4().hex[:8],
            resume="allow" if resuming else None,
            name=run_label(info),
            group=f"{info.sweep.dir.parent.name}/{info.sweep.dir.name}" if info.sweep else None,
            job_type="sweep-point" if info.sweep else "train",
            tags=tags,
            config=info.params,
            reinit="create_new",
            # No console capture (rank 0's progress display owns the terminal), no system
            # sampling or git probing: only what gnnrun logs.
            settings=wandb.Settings(
                console="off", silent=True, x_disable_stats=True, disable_git=True
            ),
        )
        self.run_id = self.run.id
        self.pending: dict[str, float] = {}

    def resumed(self, start_epoch: int, attempt: int) -> None:
        self.run.summary["restarts"] = attempt
        self.run.summary["resumed_after_epoch"] = start_epoch
        self.pending["restarts"] = float(attempt)  # with the next epoch (steps only go up)

    def log_epoch(self, epoch: int, figures: dict[str, float]) -> None:
        self.run.log({**figures, **self.pending}, step=epoch)
        self.pending = {}

    def finish(self, summary, artifacts, checkpoint) -> None:
        import wandb

        from gnnrun.tracking.figures import scalars

        self.run.summary.update(scalars({"summary": summary}))
        for path in artifacts:  # the run's files/ folder: sent with the run (`wandb sync`)
            shutil.copy(path, Path(self.run.dir) / path.name)
        if checkpoint is not None and self.logger.wandb.log_checkpoint:
            model = wandb.Artifact(f"model-{self.run.id}", type="model")
            model.add_file(str(checkpoint))
            self.run.log_artifact(model)

    def close(self, finished: bool) -> None:
        self.run.finish(exit_code=0 if finished else 1)
