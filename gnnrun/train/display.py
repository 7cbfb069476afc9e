"""Rank 0's terminal: progress bars over epochs and steps, one table row per finished epoch.

The rows are printed above the bars, so the epoch table grows while the bars
stay at the bottom. On a terminal that is not interactive (CI, a log file)
rich draws no bars and only the rows appear.
"""

from __future__ import annotations

from typing import Any

from gnnrun.progress import bars
from gnnrun.tasks import task_of

PHASE_COLUMNS = ("mbc", "fwd", "bwd", "comm", "ared")


class TrainingDisplay:
    """Use as a context manager around training; the trainer calls the three hooks."""

    def __init__(self, cfg) -> None:
        self.epochs = cfg.train.epochs
        # The figure the val / test columns show: the task's (the first it has).
        task = task_of(cfg)
        self.metrics, self.columns = task.shown, task.shown_as
        # A learning rate that changes from epoch to epoch gets a column of its own.
        self.show_lr = cfg.optimizer.schedule != "constant" or cfg.optimizer.warmup_epochs > 0
        self.progress = bars("{task.description:>6}", remaining=True)
        self.epoch_task = self.progress.add_task("epoch", total=self.epochs)
        self.step_task = self.progress.add_task("step", total=None)

    def __enter__(self) -> TrainingDisplay:
        self.progress.start()
        self.header_shown = False
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def _show_header(self) -> None:
        """At the first epoch, after what set-up says (a resume's notes, or its refusal)."""
        phases = " ".join(f"{p:>6}" for p in PHASE_COLUMNS)
        lr = f" {'lr':>8}" if self.show_lr else ""
        self.progress.console.print(
            f"[bold]{'epoch':>7}{lr} {'loss':>8} {self.columns[0]:>7} {self.columns[1]:>7} "
            f"{'time s':>7}  {phases} {'MB sent':>8}[/]",
            soft_wrap=True,
        )
        self.header_shown = True

    def epoch_started(self, epoch: int) -> None:
        if not self.header_shown:
            self._show_header()
        self.progress.update(self.epoch_task, completed=epoch)
        self.progress.reset(self.step_task, total=None)

    def step_done(self, done: int, total: int) -> None:
        self.progress.update(self.step_task, completed=done, total=total)

    def epoch_done(self, record: dict[str, Any]) -> None:
        t = record["time"]
        val, test = (
            next((record[f"{split}_{m}"] for m in self.metrics if f"{split}_{m}" in record), None)
            for split in ("val", "test")
        )

        def fmt(v: float | None) -> str:
            return f"{v:7.4f}" if v is not None else f"{'-':>7}"

        phases = " ".join(f"{t.get(p, 0.0):6.2f}" for p in PHASE_COLUMNS)
        lr = f" {record['lr']:8.2e}" if self.show_lr else ""
        self.progress.console.print(
            f"{record['epoch'] + 1:>3}/{self.epochs:<3}{lr} {record['loss']:8.4f} {fmt(val)} {fmt(test)} "
            f"{record['epoch_s']:7.2f}  {phases} {sum(record['bytes'].values()) / 1e6:8.2f}",
            highlight=False,
            soft_wrap=True,
        )
        self.progress.update(self.epoch_task, completed=record["epoch"] + 1)
