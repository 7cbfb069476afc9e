"""Training algorithms, one module each, chosen by `algorithm=` through one registry.

An algorithm owns how a rank sees the graph (whole dataset, edge-cut part,
vertex-cut part), how it builds each step's computation (full graph or
sampled blocks), its loss, and what it communicates. The trainer owns the
loop around it: epochs and their steps (zero_grad, backward, the gradient
all-reduce, the optimizer step, in `gnnrun.train.trainer.train_epoch`),
evaluation metrics, checkpoints, timers and metrics files.
"""

from gnnrun.algorithms.base import Algorithm, open_own_part
from gnnrun.algorithms.checks import (
    check_dataset,
    check_known_dataset,
    check_runnable,
    check_training_vertices,
)
from gnnrun.algorithms.registry import ALGORITHMS

# Importing an algorithm's module registers it.
from gnnrun.algorithms import distgnn, hec, minibatch, pipeline, sar, single, spmm1d  # noqa: E402, F401  isort: skip

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "check_dataset",
    "check_known_dataset",
    "check_runnable",
    "check_training_vertices",
    "open_own_part",
]
