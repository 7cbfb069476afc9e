"""Sampled minibatch training, in one process or distributed with DistDGL semantics."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from gnnrun.algorithms.base import Algorithm, AlgorithmConfig, open_own_part
from gnnrun.algorithms.minibatch.sources import (
    Fanout,
    GraphSource,
    PartitionGraphSource,
    hop_fanouts,
    make_minibatch,
)
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.config import check
from gnnrun.errors import GnnrunError
from gnnrun.models.hetero import TypedInput
from gnnrun.ops.block import Block
from gnnrun.tasks import Objective
from gnnrun.tasks.link import EdgeTargets

EVAL_STREAM = 0x5EED_E7A1  # keeps evaluation sampling apart from training sampling


def step_key(seed: int, epoch: int, step: int) -> int:
    """A 62-bit sampling key per (seed, epoch, step): same on every rank, every run."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + step * 0x94D049BB133111EB) % (
        1 << 64
    )
    x ^= x >> 31
    return x % (1 << 62)


@dataclass
class SampledConfig(AlgorithmConfig):
    """The settings of the algorithms that sample their minibatches (minibatch, pipeline,
    hec, and single in minibatch mode): full-batch algorithms take every neighbour and
    have none of them. A model preset published with its own sampling sets them from
    configs/algorithm/sampling/<model>.yaml (docs/training.md#sampling-settings)."""

    fanouts: list[int] = field(default_factory=lambda: [10, 25])  # seeds first (PyG order)
    batch_size: int = 1000  # seeds per minibatch on each rank
    # Heterogeneous graphs (gnnrun.algorithms.minibatch.sources.hop_fanouts): fanouts of single
    # relations by name, one per layer as `fanouts` (the others take `fanouts`).
    relation_fanouts: dict[str, list[int]] = field(default_factory=dict)

    def validate(self) -> None:
        super().validate()
        check(
            all(f >= 1 or f == -1 for f in self.fanouts),
            f"algorithm.fanouts {list(self.fanouts)}: each entry is the neighbours sampled per "
            "vertex, at least 1 (or -1 for all of them; 0 would train without neighbours)",
        )
        check(self.batch_size >= 1, "algorithm.batch_size must be positive")
        check(
            self.mode != "full" or not self.relation_fanouts,
            "algorithm.relation_fanouts samples minibatches, and algorithm.mode=full takes "
            "every edge: drop it, or set algorithm.mode=minibatch",
        )
        for relation, fanouts in self.relation_fanouts.items():
            check(
                all(f >= 0 or f == -1 for f in fanouts),
                f"algorithm.relation_fanouts.{relation}={list(fanouts)}: each entry is 0 or more "
                "(0 samples none of the relation's edges), or -1 (all of them)",
            )

    def check_layers(self, layers: int) -> None:
        """Refuse fanouts that do not give one entry per layer (once the model is known)."""
        if len(self.fanouts) != layers:
            example = [*self.fanouts, *[self.fanouts[-1]] * layers][:layers]
            raise GnnrunError(
                f"algorithm.fanouts={list(self.fanouts)} has {len(self.fanouts)} entries and "
                f"model.layers={layers}: give one per layer, seeds first, e.g. "
                f"algorithm.fanouts=[{','.join(map(str, example))}]"
            )
        for relation, fanouts in self.relation_fanouts.items():
            if len(fanouts) != layers:
                raise GnnrunError(
                    f"algorithm.relation_fanouts.{relation}={list(fanouts)}: give one fanout "
                    f"per layer (model.layers={layers})"
                )


@dataclass
class Minibatch:
    blocks: list[Block]  # one per layer, input layer first
    x: torch.Tensor | TypedInput  # the first block's source features
    # The labels of the seeds (the last block's destinations), or a link step's pairs.
    targets: torch.Tensor | EdgeTargets

    def to(self, device: torch.device, non_blocking: bool = False) -> Minibatch:
        """This minibatch on `device`: the hand-over from the CPU that built it to the
        rank's GPU (itself on a CPU rank)."""
        if device.type == "cpu":
            return self
        blocks, x = inputs_on(device, self.blocks, self.x, non_blocking)
        return Minibatch(blocks, x, self.targets.to(device, non_blocking=non_blocking))


def tensors_in(value) -> Iterator[torch.Tensor]:
    """Every tensor a minibatch (or any of its parts) holds, through its dataclasses, lists
    and dicts; a block's own caches (fields named `_...`) are left out."""
    if isinstance(value, torch.Tensor):
        yield value
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            if not f.name.startswith("_"):
                yield from tensors_in(getattr(value, f.name))
    elif isinstance(value, list | tuple):
        for part in value:
            yield from tensors_in(part)
    elif isinstance(value, dict):
        for part in value.values():
            yield from tensors_in(part)


