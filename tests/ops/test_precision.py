"""bf16 training: gnnrun's aggregation and dropout keep bfloat16 rows and compute in float32,
attention takes them as float32, and GNN layers under autocast stay close to float32."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gnnrun.models import build_model
from gnnrun.ops import aggregate as agg
from gnnrun.ops.attention import gat_aggregate
from gnnrun.ops.dropout import dropout, relu_dropout
from gnnrun.ops.precision import autocast, widened

sys.path.insert(0, str(Path(__file__).parent))
from test_aggregate import random_block  # noqa: E402


def test_widened_turns_only_bfloat16_into_float32():
    x = torch.randn(4, 3)
    assert widened(x) is x
    assert widened(x.double()).dtype == torch.float64
    low = x.bfloat16().requires_grad_()
    wide = widened(low)
    assert wide.dtype == torch.float32
    wide.sum().backward()
    assert low.grad.dtype == torch.bfloat16 and torch.equal(low.grad, torch.ones_like(low))


AGGREGATIONS = {
    "sum": lambda b, x: agg.aggregate(b, x, "sum"),
    "mean": lambda b, x: agg.aggregate(b, x, "mean"),
    "with_dst": lambda b, x: agg.aggregate_with_dst(b, x, "mean")[0],
    "normalized": lambda b, x: agg.aggregate_normalized(
        b, x, torch.linspace(0.5, 1.5, b.num_src), torch.linspace(0.7, 1.2, b.num_dst)
    ),
}


@pytest.mark.parametrize("width", [16, 47, 250])
@pytest.mark.parametrize("op", AGGREGATIONS.values(), ids=AGGREGATIONS.keys())
def test_aggregation_of_bfloat16_is_the_float32_aggregation_rounded_once(op, width):
    """bfloat16 rows of 16 to 256 columns stay bfloat16: the float32 run's sums in the same
    order (the rows widen exactly), rounded once; the gradient likewise."""
    block = random_block(40, 60, seed=width)
    x = torch.randn(60, width).bfloat16().requires_grad_()
    wide = x.detach().float().requires_grad_()
    low, exact = op(block, x), op(block, wide)
    assert low.dtype == torch.bfloat16 and torch.equal(low, exact.bfloat16())
    grad = torch.randn(low.shape).bfloat16()
    (low.float() * grad.float()).sum().backward()
    (exact * grad.float()).sum().backward()
    assert x.grad.dtype == torch.bfloat16 and torch.equal(x.grad, wide.grad.bfloat16())


@pytest.mark.parametrize("width", [8, 300])
@pytest.mark.parametrize("op", AGGREGATIONS.values(), ids=AGGREGATIONS.keys())
def test_bfloat16_rows_the_kernel_does_not_take_are_aggregated_in_float32(op, width):
    block = random_block(40, 60, seed=3)
    x = torch.randn(60, width).bfloat16()
    low = op(block, x)
    assert low.dtype == torch.float32 and torch.equal(low, op(block, x.float()))


def test_attention_takes_bfloat16_as_float32():
    block = random_block(30, 50, seed=4)
    feat = torch.randn(50, 2, 8)
    el, er = torch.randn(50, 2), torch.randn(30, 2)
    low = gat_aggregate(block, feat.bfloat16(), el.bfloat16(), er.bfloat16())
    wide = gat_aggregate(
        block, feat.bfloat16().float(), el.bfloat16().float(), er.bfloat16().float()
    )
    assert low.dtype == torch.float32 and torch.equal(low, wide)


@pytest.mark.parametrize("fn", [dropout, relu_dropout])
def test_dropout_of_bfloat16_is_the_float32_dropout_rounded_once(fn):
    """The same mask; kept elements scaled in float32 and rounded once; the gradient too."""
    x = torch.randn(1000, 37).bfloat16().requires_grad_()
    wide = x.detach().float().requires_grad_()
    torch.manual_seed(1)
    low = fn(x, 0.3)
    torch.manual_seed(1)
    exact = fn(wide, 0.3)
    assert low.dtype == torch.bfloat16 and torch.equal(low, exact.bfloat16())
    grad = torch.randn(low.shape).bfloat16()
    low.backward(grad)
    exact.backward(grad.float())
    assert x.grad.dtype == torch.bfloat16 and torch.equal(x.grad, wide.grad.bfloat16())


@pytest.mark.parametrize("name", ["sage", "sage_gcn", "gcn", "gat"])
def test_a_model_under_bf16_autocast_stays_close_to_float32(name):
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.schemas import register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=[f"model={name}", "model.layers=3"]))
    torch.manual_seed(0)
    model = build_model(cfg.model, 32, 7).eval()
    blocks = [random_block(200, 200, seed=s) for s in range(3)]
    x = torch.randn(200, 32)
    with torch.no_grad():
        exact = model(blocks, x)
        with autocast("bf16", torch.device("cpu")):
            low = model(blocks, x)
    # bfloat16 keeps 8 bits of mantissa: each product is good to ~0.4%, and errors do not
    # compound past a few percent over three layers.
    error = float((low.float() - exact).norm() / exact.norm())
    assert 0 < error < 0.03, error
