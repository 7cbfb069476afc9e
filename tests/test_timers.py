"""The epoch's phases add up to the epoch, with communication booked apart from compute."""

from __future__ import annotations

import json
import time

import pytest

from gnnrun.cli import main
from gnnrun.timers import PHASES, PhaseTimer


def test_communication_moves_out_of_its_phase_into_comm():
    timer = PhaseTimer()
    with timer.phase("fwd"):
        time.sleep(0.02)
        with timer.phase("rat_fwd_wait"), timer.communication(), timer.communication():
            time.sleep(0.03)
    with timer.phase("ared"), timer.communication():
        time.sleep(0.01)
    with timer.communication():  # outside every phase: still part of the epoch
        time.sleep(0.01)
    seconds = timer.reset()
    assert seconds["fwd"] == pytest.approx(0.02, abs=0.01)
    assert seconds["comm"] == pytest.approx(0.04, abs=0.01)  # not counted twice
    assert seconds["rat_fwd_wait"] == pytest.approx(0.03, abs=0.01)  # finer phases keep theirs
    assert seconds["ared"] == pytest.approx(0.01, abs=0.01)  # communication by definition


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
            print(algorithm, rank, record["epoch"], f"{booked / record['epoch_s']:.4f}")
