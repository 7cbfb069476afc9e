"""Resumable sweeps (cluster=local): an interrupted sweep started again runs only its missing points."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import gnnrun.train.trainer as trainer
from gnnrun.cli import CONFIG_DIR, main
from gnnrun.config import to_objects
from gnnrun.launch.sweep import begin_point, finished_point, resume_arguments
from gnnrun.schemas import register_schemas

SWEEP = ["dataset=synthetic-tiny", "algorithm=single", "train.epochs=2", "train.seed=0,1,2"]


def count_trainings(monkeypatch) -> list[int]:
    """The seeds that reach the trainer from now on, in order (each point has its own seed)."""
    seeds: list[int] = []
    real = trainer.train

    def counting(cfg, run_dir, display=None, tracker=None):
        seeds.append(cfg.train.seed)
        return real(cfg, run_dir, display, tracker)

    monkeypatch.setattr(trainer, "train", counting)
    return seeds


@pytest.fixture
def trained(monkeypatch) -> list[int]:
    return count_trainings(monkeypatch)


def interrupt_at_seed(monkeypatch, seed: int) -> None:
    """Ctrl-C during that point's second epoch: one epoch logged, summary incomplete."""
    real = trainer.train

    def interrupted(cfg, run_dir, display=None, tracker=None):
        if cfg.train.seed != seed:
            return real(cfg, run_dir, display, tracker)
        stopped = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, stop_after=1))
        real(stopped, run_dir, display, tracker)
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "train", interrupted)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_interrupted_sweep_runs_only_its_missing_points(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    command = ["train", "-m", *SWEEP, f"hydra.sweep.dir={sweep}"]

    with monkeypatch.context() as m:
        interrupt_at_seed(m, 1)
        assert main(command) == 130  # interrupted in point 1
    assert json.loads((sweep / "0" / "summary.json").read_text())["complete"] is True
    partial = json.loads((sweep / "1" / "summary.json").read_text())
    assert partial["complete"] is False and partial["epochs"] == 1
    assert not (sweep / "2").exists()
    point0 = {p.name: p.stat().st_mtime_ns for p in (sweep / "0").iterdir() if p.is_file()}
    capsys.readouterr()

    # Resumed from the directory alone: the command comes back from multirun.yaml.
    counted = count_trainings(monkeypatch)
    assert main(["train", "--resume-sweep", str(sweep)]) == 0
    assert counted == [1, 2]  # point 0 was not trained again
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("skipped") == 1
    assert (
        f"point 0 (dataset=synthetic-tiny algorithm=single train.epochs=2 train.seed=0): complete in {sweep / '0'}, skipped"
        in err
    )
    assert {p.name: p.stat().st_mtime_ns for p in (sweep / "0").iterdir() if p.is_file()} == point0
    for point in ("1", "2"):
        summary = json.loads((sweep / point / "summary.json").read_text())
        assert summary["complete"] is True and summary["epochs"] == 2
        assert [r["epoch"] for r in lines(sweep / point / "metrics.rank0.jsonl")] == [0, 1]
    # the interrupted attempt's files were kept aside, not appended to
    assert [
        r["epoch"] for r in lines(sweep / "1" / "interrupted" / "0" / "metrics.rank0.jsonl")
    ] == [0]
    assert not (sweep / "0" / "interrupted").exists()


def test_the_same_command_again_skips_every_finished_point(tmp_path, monkeypatch, capsys, trained):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    command = ["train", "-m", *SWEEP, f"hydra.sweep.dir={sweep}"]
    assert main(command) == 0
    assert trained == [0, 1, 2]
    assert capsys.readouterr().out.splitlines()[-1] == f"sweep directory: {sweep}"
    assert main(command) == 0
    assert trained == [0, 1, 2]  # nothing trained the second time
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == f"sweep directory: {sweep}"
    err = captured.err
    assert [line.split(" (")[0] for line in err.splitlines() if "skipped" in line] == [
        "point 0",
        "point 1",
        "point 2",
    ]


def test_a_sweep_directory_of_another_command_is_refused(tmp_path, monkeypatch, capsys, trained):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    assert main(["train", "-m", *SWEEP[:3], "train.seed=0", f"hydra.sweep.dir={sweep}"]) == 0
    capsys.readouterr()
    other = [
        "train",
        "-m",
        *SWEEP[:2],
        "train.epochs=3",
        "train.seed=0",
        f"hydra.sweep.dir={sweep}",
    ]
    assert main(other) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "was made by another command" in err and "train.epochs=2" in err
    assert trained == [0]


def test_resume_arguments_repeat_the_command(tmp_path):
    sweep = tmp_path / "s w"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    hydra:\n"
        "    - hydra.mode=MULTIRUN\n    - hydra.job.name=train\n    - hydra/job_logging=none\n"
        "    - hydra.sweep.dir=x\n    - hydra.launcher.qos=high\n"
        "    task:\n    - algorithm=cd0,cdr\n    - +sweep=scaling\n    - cluster.nprocs=2\n"
    )
    assert resume_arguments(sweep) == [
        "-m",
        "algorithm=cd0,cdr",
        "+sweep=scaling",
        "cluster.nprocs=2",
        "hydra.launcher.qos=high",
        f"hydra.sweep.dir='{sweep}'",
    ]


