"""Training algorithms, one module each, chosen by `algorithm=` through one registry.

An algorithm owns how a rank sees the graph (whole dataset, edge-cut part,
vertex-cut part), how it builds each step's computation (full graph or
sampled blocks), its loss, and what it communicates. The trainer owns the
loop around it: epochs and their steps (zero_grad, backward, the gradient
all-reduce, the optimizer step, in `gnnrun.train.trainer.train_epoch`),
evaluation metrics, checkpoints, timers and metrics files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from gnnrun.comm import Communicator
from gnnrun.data import load_prepared
from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError
from gnnrun.partition import check_partition_kind
from gnnrun.partition.book import PartitionBook, open_partition
from gnnrun.registry import Registry
from gnnrun.train.timers import PhaseTimer


class Algorithm:
    # The partition kind the algorithm trains on; None: the whole dataset in one process.
    partition_kind: ClassVar[str | None] = None
    # Whether each rank trains on its own part's training vertices (a rank without
    # any still joins every step, adding zero gradients to the average).
    trains_on_every_rank: ClassVar[bool] = False

    in_dim: int
    num_classes: int
    task: str

    def __init__(self, cfg, comm: Communicator, timer: PhaseTimer) -> None:
        self.cfg, self.comm, self.timer = cfg, comm, timer

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse, before any rank starts, a config this algorithm cannot run (GnnrunError)."""

    def on_step(self, done: int, total: int) -> None:
        """Called after each training step (the trainer points it at rank 0's progress bar)."""

    # How each step's gradients are combined across ranks: "mean" (each rank's loss
    # is a mean over its own seeds), "sum" (each rank's loss is its share of one
    # global loss), or None (nothing to combine).
    gradient_reduction: ClassVar[str | None] = None

    def begin_epoch(self, epoch: int) -> int:
        """Prepare `epoch`; return its number of steps, the same on every rank."""
        raise NotImplementedError

    def batch(self, step: int) -> Any:
        """What step `step` trains on (sampled blocks and labels), built before its forward
        pass; None where the loss builds nothing (full batch)."""
        return None

    def loss(self, model: torch.nn.Module, batch: Any, step: int) -> torch.Tensor | None:
        """The forward pass and this rank's loss; None when the rank has nothing to train
        on in this step (it still ran the forward pass, joining every collective)."""
        raise NotImplementedError

    def end_epoch(self, losses: list[float]) -> dict[str, Any]:
        """Finish the epoch (exchanges still in flight, statistics); return its figures,
        at least the training loss: by default the mean of this rank's step losses."""
        return {"loss": float(np.mean(losses)) if losses else 0.0}

    def evaluate(self, model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split ("val", "test"): (logits, labels) of the vertices this rank evaluates."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any] | None:
        """This rank's algorithm state a checkpoint must keep (None: none), beyond the model's."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps no state")


def open_own_part(cfg, comm: Communicator, kind: str) -> tuple[GraphDataset, PartitionBook]:
    """The dataset and the partition this run trains on, checked against both and the ranks."""
    dataset = load_prepared(cfg.dataset)
    book = open_partition(
        Path(cfg.partitioner.output_dir),
        dataset_checksum=dataset.checksum,
        world_size=comm.world_size,
        kind=kind,
    )
    return dataset, book


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")


def check_runnable(cfg) -> None:
    """Refuse, before anything is prepared, partitioned or queued, what cfg's algorithm cannot run."""
    algorithm = ALGORITHMS.get(cfg.algorithm.name)
    algorithm.check_config(cfg)
    if algorithm.partition_kind is not None:
        check_partition_kind(cfg.partitioner, algorithm.partition_kind, cfg.algorithm.name)


def check_training_vertices(cfg, dataset: GraphDataset, book: PartitionBook | None) -> None:
    """Refuse a dataset without training vertices; warn of ranks that will have none."""
    if dataset.train_idx.size == 0:
        raise GnnrunError(
            f"dataset {dataset.name!r} has no training vertices ({dataset.val_idx.size} "
            f"validation, {dataset.test_idx.size} test): nothing to train on. Give the split "
            "a training share (dataset.split.train > 0 where the split is drawn; train_idx or "
            "train_mask in a custom .npz), then prepare it again"
        )
    if book is None or not ALGORITHMS.get(cfg.algorithm.name).trains_on_every_rank:
        return
    empty = [part for part, figures in enumerate(book.manifest["parts"]) if figures["train"] == 0]
    if empty:
        from gnnrun.progress import print_warning

        print_warning(
            f"part(s) {', '.join(map(str, empty))} of {book.path} hold no training vertices: "
            "their ranks only serve samples and add zero gradients to every step's average "
            "(partitioner=metis with partitioner.balance_splits=true spreads them)"
        )


def _register_algorithms() -> None:
    from gnnrun.algorithms import distgnn, hec, minibatch, single  # noqa: F401


_register_algorithms()
