"""Run and sweep directories: one per invocation, even for runs started in the same second."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from gnnrun import run_dir
from gnnrun.errors import GnnrunError

NOW = datetime(2026, 11, 23, 10, 0, 0)


@pytest.fixture(autouse=True)
def _release():
    yield
    run_dir.release_all()


def test_claims_in_the_same_second_get_their_own_directories(tmp_path):
    first, second = run_dir.claim(tmp_path, NOW), run_dir.claim(tmp_path, NOW)
    assert first == tmp_path / "2026-11-23" / "10-00-00"
    assert second == tmp_path / "2026-11-23" / "10-00-00_2"


def test_claims_from_concurrent_processes_never_share(tmp_path):
    script = (
        "import sys, datetime; from gnnrun.run_dir import claim; "
        "print(claim(sys.argv[1], datetime.datetime(2026, 11, 23, 10, 0, 0)))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    claimed = [p.communicate(timeout=60)[0].decode().strip() for p in procs]
    assert len(set(claimed)) == 4


def test_a_locked_directory_is_refused(tmp_path):
    run_dir.lock(tmp_path / "run")
    script = "import sys; from gnnrun.run_dir import lock; lock(sys.argv[1])"
    other = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run")], capture_output=True, text=True
    )
    assert other.returncode != 0 and "in use by another gnnrun process" in other.stderr
    run_dir.release_all()
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "run")], check=True)


def test_a_directory_this_process_holds_can_be_locked_again(tmp_path):
    run_dir.lock(tmp_path / "run")  # cluster=slurm claims a run directory, then runs a sweep in it
    run_dir.lock(tmp_path / "run")


def test_an_occupied_run_directory_is_refused(tmp_path):
    (tmp_path / "metrics.rank0.jsonl").write_text("{}\n")
    with pytest.raises(GnnrunError, match="already holds a run"):
        run_dir.refuse_occupied(tmp_path)
    run_dir.refuse_occupied(tmp_path / "empty")  # a new one is fine


def test_a_run_directory_left_by_a_run_that_failed_at_startup_is_accepted(tmp_path):
    """Only Hydra's .hydra: the run stopped before its first epoch, so nothing can mix."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("{}\n")
    run_dir.refuse_occupied(tmp_path)
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(GnnrunError, match="already holds a run"):
        run_dir.refuse_occupied(tmp_path)


def test_a_refused_run_leaves_no_directory_it_claimed(tmp_path, monkeypatch, capsys):
    """Refused after Hydra made its run directory (cd0 cannot run GAT): the directory
    gnnrun claimed goes; one the user named stays, and so does one that holds results."""
    from gnnrun.cli import main

    monkeypatch.chdir(tmp_path)
    refused = ["train", "dataset=synthetic-tiny", "algorithm=cd0", "model=gat"]
    assert main(refused) == 1
    assert "cd0 supports model.name" in capsys.readouterr().err
    assert [list(day.iterdir()) for day in (tmp_path / "outputs" / "train").iterdir()] == [[]]
    kept = run_dir.claim(tmp_path / "outputs" / "train", NOW)  # another run's
    run_dir.release_all()
    assert main([*refused, f"hydra.run.dir={tmp_path / 'mine'}"]) == 1
    assert (tmp_path / "mine" / ".hydra").is_dir()  # named by the user: theirs to keep
    gone = run_dir.claim(tmp_path / "outputs" / "train", NOW)
    (gone / ".hydra").mkdir()
    run_dir.remove_if_unused(gone)
    assert not gone.exists() and kept.is_dir()
    (kept / "metrics.rank0.jsonl").write_text("{}\n")
    run_dir.remove_if_unused(kept)
    assert kept.is_dir()


@pytest.mark.slow  # 9 s: two real runs
def test_two_runs_started_together_write_separate_directories(tmp_path):
    """... and prepare and partition their dataset once, the second waiting for the first."""
    gnnrun = Path(sys.executable).with_name("gnnrun")
    args = ["train", "dataset=synthetic-tiny", "cluster.nprocs=2", "train.epochs=2"]
    procs = [
        subprocess.Popen(
            [str(gnnrun), *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs, errs = zip(*(p.communicate(timeout=300) for p in procs), strict=True)
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sum(err.count("preparing dataset synthetic-tiny") for err in errs) == 1, errs
    assert sum(err.count("metis: assigning") for err in errs) == 1, errs
    dirs = [
        line.split(": ", 1)[1]
        for out in outs
        for line in out.splitlines()
        if "run directory" in line
    ]
    assert len(set(dirs)) == 2
    for d in dirs:
        epochs = [json.loads(line)["epoch"] for line in (Path(d) / "metrics.rank0.jsonl").open()]
        assert epochs == [0, 1]  # one run's epochs only, not two interleaved


def test_each_invocation_gets_its_own_run_or_sweep_directory(tmp_path, monkeypatch):
    from gnnrun.cli import _own_output_dir

    monkeypatch.chdir(tmp_path)
    claims = [_own_output_dir(["dataset=cora"]) for _ in range(2)]
    runs = [args[-1] for args, _ in claims]
    sweeps = [_own_output_dir(["-m", "model.hidden=8,16"]) for _ in range(2)]
    assert all(r.startswith("hydra.run.dir=outputs/train/") for r in runs)
    assert [f"hydra.run.dir={claimed}" for _, claimed in claims] == runs
    assert all(a[-1].startswith("hydra.sweep.dir=outputs/multirun/") for a, _ in sweeps)
    assert [claimed for _, claimed in sweeps] == [None, None]  # a sweep's is never removed
    assert len(set(runs)) == 2 and len({a[-1] for a, _ in sweeps}) == 2
    printing = ["--cfg", "job"]
    assert _own_output_dir(printing) == (printing, None)  # printing claims nothing
    given = ["-m", "model.hidden=8,16", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    assert _own_output_dir(given) == (given, None)  # a sweep directory may be resumed ...
    script = f"from gnnrun.run_dir import lock; lock({str(tmp_path / 'sweep')!r})"
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert other.returncode != 0 and "in use by another gnnrun process" in other.stderr
