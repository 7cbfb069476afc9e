"""TensorBoard: the event files read back with TensorBoard's own reader, and a real
`tensorboard --logdir` on loopback answering its scalars API with the run's tags."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.tracking.conftest import (
    distinct_colours,
    epochs_of,
    free_port,
    screenshot,
    stop,
    wait_until_up,
)

pytestmark = pytest.mark.tracking


def read_events(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def test_event_files_hold_every_epochs_figures(logged_run):
    events = read_events(logged_run)
    tags = set(events.Tags()["scalars"])
    # Loss, accuracies, epoch time and its phases, bytes, memory, hec's hit rates.
    for tag in ("loss", "val_acc", "test_acc", "epoch_s", "time/fwd", "time/mbc"):
        assert tag in tags, sorted(tags)
    assert any(t.startswith("bytes/") for t in tags) and "peak_rss_mb" in tags
    assert "hit_rate/0" in tags, sorted(tags)
    records = epochs_of(logged_run)
    loss = events.Scalars("loss")
    assert [e.step for e in loss] == [1, 2, 3]  # the epoch's number is the step
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in records], rel=1e-6)
    assert [e.value for e in events.Scalars("val_acc")] == pytest.approx(
        [r["val_acc"] for r in records], rel=1e-6
    )
    # The resolved config as text, and the HParams plugin's record of the settings.
    assert "config/text_summary" in events.Tags()["tensors"]
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "name: hec" in config
    hparams = events.PluginTagToContent("hparams")
    assert hparams, "no HParams record"
    from tensorboard.plugins.hparams import plugin_data_pb2

    session = plugin_data_pb2.HParamsPluginData.FromString(
        hparams["_hparams_/session_start_info"]
    ).session_start_info
    assert session.hparams["algorithm.name"].string_value == "hec"
    assert session.hparams["optimizer.lr"].number_value > 0


def test_tensorboard_serves_the_runs_scalars(logged_run, session_dir):
    port = free_port()
    log = open(session_dir / "tensorboard.log", "w")  # noqa: SIM115 (open while the server runs)
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "tensorboard"),
            "--logdir",
            str(logged_run),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/data/plugins_listing", process)
        with urllib.request.urlopen(f"{url}/data/plugin/scalars/tags", timeout=30) as reply:
            tags = json.load(reply)
        assert "loss" in tags["."] and "val_acc" in tags["."], tags
        with urllib.request.urlopen(
            f"{url}/data/plugin/scalars/scalars?run=.&tag=val_acc", timeout=30
        ) as reply:
            points = json.load(reply)  # [wall time, step, value]
        assert [p[1] for p in points] == [1, 2, 3]
        assert [p[2] for p in points] == pytest.approx(
            [r["val_acc"] for r in epochs_of(logged_run)], rel=1e-6
        )
        picture = screenshot(
            f"{url}/#scalars&tagFilter=loss%7Cval_acc%7Ctest_acc%7Cepoch_s",
            "tracking-tensorboard.png",
            session_dir,
        )
        assert distinct_colours(picture) > 100, f"{picture} looks blank"
    finally:
        stop(process)
        log.close()


def test_every_rank_logs_its_own_with_all_ranks(session_dir):
    from tests.tracking.conftest import train

    run_dir = session_dir / "all-ranks" / "run"
    train(
        session_dir,
        run_dir.parent,
        "dataset=synthetic-tiny",
        "train.epochs=2",
        "logger=tensorboard",
        "logger.all_ranks=true",
        f"hydra.run.dir={run_dir}",
    )
    for rank in (0, 1):
        events = read_events(run_dir / f"rank{rank}")
        loss = events.Scalars("loss")
        assert [e.step for e in loss] == [1, 2]
        assert [e.value for e in loss] == pytest.approx(
            [r["loss"] for r in epochs_of(run_dir, rank)], rel=1e-6
        )
    assert not list(run_dir.glob("events.out.tfevents.*"))  # rank<R>/ only


def test_a_reopened_run_hides_the_steps_it_sends_again(tmp_path):
    """An attempt killed after writing epoch 2 but before recording it (state: 1 epoch):
    the next attempt reopens the event files at step 2 and writes 2 and 3; TensorBoard
    shows each step once, the later attempt's 2."""
    from gnnrun.tracking.backends import TensorBoard
    from gnnrun.tracking.tracker import RunInfo
    from tests.tracking.test_config import compose

    cfg = compose(f"train.checkpoint_dir={tmp_path / 'ckpt'}")

    def info(**kw) -> RunInfo:
        return RunInfo(cfg, tmp_path, 0, 1, False, "run", {}, {}, "", None, **kw)

    first = TensorBoard(cfg.logger)
    first.start(info())
    first.log_epochs([(1, {"loss": 1.0}), (2, {"loss": 0.9})])
    first.close(False)
    second = TensorBoard(cfg.logger)
    second.start(
        info(start_epoch=2, attempt=1, ids={"tensorboard": str(tmp_path)}, logged_epochs=1)
    )
    second.log_epochs([(2, {"loss": 0.8}), (3, {"loss": 0.7})])
    second.close(True)
    scalars = read_events(tmp_path).Scalars("loss")
    assert [(e.step, round(e.value, 3)) for e in scalars] == [(1, 1.0), (2, 0.8), (3, 0.7)]
