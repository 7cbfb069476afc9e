"""`optimizer=NAME`: the optimiser every rank steps, and its settings.

The `optimizer` group's presets are recipes (`adam`; a paper's learning rate and
weight decay); a model preset from a paper chooses its paper's recipe, and
`optimizer.lr=` / `optimizer.weight_decay=` change either on the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.registry import Registry


@dataclass
class OptimizerConfig:
    name: str = MISSING  # a key of OPTIMIZERS
    lr: float = 0.003
    weight_decay: float = 0.0

    def validate(self) -> None:
        check(self.lr > 0, f"optimizer.lr must be positive (got {self.lr})")
        check(
            self.weight_decay >= 0,
            f"optimizer.weight_decay must be >= 0 (got {self.weight_decay})",
        )


Parameters = Iterable[torch.nn.Parameter]
OPTIMIZERS: Registry[Callable[[Parameters, OptimizerConfig], torch.optim.Optimizer]] = Registry(
    "optimizer", group="optimizer", base_schema=OptimizerConfig
)


@OPTIMIZERS.register("adam")
def adam(parameters: Parameters, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam)."""
    return torch.optim.Adam(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay)


@OPTIMIZERS.register("adamw")
def adamw(parameters: Parameters, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW)."""
    return torch.optim.AdamW(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay)


def build_optimizer(
    model: torch.nn.Module, cfg: OptimizerConfig
) -> torch.optim.Optimizer | EmbeddingsApart:
    """The configured optimiser over the model's parameters; sparse embedding tables
    (gnnrun.models.hetero) apart, with torch's SparseAdam at the same learning rate."""
    tables = sparse_tables(model)
    if not tables:
        return OPTIMIZERS.get(cfg.name)(model.parameters(), cfg)
    apart = {id(t) for t in tables}
    dense = [p for p in model.parameters() if id(p) not in apart]
    return EmbeddingsApart(
        OPTIMIZERS.get(cfg.name)(dense, cfg), torch.optim.SparseAdam(tables, lr=cfg.lr)
    )


def sparse_tables(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters whose gradients are sparse: the tables of sparse embeddings."""
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse]


class EmbeddingsApart:
    """Two optimisers stepped as one: the configured one over the dense parameters, and
    SparseAdam over the embedding tables, which updates (and keeps moments for) only
    the rows a step's gradient holds. Adam cannot take sparse gradients, and a dense
    gradient of a table would cost every step the whole table. Weight decay does not
    apply to the tables (SparseAdam has none)."""

    def __init__(self, dense: torch.optim.Optimizer, sparse: torch.optim.SparseAdam) -> None:
        self.dense, self.sparse = dense, sparse

    @property
    def param_groups(self) -> list[dict]:
        return self.dense.param_groups + self.sparse.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none)
        self.sparse.zero_grad(set_to_none=True)  # a zeroed sparse gradient keeps its size

    def step(self) -> None:
        self.dense.step()
        self.sparse.step()

    def state_dict(self) -> dict:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.dense.load_state_dict(state["dense"])
        self.sparse.load_state_dict(state["sparse"])
