"""The optimiser: only the embedding rows a step read move; each epoch's learning rate by
its schedule; gradient clipping; settings refused with the fix."""

from __future__ import annotations

import math

import pytest
import torch

from gnnrun.data.hetero import HeteroSchema
from gnnrun.errors import GnnrunError
from gnnrun.models import build_model
from gnnrun.models.hetero import TypedInput
from gnnrun.models.rgcn import RGCNConfig
from gnnrun.ops.block import Block
from gnnrun.train.optimizer import (
    EmbeddingsApart,
    OptimizerConfig,
    build_optimizer,
    clip_gradients,
    learning_rate,
    plateaus_in,
    set_learning_rate,
)

SCHEMA = HeteroSchema(["paper", "author"], [4, 6], [3, 0], [("author", "writes", "paper")], "paper")


def test_only_the_embedding_rows_a_step_read_are_updated():
    torch.manual_seed(0)
    cfg = RGCNConfig(name="rgcn", hidden=8, layers=1)
    model = build_model(cfg, 0, 3, SCHEMA)
    optimizer = build_optimizer(model, OptimizerConfig(name="adam", lr=0.1))
    assert isinstance(optimizer, EmbeddingsApart)
    table = model.encoder.maps["1"].weight
    before = table.detach().clone()
    # Paper 0 (destination) reads authors 2 and 5.
    block = Block.from_csr([0, 2], [1, 2], num_src=3)
    block.etypes = torch.zeros(2, dtype=torch.int64)
    x = TypedInput(torch.tensor([0, 1, 1]), torch.tensor([0, 2, 5]), {0: torch.randn(1, 3)})
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model([block], x), torch.tensor([1])).backward()
    optimizer.step()
    moved = torch.nonzero((table.detach() != before).any(dim=1)).squeeze(1).tolist()
    assert moved == [2, 5]
    state = optimizer.state_dict()
    assert set(state) == {"dense", "sparse"} and state["sparse"]["state"]
    optimizer.load_state_dict(state)


def _rates(epochs: int, **settings) -> list[float]:
    cfg = OptimizerConfig(name="adam", **settings)
    cfg.validate()
    return [learning_rate(cfg, e, epochs) for e in range(epochs)]


