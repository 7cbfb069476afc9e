"""Training algorithms, one module each, chosen by `algorithm=` through one registry.

An algorithm owns how a rank sees the graph (whole dataset, edge-cut part,
vertex-cut part), how it builds each step's computation (full graph or
sampled blocks), and what it communicates. The trainer owns the loop around
it: epochs, evaluation metrics, checkpoints, timers and metrics files.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from gnnrun.comm import Communicator
from gnnrun.registry import Registry
from gnnrun.train.timers import PhaseTimer


class Algorithm:
    # The partition kind the algorithm trains on; None: the whole dataset in one process.
    partition_kind: ClassVar[str | None] = None

    in_dim: int
    num_classes: int
    task: str

    def __init__(self, cfg, comm: Communicator, timer: PhaseTimer) -> None:
        self.cfg, self.comm, self.timer = cfg, comm, timer

    def on_step(self, done: int, total: int) -> None:
        """Called after each training step (the trainer points it at rank 0's progress bar)."""

    def train_epoch(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, epoch: int
    ) -> dict[str, float]:
        """Run one epoch; return at least {"loss": mean training loss, "steps": n}."""
        raise NotImplementedError

    def evaluate(self, model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split ("val", "test"): (logits, labels) of the vertices this rank evaluates."""
        raise NotImplementedError


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")


def _register_algorithms() -> None:
    from gnnrun.algorithms import minibatch, single  # noqa: F401


_register_algorithms()
