"""The tracking thread, with a backend that records its calls (the real trackers are
tested in the tracking suite): epochs queued while the thread waits go out together,
in order, and the state file counts only what was sent."""

from __future__ import annotations

import json
import threading

from gnnrun.tracking.backends import Backend
from gnnrun.tracking.tracker import Tracker, state_file
from tests.tracking.test_config import compose


class Recording(Backend):
    name = "recording"

    def __init__(self, logger) -> None:
        super().__init__(logger)
        self.calls: list[list[int]] = []

    def log_epochs(self, epochs):
        self.calls.append([epoch for epoch, _ in epochs])


def test_epochs_queued_while_the_thread_waits_are_sent_in_one_call(tmp_path):
    cfg = compose(f"train.checkpoint_dir={tmp_path / 'ckpt'}")
    tracker = Tracker(cfg.logger, cfg, tmp_path, rank=0, world=1)
    recording = Recording(cfg.logger)
    tracker.backends = [recording]
    tracker.started(start_epoch=0, attempt=0, run_id="r")
    tracker.drain()
    held = threading.Event()
    tracker._put(held.wait)  # the thread waits, as it does for a core under training
    for epoch in range(3):
        tracker.epoch_done({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
    state = tmp_path / state_file(0)
    assert json.loads(state.read_text())["logged_epochs"] == 0  # queued, not sent
    held.set()
    tracker.drain()
    assert recording.calls == [[1, 2, 3]]
    assert json.loads(state.read_text())["logged_epochs"] == 3
    tracker.epoch_done({"epoch": 3, "loss": 0.2})
    tracker.epoch_done({"epoch": 1, "loss": 0.5})  # logged already: not again
    tracker.drain()
    assert recording.calls == [[1, 2, 3], [4]]
    tracker.close()


class Holding(Recording):
    """A backend whose reopened run already holds epochs 1-2 (as MLflow's server says)."""

    name = "holding"

    def start(self, info) -> None:
        self.run_id = "held"
        if info.ids.get(self.name):
            self.logged_through = 2


def test_a_restarted_attempt_sends_no_backend_the_epochs_its_run_holds(tmp_path):
    """The earlier attempt was killed after sending epoch 2 and before recording it: its
    state file says 1. The next attempt sends epoch 2 again only to a backend that
    cannot tell (TensorBoard hides its earlier steps), not to one whose run holds it."""
    cfg = compose(f"train.checkpoint_dir={tmp_path / 'ckpt'}")
    ids = {"recording": "rec", "holding": "held"}
    (tmp_path / state_file(0)).write_text(
        json.dumps({"run_id": "r", "ids": ids, "logged_epochs": 1})
    )
    tracker = Tracker(cfg.logger, cfg, tmp_path, rank=0, world=1)
    recording, holding = Recording(cfg.logger), Holding(cfg.logger)
    tracker.backends = [recording, holding]
    history = [{"epoch": e, "loss": 1.0} for e in range(2)]
    tracker.started(start_epoch=2, attempt=1, run_id="r", history=history)
    tracker.epoch_done({"epoch": 2, "loss": 0.5})
    tracker.drain()
    assert tracker.info.logged_epochs == 1
    assert sum(recording.calls, []) == [2, 3]
    assert sum(holding.calls, []) == [3]
    tracker.close()


def test_the_summary_a_tracker_gets_counts_the_best_epoch_as_its_steps():
    """Steps count epochs from 1, summary.json from 0: the trackers' summary/best/epoch is
    the step of the best evaluation, and summary.json is left as it is."""
    from gnnrun.tracking.tracker import on_step_axis

    summary = {"epochs": 10, "best": {"epoch": 9, "val_acc": 0.97}}
    assert on_step_axis(summary) == {"epochs": 10, "best": {"epoch": 10, "val_acc": 0.97}}
    assert summary["best"]["epoch"] == 9
    assert on_step_axis({"best": {"epoch": None}}) == {"best": {"epoch": None}}  # no validation