def inputs_on(
    device: torch.device,
    blocks: list[Block],
    x: torch.Tensor | TypedInput,
    non_blocking: bool = False,
) -> tuple[list[Block], torch.Tensor | TypedInput]:
    """A model's inputs, sampled blocks and input features, moved to `device`."""
    moved = [block.to(device, non_blocking) for block in blocks]
    return moved, x.to(device, non_blocking=non_blocking)


class SampledTraining(Algorithm):
    """The minibatch loop shared by `single` (minibatch mode) and `minibatch`.

    Subclasses set `source`, `train_ids`, `eval_ids` (global ids of the
    vertices this rank trains / evaluates) and `labels_of`, then call `set_objective`:
    the task's objective (gnnrun.tasks) turns a step's items into its seeds and
    targets, whose training items (vertices, or edges under task=link) become `train_ids`.
    """

    precisions = ("fp32", "bf16")
    heterogeneous = True
    tasks = ("node", "link", "multilabel")
    # Sampling and feature gathers stay on the CPU, where the graph is; each minibatch
    # goes to the GPU once built (Minibatch.to) and the model trains there.
    devices = ("cpu", "cuda")
    source: GraphSource
    train_ids: torch.Tensor
    eval_ids: dict[str, torch.Tensor]
    objective: Objective

    @classmethod
    def check_config(cls, cfg) -> None:
        # Fanouts matter where blocks are sampled: full batch takes every neighbour.
        if cls.samples(cfg):
            cfg.algorithm.check_layers(cfg.model.layers)

    @staticmethod
    def samples(cfg) -> bool:
        """Whether this run samples its blocks (and so reads algorithm.fanouts)."""
        return True

    def labels_of(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def set_objective(self, dataset, owner: torch.Tensor | None) -> None:
        """Train the task's objective on `dataset` (`owner`: each vertex's rank; None in one
        process): its training items become `train_ids`, its output width `num_classes`."""
        self.objective = self.task.objective(
            dataset, self.comm.rank, owner, self.train_ids, self.eval_ids, self.labels_of
        )
        self.train_ids = self.objective.train_ids
        self.num_classes = self.task.out_dim(self.cfg.model, dataset)

    def step_targets(
        self, items: torch.Tensor, key: int
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | EdgeTargets]:
        """A step's (seeds, pairs to leave out of its blocks, targets) from its training items:
        vertices and their labels, or target edges (the task's objective)."""
        return self.objective.step(items, key)

    def training_source(self) -> GraphSource:
        """Where training minibatches come from (evaluation always uses `source`)."""
        return self.source

    def forward(self, model, blocks, x, epoch: int, step: int, steps: int) -> torch.Tensor:
        """The model on one training minibatch; runs on every rank at every step."""
        return model(blocks, x)

    @property
    def fanouts(self) -> list[Fanout]:
        """Each hop's fanout (seeds first); per relation on a heterogeneous graph."""
        return hop_fanouts(self.cfg.algorithm, self.schema)

    def _steps(self, count: int) -> int:
        # Every rank runs the same number of steps: the collectives inside
        # sampling and the gradient all-reduce must pair up.
        return self.comm.max_int(math.ceil(count / self.cfg.algorithm.batch_size))

    gradient_reduction = "mean"

    _training_steps: int | None = None

    def training_steps(self) -> int:
        """Training steps per epoch, the same on every rank (a collective on the first call;
        the training vertices never change, so neither does the count)."""
        if self._training_steps is None:
            self._training_steps = self._steps(self.train_ids.numel())
        return self._training_steps

    def epoch_order(self, epoch: int, steps: int) -> torch.Tensor:
        """This rank's training items (vertices, or edges under task=link) of `epoch` in the
        order its `steps` steps take them."""
        seed = self.cfg.train.seed * 1_000_003 + epoch * 7919 + self.comm.rank
        generator = torch.Generator().manual_seed(seed)
        order = self.train_ids[torch.randperm(self.train_ids.numel(), generator=generator)]
        wanted = steps * self.cfg.algorithm.batch_size
        if order.numel() and wanted > order.numel():
            # Fewer training vertices than the busiest rank: go round again.
            order = order.repeat(math.ceil(wanted / order.numel()))
        return order

    def step_items(self, order: torch.Tensor, step: int) -> torch.Tensor:
        size = self.cfg.algorithm.batch_size
        return order[step * size : (step + 1) * size]

    def begin_epoch(self, epoch: int) -> int:
        steps = self.training_steps()
        self.epoch, self.order, self.steps = epoch, self.epoch_order(epoch, steps), steps
        return steps

    def batch(self, step: int) -> Minibatch:
        items = self.step_items(self.order, step)
        key = step_key(self.cfg.train.seed, self.epoch, step)
        seeds, exclude, targets = self.step_targets(items, key)
        blocks, x = make_minibatch(self.training_source(), seeds, self.fanouts, key, exclude)
        return Minibatch(blocks, x, targets).to(self.device)

    def loss(self, model, batch: Minibatch, step: int) -> torch.Tensor | None:
        out = self.forward(model, batch.blocks, batch.x, self.epoch, step, self.steps)
        return self.objective.loss(model, out, batch.targets)

    def embedded_vertices(self) -> torch.Tensor:
        """The vertices whose embeddings this rank computes for link evaluation (in the
        order `rows_of` reads them): every vertex in one process."""
        raise NotImplementedError

    def rows_of(self, table: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """The embeddings of any global vertices, from this rank's `table` of its
        `embedded_vertices()` (the local rows; the others from their owners)."""
        return lambda nodes: table[nodes]

    def every_output(self, model) -> Callable[[torch.Tensor], torch.Tensor]:
        return self.rows_of(self.link_embeddings(model))

    @torch.no_grad()
    def link_embeddings(self, model) -> torch.Tensor:
        """The model's output for every vertex of `embedded_vertices()`, in batches sampled
        with one key, so that a vertex's embedding does not depend on its batch."""
        ids, size = self.embedded_vertices(), self.cfg.algorithm.batch_size
        rows = []
        for step in range(self._steps(ids.numel())):
            seeds = ids[step * size : (step + 1) * size]
            blocks, x = make_minibatch(self.source, seeds, self.fanouts, EVAL_STREAM)
            if seeds.numel():
                rows.append(model(*inputs_on(self.device, blocks, x)))
        return torch.cat(rows) if rows else torch.zeros(0, self.num_classes, device=self.device)

    @torch.no_grad()
    def outputs_of(self, model, ids: torch.Tensor) -> torch.Tensor:
        """The model's outputs for vertices `ids`, in batches sampled with evaluation's keys."""
        batch = self.cfg.algorithm.batch_size
        logits = []
        for step in range(self._steps(ids.numel())):
            seeds = ids[step * batch : (step + 1) * batch]
            key = step_key(EVAL_STREAM, 0, step)
            blocks, x = make_minibatch(self.source, seeds, self.fanouts, key)
            if seeds.numel():  # ranks with fewer vertices still join the collectives
                logits.append(model(*inputs_on(self.device, blocks, x)))
        if logits:
            return torch.cat(logits)
        return torch.zeros(0, self.num_classes, device=self.device)

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        return self.objective.evaluate(model, self)


@ALGORITHMS.register("minibatch", SampledConfig)
class DistributedMinibatch(SampledTraining):
    """DistDGL's exact baseline on METIS parts.

    Each rank draws seeds from its own training vertices; neighbours of a
    vertex are sampled by its owner; input features are pulled from their
    owners; gradients are averaged over ranks every step.
    """

    partition_kind = "edge_cut"
    trains_on_every_rank = True
    # Trains on parts that a machine's trainers share (partitioner=two_level's "machines"
    # layout), each taking the seeds the partition assigns it.
    shares_parts = True

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        dataset, book = open_own_part(cfg, comm, self.partition_kind, self.shares_parts)
        self.schema = dataset.hetero if self.heterogeneous else None
        self.source = PartitionGraphSource(book, comm, self.schema)
        self.part = part = book.load_part(book.part_of_rank(comm.rank))
        nodes = self.source.nodes
        trainers = book.trainers_per_part
        # This rank's vertices of its part: all of them, or those assigned to it.
        self.mine = torch.arange(part.num_solid)
        if trainers > 1:
            assigned = torch.from_numpy(np.asarray(part["trainer"], dtype=np.int64))
            self.mine = torch.nonzero(assigned == comm.rank % trainers).squeeze(1)
        is_mine = torch.zeros(part.num_solid, dtype=torch.bool)
        is_mine[self.mine] = True

        def owned(split: str) -> torch.Tensor:
            local = torch.from_numpy(np.array(part[split], dtype=np.int64))
            return nodes[local[is_mine[local]]]

        self.train_ids = owned("train_idx")
        self.eval_ids = {"val": owned("val_idx"), "test": owned("test_idx")}
        self.in_dim = dataset.feat_dim
        if trainers > 1 and not self.task.trains_vertices:
            raise GnnrunError(
                f"task={cfg.task.name} trains on one part per rank: partition with "
                "partitioner.layout=trainers"
            )
        self.set_objective(dataset, self.source.owner)

    def labels_of(self, ids):
        return self.source.labels(ids)

    def embedded_vertices(self) -> torch.Tensor:
        return self.source.nodes[self.mine]

    def rows_of(self, table):
        rows = table.cpu().numpy()  # owners answer from CPU memory, as for features
        return lambda nodes: self.source.fetch_rows(nodes, rows, 0).to(table.device)