def test_each_schedule_gives_each_epoch_its_rate():
    assert _rates(3, lr=0.01) == [0.01] * 3
    assert _rates(5, lr=0.01, warmup_epochs=4) == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01])
    # Cosine over the 4 epochs after the warm-up: lr at its first, towards min_lr.
    cosine = _rates(6, lr=0.1, min_lr=0.02, schedule="cosine", warmup_epochs=2)
    half = [0.02 + 0.08 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)]
    assert cosine == pytest.approx([0.05, 0.1, *half])
    assert cosine[2] == pytest.approx(0.1) and cosine[4] == pytest.approx(0.06)
    assert _rates(7, lr=1.0, schedule="step", step_epochs=3, gamma=0.5) == pytest.approx(
        [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    )


def test_set_learning_rate_reaches_the_embedding_tables_too():
    torch.manual_seed(0)
    model = build_model(RGCNConfig(name="rgcn", hidden=8, layers=1), 0, 3, SCHEMA)
    optimizer = build_optimizer(model, OptimizerConfig(name="adam", lr=0.1))
    set_learning_rate(optimizer, 0.025)
    assert [g["lr"] for g in optimizer.dense.param_groups + optimizer.sparse.param_groups] == [
        0.025,
        0.025,
    ]


def test_clipping_scales_the_gradients_to_the_norm_and_returns_the_norm_before():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert float(clip_gradients([a, b], 1.0)) == pytest.approx(5.0)
    assert torch.allclose(a.grad, torch.tensor([0.6, 0.0]), atol=1e-6)
    assert torch.allclose(b.grad, torch.tensor([0.8]), atol=1e-6)
    assert float(clip_gradients([a, b], 2.0)) == pytest.approx(1.0)  # under it: unchanged
    assert torch.allclose(b.grad, torch.tensor([0.8]), atol=1e-6)


def test_clipping_counts_and_scales_an_embedding_tables_rows_as_dense_ones():
    """A sparse gradient (a row read twice among them) is clipped as its dense equal would
    be by torch's clip_grad_norm_, together with the dense gradients; without sparse
    gradients the result is torch's, bit for bit."""
    torch.manual_seed(0)
    table = torch.nn.Embedding(10, 4, sparse=True)
    layer = torch.nn.Linear(4, 3)
    layer(table(torch.tensor([1, 7, 1, 3]))).square().sum().backward()
    assert not table.weight.grad.is_coalesced()
    twins = [
        torch.nn.Parameter(p.detach().clone()) for p in (table.weight, layer.weight, layer.bias)
    ]
    for twin, p in zip(twins, (table.weight, layer.weight, layer.bias), strict=True):
        twin.grad = p.grad.to_dense().clone()  # to_dense() of a dense tensor is itself
    expected = torch.nn.utils.clip_grad_norm_(twins, 0.5)
    norm = clip_gradients([table.weight, layer.weight, layer.bias], 0.5)
    assert float(norm) == pytest.approx(float(expected), rel=1e-6) and float(norm) > 0.5
    assert table.weight.grad.is_sparse
    assert torch.allclose(table.weight.grad.to_dense(), twins[0].grad, atol=1e-7)
    assert torch.allclose(layer.weight.grad, twins[1].grad, atol=1e-7)
    assert torch.count_nonzero(table.weight.grad.to_dense().abs().sum(1)) == 3  # rows 1, 3, 7

    dense = [torch.nn.Parameter(torch.zeros(3)) for _ in range(2)]
    copies = [torch.nn.Parameter(torch.zeros(3)) for _ in range(2)]
    for d, c in zip(dense, copies, strict=True):
        d.grad = torch.randn(3)
        c.grad = d.grad.clone()
    assert torch.equal(clip_gradients(dense, 0.1), torch.nn.utils.clip_grad_norm_(copies, 0.1))
    assert all(torch.equal(d.grad, c.grad) for d, c in zip(dense, copies, strict=True))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"schedule": "linear"},
            "optimizer.schedule=linear: choose one of constant, cosine, step, plateau",
        ),
        ({"plateau_patience": -1}, "optimizer.plateau_patience must be >= 0"),
        ({"schedule": "step"}, "set it to 1 or more (got 0)"),
        ({"min_lr": 0.5, "lr": 0.1}, "optimizer.min_lr=0.5 must lie in [0, optimizer.lr=0.1]"),
        ({"warmup_epochs": -1}, "optimizer.warmup_epochs must be >= 0"),
        ({"gamma": 0.0}, "optimizer.gamma must lie in (0, 1]"),
        ({"clip_norm": -1.0}, "optimizer.clip_norm must be >= 0 (0: no clipping"),
        # A schedule's setting under another schedule would do nothing: refused.
        (
            {"min_lr": 0.001},
            "optimizer.min_lr=0.001 is a setting of optimizer.schedule=cosine or plateau, and "
            "this run's schedule is constant",
        ),
        ({"schedule": "cosine", "step_epochs": 5}, "optimizer.step_epochs=5 is a setting of"),
        ({"schedule": "cosine", "gamma": 0.5}, "schedule=step or plateau, and this run's"),
        ({"schedule": "step", "step_epochs": 2, "plateau_patience": 3}, "plateau_patience=3"),
    ],
)
def test_bad_schedule_settings_are_refused_naming_the_fix(settings, message):
    with pytest.raises(GnnrunError) as refused:
        OptimizerConfig(name="adam", **settings).validate()
    assert message in str(refused.value)


@pytest.mark.parametrize("patience", [0, 1, 2])
def test_plateaus_are_torch_reduce_lr_on_plateau_s(patience):
    """The rate after each evaluation, against torch's scheduler fed the same figures
    (mode max, no threshold or cool-down), floor included."""
    figures = [0.1, 0.3, 0.3, 0.2, 0.25, 0.31, 0.31, 0.3, 0.29, 0.28, 0.4, 0.1, 0.1, 0.1]
    cfg = OptimizerConfig(
        name="adam", lr=0.1, schedule="plateau", gamma=0.5, plateau_patience=patience, min_lr=0.02
    )
    cfg.validate()
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=cfg.lr)
    reference = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="max", factor=0.5, patience=patience, threshold=0.0, min_lr=0.02
    )
    for done in range(1, len(figures) + 1):
        reference.step(figures[done - 1])
        ours = learning_rate(cfg, done, 100, plateaus_in(figures[:done], patience))
        assert ours == pytest.approx(optimizer.param_groups[0]["lr"]), (patience, done)
    assert plateaus_in(figures, patience) > 0


def test_an_evaluation_without_a_figure_betters_nothing():
    assert plateaus_in([0.5, None, None], 1) == 1
    assert plateaus_in([None, None], 0) == 2
