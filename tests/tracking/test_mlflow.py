"""MLflow: runs logged to a real `mlflow server` (sqlite store, served artifacts) on
loopback, read back with MlflowClient: a run, a 4-point sweep (a parent and its
children), a run resumed by train.resume=true and one restarted after a rank died."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tracking.conftest import distinct_colours, epochs_of, screenshot, train

pytestmark = pytest.mark.tracking


def client_of(url: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=url)


def runs_of(client, run_dir):
    experiment = client.get_experiment_by_name("gnnrun")
    return client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`gnnrun.run_dir` = '{run_dir}'"
    )


def steps(client, run_id: str, key: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


def test_a_run_has_its_params_metrics_and_artifacts(logged_run, mlflow_server, session_dir):
    client = client_of(mlflow_server)
    (run,) = runs_of(client, logged_run)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["algorithm.name"] == "hec" and params["dataset.name"] == "synthetic-tiny"
    assert params["train.epochs"] == "3" and "optimizer.lr" in params
    records = epochs_of(logged_run)
    history = client.get_metric_history(run.info.run_id, "val_acc")
    assert [m.step for m in history] == [1, 2, 3]
    assert [m.value for m in history] == pytest.approx([r["val_acc"] for r in records])
    for key in ("loss", "epoch_s", "time/fwd", "peak_rss_mb", "hit_rate/0"):
        assert steps(client, run.info.run_id, key) == [1, 2, 3], key
    summary = json.loads((logged_run / "summary.json").read_text())
    assert run.data.metrics["summary/best/val_acc"] == pytest.approx(summary["best"]["val_acc"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "config.yaml", "report", "checkpoint"} <= artifacts
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert "report/accuracy.png" in plots
    downloaded = client.download_artifacts(run.info.run_id, "summary.json", str(session_dir))
    assert json.loads(Path(downloaded).read_text()) == summary
    (checkpoint,) = client.list_artifacts(run.info.run_id, "checkpoint")
    assert checkpoint.file_size == (logged_run / "checkpoint.pt").stat().st_size

    url = f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    picture = screenshot(url, "tracking-mlflow.png", session_dir, size="1400,2000")
    assert distinct_colours(picture) > 100, f"{picture} looks blank"


def test_a_sweep_is_a_parent_run_with_a_child_per_point(session_dir, mlflow_server):
    sweep_dir = session_dir / "sweep" / "multirun"
    train(
        session_dir,
        session_dir / "sweep",
        "-m",
        "dataset=synthetic-tiny",
        "algorithm=single",
        "train.epochs=2",
        "optimizer.lr=0.01,0.003",
        "model.hidden=16,32",
        "logger=[mlflow,tensorboard,wandb]",
        f"hydra.sweep.dir={sweep_dir}",
        MLFLOW_TRACKING_URI=mlflow_server,
    )
    client = client_of(mlflow_server)
    children = [runs_of(client, sweep_dir / str(n))[0] for n in range(4)]
    parents = {c.data.tags["mlflow.parentRunId"] for c in children}
    assert len(parents) == 1
    parent = client.get_run(parents.pop())
    assert parent.data.tags["gnnrun.sweep_dir"] == str(sweep_dir)
    assert parent.info.status == "FINISHED"
    points = {(c.data.params["optimizer.lr"], c.data.params["model.hidden"]) for c in children}
    assert points == {("0.01", "16"), ("0.01", "32"), ("0.003", "16"), ("0.003", "32")}
    for child in children:
        assert steps(client, child.info.run_id, "loss") == [1, 2]
        assert child.info.status == "FINISHED"
    # W&B: the points are grouped by the sweep directory.
    from tests.tracking.test_wandb import offline_run, wandb_records

    for point in range(4):
        (record_file,) = offline_run(sweep_dir / str(point)).glob("run-*.wandb")
        (run,) = [
            r.run for r in wandb_records(record_file) if r.WhichOneof("record_type") == "run"
        ][:1]
        assert run.run_group == f"{sweep_dir.parent.name}/{sweep_dir.name}"
        assert run.job_type == "sweep-point"
    # TensorBoard: each point's settings in the HParams plugin, for one table.
    from tensorboard.plugins.hparams import plugin_data_pb2

    from tests.tracking.test_tensorboard import read_events

    hidden = set()
    for point in range(4):
        content = read_events(sweep_dir / str(point)).PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(
            content["_hparams_/session_start_info"]
        ).session_start_info
        hidden.add(start.hparams["model.hidden"].number_value)
    assert hidden == {16, 32}


def test_a_resumed_run_goes_on_in_the_same_run(session_dir, mlflow_server):
    from tests.tracking.test_tensorboard import read_events

    where = session_dir / "resume"
    common = (
        "dataset=synthetic-tiny",
        "algorithm=single",
        "train.epochs=4",
        "train.seed=7",
        f"train.checkpoint_dir={where / 'checkpoints'}",
        "logger=[mlflow,tensorboard]",
    )
    first, second = where / "first", where / "second"
    train(
        session_dir,
        where,
        *common,
        "train.stop_after=2",
        f"hydra.run.dir={first}",
        MLFLOW_TRACKING_URI=mlflow_server,
    )
    train(
        session_dir,
        where,
        *common,
        "train.resume=true",
        f"hydra.run.dir={second}",
        MLFLOW_TRACKING_URI=mlflow_server,
    )
    client = client_of(mlflow_server)
    (run,) = runs_of(client, first)  # the run keeps the directory it started in
    assert runs_of(client, second) == []
    assert steps(client, run.info.run_id, "loss") == [1, 2, 3, 4]
    assert run.data.tags["gnnrun.resumed_after_epoch"] == "2"
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    # TensorBoard: the second directory's steps go on from the first's.
    assert [e.step for e in read_events(first).Scalars("loss")] == [1, 2]
    assert [e.step for e in read_events(second).Scalars("loss")] == [3, 4]


def test_a_restarted_run_logs_its_restart_once_per_epoch(session_dir, mlflow_server):
    from tests.tracking.test_tensorboard import read_events

    where = session_dir / "restart"
    run_dir = where / "run"
    train(
        session_dir,
        where,
        "dataset=synthetic-tiny",
        "train.epochs=4",
        "train.checkpoint_every=1",
        "cluster.max_restarts=1",
        f"train.checkpoint_dir={where / 'checkpoints'}",
        "logger=[mlflow,tensorboard]",
        f"hydra.run.dir={run_dir}",
        MLFLOW_TRACKING_URI=mlflow_server,
        GNNRUN_FAULT="exit:rank=1:epoch=2",  # rank 1 dies in epoch 3; the run restarts
    )
    assert json.loads((run_dir / "summary.json").read_text())["restarts"] == 1
    client = client_of(mlflow_server)
    (run,) = runs_of(client, run_dir)
    assert steps(client, run.info.run_id, "loss") == [1, 2, 3, 4]
    assert run.data.tags["gnnrun.restarts"] == "1"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "restarts")] == [
        (2, 1.0)
    ]
    events = read_events(run_dir)
    assert [e.step for e in events.Scalars("loss")] == [1, 2, 3, 4]
    assert [(e.step, e.value) for e in events.Scalars("restarts")] == [(2, 1.0)]


def test_a_server_that_is_gone_is_named_once_and_training_goes_on(session_dir):
    from tests.tracking.conftest import free_port
    from tests.tracking.test_tensorboard import read_events

    where = session_dir / "gone"
    run_dir = where / "run"
    done = train(
        session_dir,
        where,
        "dataset=synthetic-tiny",
        "algorithm=single",
        "train.epochs=3",
        "logger=[mlflow,tensorboard]",
        f"hydra.run.dir={run_dir}",
        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{free_port()}",  # nothing listens there
    )
    assert done.stderr.count("logger mlflow failed") == 1, done.stderr
    assert json.loads((run_dir / "summary.json").read_text())["complete"] is True
    assert [e.step for e in read_events(run_dir).Scalars("loss")] == [1, 2, 3]
