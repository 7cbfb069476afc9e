"""cluster.max_restarts: a rank that dies is restarted with every other from the last
checkpoint, and the finished run is the uninterrupted one's (the fault hook kills it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults  # make test-faults

RUN = [
    "dataset=synthetic-tiny",
    "cluster.nprocs=2",
    "train.epochs=6",
    "train.checkpoint_every=2",
]


def train(
    tmp_path: Path,
    name: str,
    *overrides: str,
    fault: str | None = None,
    algorithm: str = "minibatch",
):
    gnnrun = Path(sys.executable).with_name("gnnrun")
    env = {k: v for k, v in os.environ.items() if k != "GNNRUN_FAULT"}
    if fault:
        env["GNNRUN_FAULT"] = fault
    run_dir = tmp_path / name
    command = [str(gnnrun), "train", *RUN, f"algorithm={algorithm}", *overrides]
    command.append(f"hydra.run.dir={run_dir}")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    return done, run_dir


def losses(run_dir: Path, rank: int) -> list[float]:
    lines = (run_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


@pytest.mark.parametrize(
    "kind, algorithm",
    [("kill", "minibatch"), ("raise", "minibatch"), ("kill", "hec")],  # hec: with its caches
)
def test_a_restarted_run_ends_as_the_uninterrupted_one(tmp_path, kind, algorithm):
    plain, plain_dir = train(tmp_path, "plain", algorithm=algorithm)
    assert plain.returncode == 0, plain.stderr
    fault = f"{kind}:rank=1:epoch=3"
    hit, hit_dir = train(
        tmp_path,
        "hit",
        "cluster.max_restarts=1",
        f"train.checkpoint_dir={tmp_path}/ck",
        fault=fault,
        algorithm=algorithm,
    )
    assert hit.returncode == 0, hit.stderr
    assert "restarting every rank from the last checkpoint (restart 1 of 1)" in hit.stderr
    assert "resuming from this run's checkpoint after epoch 2" in hit.stderr
    summary = json.loads((hit_dir / "summary.json").read_text())
    assert summary["restarts"] == 1
    assert summary["final"] == json.loads((plain_dir / "summary.json").read_text())["final"]
    for rank in (0, 1):  # every epoch once: the lost attempt's epoch 3 was dropped
        assert losses(hit_dir, rank) == losses(plain_dir, rank)


def test_without_restarts_a_fault_ends_the_run_and_a_stale_checkpoint_is_not_resumed(tmp_path):
    checkpoints = f"train.checkpoint_dir={tmp_path}/ck"
    # An earlier run leaves its checkpoint after epoch 2 of 2 in the directory.
    old, _ = train(tmp_path, "old", checkpoints, "train.epochs=2")
    assert old.returncode == 0, old.stderr
    failed, _ = train(tmp_path, "failed", checkpoints, fault="raise:rank=0:epoch=0")
    assert failed.returncode == 1
    assert "injected fault on rank 0 at epoch 0" in failed.stderr
    assert "restarting" not in failed.stderr
    # A restart before this run's own first checkpoint starts again from epoch 1.
    hit, hit_dir = train(
        tmp_path, "hit", checkpoints, "cluster.max_restarts=2", fault="raise:rank=0:epoch=1"
    )
    assert hit.returncode == 0, hit.stderr
    assert "restarted before this run's first checkpoint: training from epoch 1" in hit.stderr
    assert [json.loads(r)["epoch"] for r in (hit_dir / "metrics.rank0.jsonl").open()] == list(
        range(6)
    )
