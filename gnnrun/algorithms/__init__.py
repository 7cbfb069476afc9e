"""Training algorithms, chosen by `algorithm=` through one registry: one module each,
in a subpackage per family (distgnn, sar, spmm1d, pipeline, minibatch) beside the parts
that family owns; `single` alone, and `full_batch`, the partitioned full-batch
algorithms' base.

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
    idle_gpus,
)
from gnnrun.algorithms.registry import ALGORITHMS

# Importing an algorithm's module registers it.
from gnnrun.algorithms import single  # noqa: E402, F401  isort: skip
from gnnrun.algorithms.distgnn import distgnn  # noqa: E402, F401  isort: skip
from gnnrun.algorithms.minibatch import hec, minibatch  # noqa: E402, F401  isort: skip
from gnnrun.algorithms.pipeline import pipeline  # noqa: E402, F401  isort: skip
from gnnrun.algorithms.sar import sar  # noqa: E402, F401  isort: skip
from gnnrun.algorithms.spmm1d import spmm1d  # noqa: E402, F401  isort: skip

# For programs outside the package (the benchmarks): the minibatches training samples,
# drawn as its steps draw them (a step's key, the sampled blocks and their input rows).
from gnnrun.algorithms.minibatch.minibatch import EVAL_STREAM, Minibatch, SampledConfig, step_key  # noqa: E402  isort: skip
from gnnrun.algorithms.minibatch.sources import LocalGraphSource, make_minibatch, sample_minibatch  # noqa: E402  isort: skip

__all__ = [
    "ALGORITHMS",
    "EVAL_STREAM",
    "Algorithm",
    "LocalGraphSource",
    "SampledConfig",
    "Minibatch",
    "check_dataset",
    "check_known_dataset",
    "check_runnable",
    "check_training_vertices",
    "idle_gpus",
    "make_minibatch",
    "open_own_part",
    "sample_minibatch",
    "step_key",
]
