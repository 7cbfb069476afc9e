"""Full-batch training on METIS edge-cut parts without halo copies: `sar` and its
memory baseline `domain_parallel`.

Each rank owns its part's solid vertices and computes every layer for them
alone; the model runs on a Block over those vertices whose `sharded`
aggregation brings in the in-edges from other parts
(gnnrun/algorithms/sar/shards.py): one remote shard at a time under `sar`
(Sequential Aggregation and Rematerialization, Mostafa, MLSys 2022; with
`algorithm.prefetch`, the next shard arrives while the current one is
aggregated), all of a layer's remote rows at once, kept for the backward pass,
under `domain_parallel`. Degrees are the whole graph's: in-degrees are the
part's CSR rows, out-degrees (GCN) are summed over ranks once at start-up.

The loss is the cross entropy summed over the rank's own training vertices,
divided by the number of training vertices in the graph, and parameter
gradients are summed over ranks: every rank's loss is its share of the one
global loss, so with dropout off the gradients are those of `single` full
batch. A rank without training vertices still runs every forward and backward
pass, whose exchanges its peers wait on. Evaluation is exact (the same
aggregation, without gradients).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnrun.algorithms.base import AlgorithmConfig
from gnnrun.algorithms.full_batch import FullBatch
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.algorithms.sar.shards import (
    DomainParallelAggregation,
    SequentialAggregation,
    ShardPlan,
)
from gnnrun.config import check


@dataclass
class ShardedFullBatchConfig(AlgorithmConfig):
    """domain_parallel: full batch on edge-cut parts, a layer's remote rows fetched at once."""

    mode: str = "full"

    def validate(self) -> None:
        super().validate()
        check(self.mode == "full", f"algorithm.mode: {self.name} trains full batch")


@dataclass
class SarConfig(ShardedFullBatchConfig):
    """sar: remote rows one peer's shard at a time."""

    # Receive the next peer's shard while aggregating the current one: two shards alive.
    prefetch: bool = False


class ShardedFullBatch(FullBatch):
    """What `sar` and `domain_parallel` share; they differ only in their aggregation.
    (SAR's paper trains on CPUs and on GPUs, as FullBatch does.)"""

    partition_kind = "edge_cut"

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        _, book, part = self.open_part(cfg, comm)
        halos = np.asarray(part["nodes"][part.num_solid :], dtype=np.int64)
        halo_local = np.asarray(book.node_local()[halos], dtype=np.int64)
        plan, graph = ShardPlan.from_part(part, halo_local, comm)
        # On a GPU rank the rows, the shards and the exchanges (NCCL) are all on the GPU.
        plan, self.graph = plan.to(self.device), graph.to(self.device)
        self.graph.graph_degrees = (plan.in_degrees, plan.out_degrees)
        self.aggregation = self.sharded_aggregation(cfg, plan, comm)
        self.graph.sharded = self.aggregation
        self.remote_rows = plan.remote_rows()
        self.shard_rows = [plan.remote[plan.ahead(step)].num_rows for step in plan.steps]

    @staticmethod
    def sharded_aggregation(cfg, plan: ShardPlan, comm):
        raise NotImplementedError

    def logits(self, model: torch.nn.Module) -> torch.Tensor:
        """The model's outputs for this rank's vertices."""
        self.aggregation.begin_pass()
        return model([self.graph] * len(model.layers), self.x)

    def begin_epoch(self, epoch: int) -> int:
        self.aggregation.remote_rows.reset()
        self.aggregation.rows.reset()
        return 1

    def epoch_figures(self) -> dict[str, Any]:
        return {
            # Per layer, input layer first: remote rows alive at once (forward or backward),
            # from the lifetimes of the buffers they arrived in.
            "remote_rows_peak": self.aggregation.remote_rows.peaks(),
            # Bytes of remote rows alive at once, every layer's together.
            "remote_bytes_peak": self.aggregation.remote_rows.peak_bytes,
            "remote_rows": self.remote_rows,  # every remote row a layer needs
            # Per peer, in ring order (rank+1, rank+2, ...): the rows of its shard.
            "shard_rows": self.shard_rows,
            "rows_moved": self.aggregation.rows.reset(),
        }

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        logits = self.logits(model)
        return {split: (logits[ids], self.label[ids]) for split, ids in self.eval_ids.items()}


@ALGORITHMS.register("sar", schema=SarConfig)
class SAR(ShardedFullBatch):
    """Sequential aggregation and rematerialization: one remote shard alive at a time."""

    @staticmethod
    def sharded_aggregation(cfg, plan, comm):
        return SequentialAggregation(plan, comm, prefetch=cfg.algorithm.prefetch)


@ALGORITHMS.register("domain_parallel", schema=ShardedFullBatchConfig)
class DomainParallel(ShardedFullBatch):
    """Every remote row of a layer fetched at once and kept for the backward pass."""

    @staticmethod
    def sharded_aggregation(cfg, plan, comm):
        return DomainParallelAggregation(plan, comm)
