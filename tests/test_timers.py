"""The epoch's phases add up to the epoch, with communication booked apart from compute."""

from __future__ import annotations

import json
import time

import pytest
import torch

from gnnrun import timers
from gnnrun.cli import main
from gnnrun.timers import PHASES, PhaseTimer


class FakeClock:
    """perf_counter for gnnrun.timers: time moves only when the test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_communication_moves_out_of_its_phase_into_comm(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timers, "time", clock)
    timer = PhaseTimer()
    with timer.phase("fwd"):
        clock.sleep(2)
        with timer.phase("rat_fwd_wait"), timer.communication(), timer.communication():
            clock.sleep(3)
    with timer.phase("ared"), timer.communication():
        clock.sleep(1)
    with timer.phase("eval"), timer.communication():
        clock.sleep(7)
    with timer.communication():  # outside every phase: still part of the epoch
        clock.sleep(1)
    seconds = timer.reset()
    assert seconds["fwd"] == 2
    assert seconds["comm"] == 4  # not counted twice
    assert seconds["rat_fwd_wait"] == 3  # finer phases keep theirs
    assert seconds["ared"] == 1  # communication by definition
    assert seconds["eval"] == 7  # reported apart: keeps its own
    assert sum(seconds[p] for p in PHASES if p != "eval") == 7  # the epoch: 2 + 3 + 1 + 1
    assert timer.reset() == dict.fromkeys(PHASES, 0.0)


def test_phases_time_the_real_clock():
    timer = PhaseTimer()
    with timer.phase("opt"):
        time.sleep(0.01)
    assert timer.reset()["opt"] >= 0.01


def test_device_busy_on_a_cpu_is_the_steps_wall_time(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timers, "time", clock)
    busy = timers.DeviceBusy(torch.device("cpu"))
    for seconds in (2, 3):
        clock.sleep(10)  # waiting for a minibatch: not busy
        busy.start()
        clock.sleep(seconds)
        busy.stop()
    assert busy.take() == 5 and busy.take() == 0


@pytest.mark.parametrize(
    ("algorithm", "extra"),
    [
        ("minibatch", []),
        pytest.param("cdr", ["model=sage_gcn", "algorithm.delay_epochs=1"], marks=pytest.mark.slow),
    ],
)
def test_phases_sum_to_the_epoch_on_real_ranks(tmp_path, monkeypatch, capsys, algorithm, extra):
    monkeypatch.chdir(tmp_path)
    args = ["train", "dataset=synthetic-small", f"algorithm={algorithm}", *extra]
    assert main([*args, "cluster.nprocs=2", "train.epochs=3", "hydra.run.dir=run"]) == 0
    capsys.readouterr()
    training = [p for p in PHASES if p != "eval"]  # evaluation is timed apart from the epoch
    for rank in range(2):
        for line in (tmp_path / "run" / f"metrics.rank{rank}.jsonl").open():
            record = json.loads(line)
            booked = sum(record["time"][p] for p in training)
            assert booked == pytest.approx(record["epoch_s"], rel=0.05), record["time"]
            assert record["time"]["comm"] > 0  # both send megabytes every epoch
            # The device's busy time on a CPU rank: the steps' compute, all-reduce and update
            # (and what of `comm` they waited; the rest of it is the sampler's).
            steps = sum(record["time"][p] for p in ("fwd", "bwd", "ared", "opt"))
            assert steps * 0.99 <= record["device_busy_s"] <= steps + record["time"]["comm"]
            assert 0 < record["device_busy_s"] < record["epoch_s"]
            print(algorithm, rank, record["epoch"], f"{booked / record['epoch_s']:.4f}")
