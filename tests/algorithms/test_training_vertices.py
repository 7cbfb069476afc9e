"""A run with nothing to train on is refused before any rank starts, naming the split;
ranks that will train on nothing are announced."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gnnrun.algorithms import check_training_vertices
from gnnrun.cli import main
from gnnrun.errors import GnnrunError

NO_TRAIN = "dataset.split={train: 0, val: 0.5, test: 0.5}"


@pytest.mark.parametrize("algorithm", ["single", "minibatch"])
def test_an_empty_training_split_is_refused(tmp_path, monkeypatch, capsys, algorithm):
    monkeypatch.chdir(tmp_path)
    code = main(["train", "dataset=synthetic-tiny", NO_TRAIN, f"algorithm={algorithm}"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1
    assert "dataset 'synthetic-tiny' has no training vertices (1000 validation, 1000 test)" in err
    assert "rank 0 failed" not in err  # refused before any rank started
    assert not list(tmp_path.glob("outputs/train/*/*/metrics.rank0.jsonl"))


def _book(train_per_part: list[int]) -> SimpleNamespace:
    return SimpleNamespace(path="parts", manifest={"parts": [{"train": n} for n in train_per_part]})


def _cfg(algorithm: str) -> SimpleNamespace:
    return SimpleNamespace(
        algorithm=SimpleNamespace(name=algorithm), task=SimpleNamespace(name="node")
    )


def test_ranks_without_training_vertices_are_announced_where_every_rank_trains(capsys):
    dataset = SimpleNamespace(
        name="g", train_idx=np.arange(3), val_idx=np.arange(3, 4), test_idx=np.arange(4, 5)
    )
    check_training_vertices(_cfg("minibatch"), dataset, _book([3, 0]))
    assert "part(s) 1 of parts hold no training vertices" in capsys.readouterr().err
    check_training_vertices(_cfg("minibatch"), dataset, _book([2, 1]))
    check_training_vertices(_cfg("cd0"), dataset, _book([3, 0]))  # clones train wherever
    assert capsys.readouterr().err == ""
    empty = SimpleNamespace(
        name="g", train_idx=np.arange(0), val_idx=np.arange(1), test_idx=np.arange(1)
    )
    with pytest.raises(GnnrunError, match="no training vertices"):
        check_training_vertices(_cfg("cd0"), empty, None)
