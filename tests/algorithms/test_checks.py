"""What the launcher refuses before any rank starts: train.precision per algorithm and CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gnnrun.algorithms import check_runnable, checks
from gnnrun.errors import GnnrunError

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_config  # noqa: E402


@pytest.mark.parametrize("algorithm", ["single", "minibatch", "pipeline"])
def test_sampled_training_runs_in_bf16_where_the_cpu_has_bf16(monkeypatch, algorithm):
    monkeypatch.setattr(checks, "bf16_matmul_supported", lambda: True)
    check_runnable(
        make_config("dataset=synthetic-tiny", f"algorithm={algorithm}", "train.precision=bf16")
    )


@pytest.mark.parametrize("algorithm", ["hec", "cd0", "sar", "spmm1d"])
def test_the_other_algorithms_refuse_bf16(monkeypatch, algorithm):
    monkeypatch.setattr(checks, "bf16_matmul_supported", lambda: True)
    overrides = ["model=gcn", "partitioner=block1d"] if algorithm == "spmm1d" else []
    with pytest.raises(
        GnnrunError,
        match=f"algorithm={algorithm} trains in train.precision=fp32, not bf16: use train.precision=fp32",
    ):
        check_runnable(
            make_config(
                "dataset=synthetic-tiny",
                f"algorithm={algorithm}",
                *overrides,
                "train.precision=bf16",
            )
        )


def test_bf16_is_refused_on_a_cpu_without_bf16_instructions(monkeypatch):
    monkeypatch.setattr(checks, "bf16_matmul_supported", lambda: False)
    with pytest.raises(GnnrunError, match="needs a CPU with bfloat16 instructions"):
        check_runnable(make_config("dataset=synthetic-tiny", "train.precision=bf16"))


def test_fanouts_are_asked_for_only_where_blocks_are_sampled():
    """Full batch takes every neighbour: a third layer needs no third fanout there."""
    full = ("dataset=synthetic-tiny", "algorithm=single", "algorithm.mode=full", "model.layers=3")
    check_runnable(make_config(*full))
    for sampled in (("algorithm=single", "algorithm.mode=minibatch"), ("algorithm=minibatch",)):
        cfg = make_config("dataset=synthetic-tiny", "model.layers=3", *sampled)
        with pytest.raises(GnnrunError, match=r"model.fanouts=\[10, 25\] has 2 entries and "):
            check_runnable(cfg)
