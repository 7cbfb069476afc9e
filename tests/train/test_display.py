"""Rank 0's epoch table: a learning rate that changes gets a column of its own."""

from __future__ import annotations

import pytest

from gnnrun.train.display import TrainingDisplay

from .test_trainer import config

RECORD = {"epoch": 0, "loss": 1.5, "val_acc": 0.5, "test_acc": 0.25, "epoch_s": 0.1}
RECORD |= {"time": {}, "bytes": {}, "lr": 0.00125}


@pytest.mark.parametrize(
    ("optimizer", "shown"),
    [
        ((), False),
        (("optimizer.schedule=cosine",), True),
        (("optimizer.warmup_epochs=2",), True),
    ],
)
def test_the_rate_is_shown_where_it_changes(capsys, optimizer, shown):
    cfg = config("dataset=synthetic-tiny", *optimizer)
    capsys.readouterr()  # what preparing the dataset printed
    with TrainingDisplay(cfg) as display:
        display.epoch_started(0)
        display.epoch_done(RECORD)
    header, row = capsys.readouterr().err.splitlines()[:2]
    assert ("lr" in header.split()) == shown
    assert ("1.25e-03" in row.split()) == shown
    assert row.split()[1 + shown : 4 + shown] == ["1.5000", "0.5000", "0.2500"]
