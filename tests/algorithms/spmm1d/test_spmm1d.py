"""spmm1d on real ranks: exact against `single` full batch, independent of the permutation,
within L + 3 dense buffers, sending what the model predicts, no staged product for the
first layer, and each stage's product after the next stage's broadcast with overlap."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnrun.algorithms import check_runnable
from gnnrun.algorithms.spmm1d.spmm1d import DenseBuffers
from gnnrun.errors import GnnrunError
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import rank_checks  # noqa: E402
import spmm1d_checks  # noqa: E402
from conftest import make_config  # noqa: E402

EPOCHS = 2
NO_DROPOUT = ("model.dropout=0", "model.input_dropout=0")
# dims [32, 16, 8]: both layers multiply by W first. [32, 48, 48, 8]: the first two
# propagate first (W widens or keeps the width), the last multiplies first.
MODELS = {
    "gcn16": ("model=gcn", "model.hidden=16", *NO_DROPOUT),
    "gcn48x3": (
        "model=gcn",
        "model.hidden=48",
        "model.layers=3",
        *NO_DROPOUT,
    ),
}
DIMS = {"gcn16": [32, 16, 8], "gcn48x3": [32, 48, 48, 8]}


def _assert_matches_single(result: dict, single: dict) -> None:
    for got, reference in zip(result["epochs"], single["epochs"], strict=True):
        assert got["loss"] == pytest.approx(reference["loss"], rel=1e-5, abs=1e-6)
        for g, ref in zip(got["grads"], reference["grads"], strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        result["logits"], single["logits"][result["nodes"]], rtol=1e-4, atol=1e-5
    )


def _expected_bytes(dims: list[int], received_rows: int, planned: bool) -> int:
    """Per epoch: the first layer nothing (it multiplies Â X, propagated once, by W); each
    later layer's forward product travels at the narrower of its widths; its backward
    product at the output width (planned), or as autograd differentiates the order the
    forward pass used (fresh)."""
    total = 0
    for d_in, d_out in list(zip(dims[:-1], dims[1:], strict=True))[1:]:
        total += min(d_in, d_out)
        total += d_out if planned or d_out < d_in else d_in
    return received_rows * 4 * total


def _products(events: list, purpose: str) -> int:
    return sum(1 for e in events if e == ("done", purpose))


@pytest.mark.parametrize(
    "nprocs", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)  # 1 and 4 ranks: make test-slow
def test_spmm1d_equals_single_full_batch(configure, tmp_path, nprocs):
    runs = [  # (model, overrides of algorithm and partition)
        ("gcn16", ()),
        ("gcn16", ("algorithm.overlap=false",)),
        ("gcn16", ("algorithm.buffers=fresh",)),
        ("gcn48x3", ()),
        ("gcn48x3", ("algorithm.overlap=false", "algorithm.buffers=fresh")),
    ]
    if nprocs == 2:  # another permutation, and the graph's own order, in partitions of their own
        runs += [
            ("gcn16", ("partitioner.seed=7", f"partitioner.output_dir={tmp_path}/seed7")),
            ("gcn48x3", ("partitioner.permute=false", f"partitioner.output_dir={tmp_path}/own")),
        ]
    common = ("dataset=synthetic-tiny", f"cluster.nprocs={nprocs}")
    cfgs = [configure(*common, *MODELS[m], "algorithm=spmm1d", *extra) for m, extra in runs]
    singles = {
        m: rank_checks.single_trajectory(
            configure(
                "dataset=synthetic-tiny", *MODELS[m], "algorithm=single", "algorithm.mode=full"
            ),
            EPOCHS,
        )
        for m in MODELS
    }
    per_rank = run_on_ranks(spmm1d_checks.spmm1d_trajectories, nprocs, cfgs, EPOCHS)
    n = 2000
    for r, (model, extra) in enumerate(runs):
        planned = "algorithm.buffers=fresh" not in extra
        layers = len(DIMS[model]) - 1
        covered = []
        for rank_results in per_rank:
            result = rank_results[r]
            _assert_matches_single(result, singles[model])
            covered.append(result["nodes"])
            for e, epoch in enumerate(result["epochs"]):
                expected = _expected_bytes(DIMS[model], n - result["rows"], planned)
                sent = epoch["bytes"]
                assert sent.get("spmm1d_forward", 0) + sent.get("spmm1d_backward", 0) == expected
                # Â X once, at the input width, in the first epoch's first step.
                once = (n - result["rows"]) * 4 * DIMS[model][0] if e == 0 else 0
                assert sent.get("spmm1d_input", 0) == once
                # No staged product for the first layer, forward or backward.
                events = epoch["events"]
                assert _products(events, "spmm1d_input") == (e == 0)
                assert _products(events, "spmm1d_backward") == layers - 1
                assert _products(events, "spmm1d_forward") == layers - 1
                if nprocs > 1 and "algorithm.overlap=false" not in extra:
                    # Overlap: every stage's product comes after the next stage's broadcast.
                    for j in range(nprocs - 1):
                        assert events.index(("issue", j + 1)) < events.index(("product", j))
                if planned:
                    assert layers <= epoch["stats"]["dense_buffers_peak"] <= layers + 3
                    if nprocs > 2:  # both receive buffers in use (on 2 ranks, one receives)
                        assert epoch["stats"]["dense_buffers_peak"] == layers + 3
        # Every vertex's logits came back exactly once, whatever the permutation.
        assert np.array_equal(np.sort(torch.cat(covered).numpy()), np.arange(n))


def test_dense_buffers_count_what_is_alive():
    buffers = DenseBuffers({"a": (4, 8)}, torch.device("cpu"))
    a = buffers.slot("a", 4, 2)
    assert a.shape == (4, 2) and a.is_contiguous()
    assert buffers.slot("a", 2, 8).data_ptr() == a.data_ptr()  # one allocation, reused
    extra = [buffers.fresh(4, 8) for _ in range(3)]
    assert buffers.alive == 4 and buffers.peak == 4
    del extra
    assert buffers.alive == 1 and buffers.peak == 4
    assert buffers.reset_peak()["dense_buffers_peak"] == 4
    assert buffers.peak == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("model=sage",), "not model.name='sage': use model=gcn"),
        (("model=gcn", "model.activation=elu"), "use model.activation=relu"),
        (("model=gcn", "partitioner=metis"), "trains on block1d partitions"),
        (("model=gcn", "cluster.device=cuda"), "cluster.device"),
        (
            ("model=gcn", "algorithm.buffers=some"),
            "algorithm.buffers 'some': choose one of plan, fresh",
        ),
    ],
)
def test_refused_before_any_rank_starts(overrides, message):
    if "cluster.device=cuda" in overrides and torch.cuda.is_available():
        pytest.skip("a CUDA device is present: cluster.device=cuda is runnable here")
    with pytest.raises(GnnrunError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_runnable(make_config("dataset=synthetic-tiny", "algorithm=spmm1d", *overrides))


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: the GPU path is not exercised"
)
def test_spmm1d_on_gpu_equals_cpu(configure):
    """One GPU rank (NCCL beside gloo, as `gnnrun train cluster.device=cuda` runs it) gives
    the CPU rank's losses and gradients."""
    common = ("dataset=synthetic-tiny", *MODELS["gcn16"], "algorithm=spmm1d", "cluster.nprocs=1")
    cpu = run_on_ranks(spmm1d_checks.spmm1d_trajectory, 1, configure(*common), EPOCHS)[0]
    gpu_cfg = configure(*common, "cluster.device=cuda")
    gpu = run_on_ranks(spmm1d_checks.spmm1d_on_gpu, 1, gpu_cfg, EPOCHS)[0]
    for a, b in zip(cpu["epochs"], gpu["epochs"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        for g, h in zip(a["grads"], b["grads"], strict=True):
            torch.testing.assert_close(g, h.cpu(), rtol=1e-4, atol=1e-6)
