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


def build_optimizer(parameters: Parameters, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    return OPTIMIZERS.get(cfg.name)(parameters, cfg)