def test_points_record_their_overrides_and_keep_earlier_attempts(tmp_path):
    run = tmp_path / "3"
    run.mkdir()
    (run / "metrics.rank0.jsonl").write_text('{"epoch": 0}\n')
    (run / "summary.json").write_text('{"complete": false}')
    assert begin_point(run, ["a=1"]) == run / "interrupted" / "0"
    assert sorted(p.name for p in (run / "interrupted" / "0").iterdir()) == [
        "metrics.rank0.jsonl",
        "summary.json",
    ]
    assert not finished_point(run, ["a=1"])
    (run / "summary.json").write_text('{"complete": true}')
    assert finished_point(run, ["a=1"])
    with pytest.raises(Exception, match="made by another command"):
        finished_point(run, ["a=2"])
    # train.resume=true continues the files instead
    assert begin_point(run, ["a=1"], keep_partial=True) is None
    assert (run / "summary.json").exists()


SWEEPS = sorted(p.stem for p in (CONFIG_DIR / "sweep").glob("*.yaml"))


@pytest.mark.parametrize("name", SWEEPS)
def test_every_sweep_config_expands_to_valid_points(name):
    """Each configs/sweep/ file composes, and every value of every swept key gives a valid config."""
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        base = compose("config", overrides=[f"+sweep={name}"], return_hydra_config=True)
        params = {str(k): str(v).split(",") for k, v in base.hydra.sweeper.params.items()}
        assert params, f"+sweep={name} sweeps nothing"
        for key, values in params.items():
            assert len(values) > 1, f"+sweep={name}: {key} has a single value"
            for value in values:
                point = compose("config", overrides=[f"+sweep={name}", f"{key}={value}"])
                config = to_objects(point)
                if "." in key:
                    section, field = key.split(".", 1)
                    assert str(getattr(getattr(config, section), field)) == value
                else:
                    assert getattr(config, key).name == value


BAD_POINTS = [
    # (sweep, the bad point's overrides as named)
    (["algorithm=cdr", "model=sage,gat"], "model=gat"),
    (["partitioner=metis,libra"], "partitioner=libra"),
    (["task=node,link", "algorithm=sar"], "task=link"),
    (["algorithm=single,cd0", "train.precision=bf16"], "algorithm=cd0"),
    (["cluster.nprocs=1,5000"], "cluster.nprocs=5000"),
    (["dataset=synthetic-hetero-tiny", "algorithm=single,hec"], "algorithm=hec"),
]


@pytest.mark.parametrize(("swept", "bad"), BAD_POINTS)
def test_every_point_is_checked_before_the_first_runs(
    tmp_path, monkeypatch, capsys, trained, swept, bad
):
    """What a single run refuses at its start (check_runnable, and what the dataset's
    config or prepared copy already tells) is refused for every point before any runs."""
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    command = ["train", "-m", "dataset=synthetic-tiny", *swept, "train.epochs=1"]
    assert main([*command, f"hydra.sweep.dir={sweep}"]) == 1
    assert trained == []  # not even the good point 0
    err = " ".join(capsys.readouterr().err.split())
    assert "point 1 (" in err and bad in err.split("point 1 (")[1].split(")")[0]
    assert "1 of 2 sweep point(s) cannot run (1), so none was run" in err
    assert not (sweep / "0").exists()


def fail_at_seed(monkeypatch, seed: int) -> list[int]:
    """That point fails at run time with a GnnrunError; returns the seeds trained."""
    from gnnrun.errors import GnnrunError

    seeds: list[int] = []
    real = trainer.train

    def failing(cfg, run_dir, display=None, tracker=None):
        seeds.append(cfg.train.seed)
        if cfg.train.seed == seed:
            raise GnnrunError("the probe's failure")
        return real(cfg, run_dir, display, tracker)

    monkeypatch.setattr(trainer, "train", failing)
    return seeds


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    with monkeypatch.context() as m:
        seeds = fail_at_seed(m, 1)
        assert main(["train", "-m", *SWEEP, f"hydra.sweep.dir={sweep}"]) == 1
    assert seeds == [0, 1, 2]  # the sweep went on after point 1
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "point 1 (dataset=synthetic-tiny algorithm=single train.epochs=2 train.seed=1): failed: the probe's failure"
        in err
    )
    assert "1 of 3 point(s) failed: 1 (" in err and "--retry-failed" in err
    failures = json.loads((sweep / "failed_points.json").read_text())
    assert list(failures) == ["1"] and failures["1"]["error"] == "the probe's failure"
    for point in ("0", "2"):
        assert json.loads((sweep / point / "summary.json").read_text())["complete"] is True

    # Resumed: the failed point is named and skipped, and the sweep still fails.
    counted = count_trainings(monkeypatch)
    assert main(["train", "--resume-sweep", str(sweep)]) == 1
    assert counted == []
    err = " ".join(capsys.readouterr().err.split())
    assert "point 1 (" in err and "failed before (the probe's failure), skipped" in err

    # Asked for: it runs again, and with its cause gone the sweep is complete.
    assert main(["train", "--resume-sweep", str(sweep), "--retry-failed"]) == 0
    assert counted == [1]
    assert not (sweep / "failed_points.json").exists()
    assert json.loads((sweep / "1" / "summary.json").read_text())["complete"] is True
