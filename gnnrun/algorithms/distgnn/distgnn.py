"""DistGNN full-batch training on Libra vertex-cut parts: `cd0`, `cdr`, `zero_comm`.

Each rank trains on its part's edges and a clone of every vertex they touch.
Every aggregation is local (the part's edges), then completed across the
clones of split vertices by DRPA (gnnrun/algorithms/distgnn/drpa.py): synchronously
every layer (cd0), delayed by `algorithm.delay_epochs` epochs and in `algorithm.bins`
turns (cdr), or not at all (zero_comm).

Normalisations use the degree of the neighbourhood a clone aggregates over: a
split clone that uses remote sums (cd0; cdr once its bin's first exchange has
arrived; every evaluation) divides by the vertex's degree in the whole graph,
summed across clones once at start-up; one that has only its local partial
sum (zero_comm; cdr before the first arrival) by its degree in its part. So
0c is what DistGNN describes, and what its code does: each part trains as if
its edges were the whole graph. Dividing a partial sum by the whole degree
instead shrinks every split vertex's aggregate by the share of its edges that
live elsewhere (80% of a rank's clones are split on 4 ranks of Facebook).

The loss is the cross entropy summed over every clone of a training vertex,
each weighted 1 / (its vertex's number of clones), divided by the number of
training vertices in the graph, and parameter gradients are summed over ranks:
with cd0 and dropout off this is exactly the single-process full-batch
gradient (`training_clones`). Dense layers run on every clone, so a split
vertex's update is computed once per clone (as in DistGNN); dropout masks are
drawn per clone. Evaluation always completes aggregates exactly, so accuracy
measures the trained weights, not the training shortcut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from gnnrun.algorithms.base import AlgorithmConfig
from gnnrun.algorithms.distgnn.drpa import CloneTree, DelayedRemoteAggregates
from gnnrun.algorithms.full_batch import FullBatch
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.config import check
from gnnrun.errors import GnnrunError
from gnnrun.ops.block import Block

BACKWARD_COMPLETIONS = ("autograd", "delayed", "exact")
SEMANTICS = ("fresh", "released")


@dataclass
class DistGNNConfig(AlgorithmConfig):
    mode: str = "full"

    def validate(self) -> None:
        super().validate()
        check(self.mode == "full", "algorithm.mode: DistGNN's algorithms train full batch")


@dataclass
class DelayedAggregatesConfig(DistGNNConfig):
    """cdr: remote partial aggregates sent at epoch t are used from epoch t + delay_epochs."""

    delay_epochs: int = 5  # between sending split vertices' partial aggregates and using them
    # Split vertices communicate in turn: bin (vertex id % bins) at the epochs = bin mod
    # bins. None: one bin per epoch of delay (at least one), as DistGNN's released code
    # groups them; a remote sum is then delay to 2 x delay - 1 epochs old.
    bins: int | None = None
    # How split clones complete their partial *gradients*: `autograd`, the gradient of
    # the forward pass as it ran (stale remote sums are constants; delay 0 is cd0);
    # `delayed` like the forward pass; `exact` synchronously every layer (DistGNN's
    # released code). Completing gradients of a stale forward pass makes training
    # oscillate (docs/algorithms/distgnn.md), hence the default.
    backward: str = "autograd"
    # What a split clone's aggregate is: `fresh`, its own partial sum now plus the other
    # clones' last remote sums of every bin; `released`, as DistGNN's released code: a
    # leaf takes the root's total, and only the bin whose exchange falls due completes.
    semantics: str = "fresh"

    def validate(self) -> None:
        super().validate()
        check(self.delay_epochs >= 0, "algorithm.delay_epochs must be >= 0 (0 is cd0)")
        check(
            self.bins is None or self.bins >= 1,
            "algorithm.bins must be at least 1, or null for one bin per epoch of delay",
        )
        check(
            self.backward in BACKWARD_COMPLETIONS,
            f"algorithm.backward must be one of {BACKWARD_COMPLETIONS}, not {self.backward!r}",
        )
        check(
            self.semantics in SEMANTICS,
            f"algorithm.semantics must be one of {SEMANTICS}, not {self.semantics!r}",
        )


# Models whose layers only sum (or average) over in-neighbours; GAT's edge
# softmax would need its maximum and denominator completed across clones too.
SUPPORTED_MODELS = ("sage", "gcn")
_RELATIONAL = (
    "it models heterogeneous graphs (an aggregate per relation), and clones complete one "
    "aggregate per vertex of a homogeneous graph"
)
UNSUPPORTED_BECAUSE = {
    "gat": "GAT's edge softmax is not completed across clones",
    "rgcn": _RELATIONAL,
    "hetero_sage": _RELATIONAL,
}


class DistGNN(FullBatch):
    partition_kind = "vertex_cut"
    # Epochs between sending and using remote partial aggregates; None: never (0c).
    delay: ClassVar[int | None] = 0

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.model.name not in SUPPORTED_MODELS:
            reason = UNSUPPORTED_BECAUSE.get(
                cfg.model.name, "only sums of neighbours are completed across clones"
            )
            raise GnnrunError(
                f"algorithm={cfg.algorithm.name} supports model.name in {SUPPORTED_MODELS}, not "
                f"{cfg.model.name!r}: {reason}. Use model=sage_gcn, model=sage or model=gcn"
            )

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        dataset, _, part = self.open_part(cfg, comm)
        bins = self.num_bins(cfg)
        # On a GPU rank the part, its partial sums and DRPA's exchanges (NCCL) are on the GPU.
        self.tree = CloneTree(part, comm.rank, comm.world_size, bins).to(self.device)
        self.drpa = DelayedRemoteAggregates(
            self.tree,
            comm,
            timer,
            self.delay,
            bins,
            self.backward_completion(cfg),
            semantics=getattr(cfg.algorithm, "semantics", "fresh"),  # cdr only
        )
        self.graph = Block.from_csr(part["indptr"], part["indices"]).to(self.device)
        ones = torch.ones(self.graph.num_dst, dtype=torch.int64, device=self.device)
        local = torch.stack([self.graph.in_degrees(), self.graph.graph_out_degrees(), ones], 1)
        # One exchange at start-up: whole-graph degrees, and how many clones each vertex has.
        whole = self.drpa.complete_now(local.to(torch.float64)).round().to(torch.int64)
        self.local_degrees, self.whole_degrees = local[:, :2], whole[:, :2]
        self._degrees_in_use: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.graph.completion = self.drpa
        # Every clone of a training vertex, weighted (the part's train_idx: its roots only).
        self.train_ids, self.train_weights = training_clones(
            dataset, np.asarray(part["nodes"]), whole[:, 2].cpu()
        )
        self.train_ids = self.train_ids.to(self.device)
        self.train_weights = self.train_weights.to(self.device)
        self.split_fraction = self.tree.num_split / max(part.num_local, 1)

    @staticmethod
    def num_bins(cfg) -> int:
        return 1

    @staticmethod
    def backward_completion(cfg) -> str:
        return "autograd"  # the gradient of the forward pass: cd0 completes, zero_comm not

    def logits(self, model: torch.nn.Module) -> torch.Tensor:
        return model([self.graph] * len(model.layers), self.x)

    def use_degrees(self, bins: tuple[int, ...]) -> None:
        """Normalise by whole-graph degrees on the split clones of `bins` (those whose
        remote sums are in use), by local degrees elsewhere."""
        if bins not in self._degrees_in_use:
            degrees = self.local_degrees.clone()
            for b in bins:
                result_local = self.tree.bins[b].result_local
                degrees[result_local] = self.whole_degrees[result_local]
            self._degrees_in_use[bins] = (degrees[:, 0].clone(), degrees[:, 1].clone())
        self.graph.graph_degrees = self._degrees_in_use[bins]

    def begin_epoch(self, epoch: int) -> int:
        self.drpa.begin_epoch(epoch)
        self.use_degrees(self.drpa.bins_in_use(epoch))
        return 1

    def loss(self, model, batch, step: int) -> torch.Tensor:
        logits = self.logits(model)
        ids = self.train_ids
        per_clone = self.task.vertex_loss(logits[ids], self.label[ids], reduction="none")
        return (per_clone * self.train_weights).sum() / self.num_train

    def epoch_figures(self) -> dict[str, Any]:
        return {"split_fraction": self.split_fraction, **self.drpa.end_epoch()}

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        self.use_degrees(tuple(range(len(self.tree.bins))))
        with self.drpa.exact():
            logits = self.logits(model)
        return {split: (logits[ids], self.label[ids]) for split, ids in self.eval_ids.items()}

    def state_dict(self):
        return self.drpa.state_dict() if self.drpa.keeps_state else None

    def load_state_dict(self, state) -> None:
        self.drpa.load_state_dict(state)


def training_clones(
    dataset, nodes: np.ndarray, clones: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The local ids of this part's clones of training vertices, and each one's share of
    its vertex's loss: 1 / (the vertex's number of clones).

    Every clone of a training vertex computes an output of its own, so every clone
    takes part in the loss, as in DistGNN's code (each clone carries the vertex's
    train mask). Under cd0 the clones' outputs are equal, and the shares make the
    loss and its gradient exactly those of single; under cdr and zero_comm each
    clone's output comes from its own part's edges, which its loss then trains.
    """
    is_train = np.zeros(dataset.num_nodes, dtype=bool)
    is_train[np.asarray(dataset.train_idx)] = True
    ids = torch.from_numpy(np.flatnonzero(is_train[nodes]))
    return ids, 1.0 / clones[ids].to(torch.float32)


@ALGORITHMS.register("cd0", DistGNNConfig)
class CD0(DistGNN):
    """Split vertices complete their aggregates every layer before going on: exact."""

    delay = 0


@ALGORITHMS.register("cdr", DelayedAggregatesConfig)
class CDR(DistGNN):
    """Remote partial aggregates sent at epoch t are used from epoch t + algorithm.delay_epochs."""

    def __init__(self, cfg, comm, timer) -> None:
        self.delay = cfg.algorithm.delay_epochs
        super().__init__(cfg, comm, timer)

    @staticmethod
    def num_bins(cfg) -> int:
        bins = cfg.algorithm.bins
        return max(cfg.algorithm.delay_epochs, 1) if bins is None else bins

    @staticmethod
    def backward_completion(cfg) -> str:
        return cfg.algorithm.backward


@ALGORITHMS.register("zero_comm", DistGNNConfig)
class ZeroComm(DistGNN):
    """Split vertices keep their local partial aggregates during training (0c)."""

    delay = None
