"""The interface every algorithm implements (see the package docstring), and the
opening of a rank's own part that the partitioned ones share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from omegaconf import MISSING

from gnnrun.comm import Communicator
from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.hetero import HeteroSchema
from gnnrun.partition.book import PartitionBook, open_partition
from gnnrun.tasks import Task, load_for_task, task_of
from gnnrun.timers import PhaseTimer
from gnnrun.torch_support import compute_device


@dataclass
class AlgorithmConfig:
    name: str = MISSING  # key in gnnrun.algorithms.ALGORITHMS
    mode: str = "minibatch"  # single: full | minibatch

    def validate(self) -> None:
        check(
            self.mode in ("full", "minibatch"),
            f"algorithm.mode {self.mode!r}: choose full or minibatch",
        )


class Algorithm:
    # The partition kind the algorithm trains on; None: the whole dataset in one process.
    partition_kind: ClassVar[str | None] = None
    # Whether several ranks may train on one part (a machine's: partitioner=two_level).
    shares_parts: ClassVar[bool] = False
    # Whether each rank trains on its own part's training vertices (a rank without
    # any still joins every step, adding zero gradients to the average).
    trains_on_every_rank: ClassVar[bool] = False
    # The cluster.device values it runs on; `device` is where its rank computes (the
    # trainer puts the model there, the algorithm its batches).
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    # The train.precision values it trains in (gnnrun.ops.precision): bf16 where every
    # tensor it keeps or exchanges comes out of gnnrun's ops, which return float32.
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    device: torch.device = torch.device("cpu")
    # Whether it trains heterogeneous graphs (gnnrun.data.hetero); the others are refused.
    heterogeneous: ClassVar[bool] = False
    # The task.name values it trains (gnnrun.tasks); link prediction: the sampled
    # algorithms and full batch in one process.
    tasks: ClassVar[tuple[str, ...]] = ("node", "multilabel")
    schema: HeteroSchema | None = None  # the types of the graph it trains, if heterogeneous
    # Whether one step's rows (full batch: every vertex) lie on several ranks: batch
    # normalisation (model.norm=batch) would then normalise each rank's rows by their own
    # statistics, not the batch's, and is refused with more than one rank. A sampled
    # algorithm's step on a rank is a minibatch of its own (statistics per rank, as
    # PyTorch's DistributedDataParallel keeps them).
    splits_batch: ClassVar[bool] = False

    in_dim: int
    num_classes: int  # the model's output width
    task: Task  # what it learns: targets, loss, metrics (gnnrun.tasks)

    def __init__(self, cfg, comm: Communicator, timer: PhaseTimer) -> None:
        self.cfg, self.comm, self.timer = cfg, comm, timer
        self.device = compute_device(cfg)
        self.task = task_of(cfg)

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse, before any rank starts, a config this algorithm cannot run (GnnrunError)."""

    def on_step(self, done: int, total: int) -> None:
        """Called after each training step (the trainer points it at rank 0's progress bar)."""

    # How each step's gradients are combined across ranks: "mean" (each rank's loss
    # is a mean over its own seeds), "sum" (each rank's loss is its share of one
    # global loss), or None (nothing to combine).
    gradient_reduction: ClassVar[str | None] = None

    def plan(self, start_epoch: int, end_epoch: int) -> None:
        """The run trains epochs [start_epoch, end_epoch): called once before the first, for
        algorithms that prepare ahead of the epoch in training (the pipeline's threads)."""

    def close(self) -> None:
        """Stop what `plan` started; called when training ends, by an error too."""

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
        """Per split ("val", "test"): what the task's metrics take from this rank (its
        objective's evaluation): (logits, labels) of the vertices this rank evaluates;
        under task=link, (scores of its held-out edges, of their negatives [edges, k])."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any] | None:
        """This rank's algorithm state a checkpoint must keep (None: none), beyond the model's."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps no state")


def open_own_part(
    cfg, comm: Communicator, kind: str, shared_parts: bool = False
) -> tuple[GraphDataset, PartitionBook]:
    """The dataset and the partition this run trains on, checked against both and the ranks
    (`shared_parts`: the algorithm trains several ranks on one part, a machine's)."""
    dataset = load_for_task(cfg.dataset, cfg.task)
    book = open_partition(
        Path(cfg.partitioner.output_dir),
        dataset_checksum=dataset.checksum,
        world_size=comm.world_size,
        kind=kind,
        shared_parts=shared_parts,
    )
    return dataset, book
