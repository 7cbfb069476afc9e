"""`task=link`: link prediction, for the sampled algorithms and full batch.

The dataset is the prepared one with held-out edges taken out of its graph
(gnnrun.data.edge_split); the model is the GNN and a scorer of vertex pairs
(gnnrun.models.link), the GNN's output `model.embedding` (or `model.hidden`) wide.

A step trains on a minibatch of target edges, the training edges this rank
owns (a rank owns the edges into its vertices, DistDGL's assignment), each
with `task.num_negatives` negatives (gnnrun.ops.negatives, keyed by the step,
so that a distributed run builds one process's minibatches exactly). The
model embeds the unique endpoints of positives and negatives, sampled from
the message-passing graph with the step's target edges taken out of every
block (gnnrun.algorithms.minibatch.sources); the scorer (gnnrun.models.link) scores
each pair, and the loss is binary cross-entropy over positives (label 1) and
negatives (label 0), or the margin loss mean(relu(margin - s(pos) + s(neg)))
over each positive and its own negatives. `task.self_pairs` adds each vertex's
pair with itself to the training edges. `task.loss=reconstruction` is GAE's
loss instead: no negatives are drawn, every vertex pair of the whole graph is
a target (`LinkObjective.reconstruction_loss`, full batch on one process).

Evaluation embeds every vertex once (each rank its own, sampled with one key
for all steps, so that a vertex's embedding does not depend on the batch it
came in), then scores each held-out edge (u, v) and its fixed negatives
(u, w), or (x, w) with both ends uniform under `task.eval_sampler=uniform`
(gnnrun.data.edge_split); the trainer turns those into MRR, Hits@K and
ROC-AUC over all ranks (gnnrun.tasks.metrics). `gnnrun predict` writes every
vertex's embedding and scores the pairs of predict.candidates (gnnrun.infer.link).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.edge_split import (
    held_out_negative_pairs,
    load_link_dataset,
    negative_range,
    prepare_link_dataset,
    target_relation,
)
from gnnrun.errors import GnnrunError
from gnnrun.models.link import score_pairs
from gnnrun.ops.negatives import degree_weights, sample_negatives
from gnnrun.tasks.base import Task, TaskConfig
from gnnrun.tasks.metrics import link_metrics
from gnnrun.tasks.registry import TASKS

NEGATIVE_SAMPLERS = ("per_source", "uniform", "degree")
EVAL_SAMPLERS = ("per_source", "uniform")
SCORERS = ("dot", "mlp")
LINK_LOSSES = ("bce", "margin", "reconstruction")


@dataclass
class LinkTaskConfig(TaskConfig):
    """task=link: edge-level training against sampled negatives, ranked held-out edges
    (gnnrun.data.edge_split)."""

    name: str = "link"
    graph: str = "${dataset.name}-link"
    # The dataset with its held-out edges out of the graph, beside the dataset's own.
    prepared_dir: str = "${dataset.prepared_dir}-link"
    # Shares of the edges (vertex pairs, on an undirected graph) held out, and the split's seed.
    val_fraction: float = 0.05
    test_fraction: float = 0.1
    split_seed: int = 0
    # Training negatives: per_source (each positive (u, v) gives (u, w), w uniform),
    # uniform (both ends uniform) or degree (w drawn in proportion to degree ** 0.75).
    negatives: str = "per_source"
    num_negatives: int = 1  # per positive edge
    # Fixed negatives (u, w) of every validation and test edge that MRR and Hits@K rank it among.
    eval_negatives: int = 1000
    # Whose negatives they are: per_source (u, w) of each edge (u, v), OGB's convention,
    # or uniform (x, w), both ends uniform (GAE's random pairs).
    eval_sampler: str = "per_source"
    hits_at: list[int] = field(default_factory=lambda: [10, 50, 100])
    # A heterogeneous graph's relation whose edges to predict (by name; required there).
    relation: str | None = None
    scorer: str = "dot"  # dot | mlp (on the two endpoint embeddings)
    # bce | margin (each positive above its negatives by `margin`) | reconstruction (GAE's
    # loss: every vertex pair a target, the training edges 1 and every other pair 0, the
    # two classes weighted equally; full batch on one process, dot scorer).
    loss: str = "bce"
    margin: float = 1.0
    # Train on each vertex's pair with itself (v, v) as a positive too: GAE reconstructs
    # A + I, the graph its GCN aggregates over. Training pairs only; never evaluated.
    self_pairs: bool = False

    def validate(self) -> None:
        check(
            0 <= self.val_fraction < 1 and 0 <= self.test_fraction < 1,
            f"task.val_fraction ({self.val_fraction}) and task.test_fraction "
            f"({self.test_fraction}) must lie in [0, 1)",
        )
        check(
            self.val_fraction + self.test_fraction < 1,
            f"task.val_fraction + task.test_fraction = "
            f"{self.val_fraction + self.test_fraction:.3f} leaves no training edges: keep it below 1",
        )
        for key, value, choices in (
            ("negatives", self.negatives, NEGATIVE_SAMPLERS),
            ("eval_sampler", self.eval_sampler, EVAL_SAMPLERS),
            ("scorer", self.scorer, SCORERS),
            ("loss", self.loss, LINK_LOSSES),
        ):
            check(value in choices, f"task.{key} {value!r}: choose one of {', '.join(choices)}")
        check(self.num_negatives >= 1, "task.num_negatives must be at least 1")
        check(self.eval_negatives >= 1, "task.eval_negatives must be at least 1")
        check(
            bool(self.hits_at) and all(k >= 1 for k in self.hits_at),
            f"task.hits_at {list(self.hits_at)}: give one or more K >= 1",
        )
        check(
            len(set(self.hits_at)) == len(self.hits_at),
            f"task.hits_at {list(self.hits_at)} names a K twice: give each once",
        )
        check(self.margin > 0, "task.margin must be positive")
        check(
            self.loss != "reconstruction" or self.scorer == "dot",
            f"task.loss=reconstruction scores every vertex pair by inner product: use "
            f"task.scorer=dot (not {self.scorer!r}), or task.loss=bce with sampled negatives",
        )


@TASKS.register("link", schema=LinkTaskConfig)
class LinkTask(Task):
    name = "link"
    figures = (("mrr", "MRR"), ("auc", "AUC"), ("ap", "AP"))
    best = "val_mrr"
    shown_as = ("val MRR", "test MRR")
    shown = ("mrr",)
    trains_vertices = False
    scores_pairs = True
    cfg: LinkTaskConfig

    def prepare(self, dataset_cfg, force=False):
        return prepare_link_dataset(super().prepare(dataset_cfg, force), self.cfg)

    def load(self, dataset_cfg):
        return load_link_dataset(super().load(dataset_cfg), self.cfg)

    def check_targets(self, dataset):
        from gnnrun.progress import print_warning

        cfg = self.cfg
        if dataset.hetero is not None and (cfg.self_pairs or cfg.loss == "reconstruction"):
            raise GnnrunError(_one_graph_only(cfg, dataset))
        if dataset.link_train is None or dataset.link_train.shape[1] == 0:
            raise GnnrunError(
                f"dataset {dataset.name!r} has no training edges once "
                f"{cfg.val_fraction} + {cfg.test_fraction} of them are held out: "
                "lower task.val_fraction / task.test_fraction, or use a graph with edges"
            )
        sizes = {"validation": dataset.link_val.shape[1], "test": dataset.link_test.shape[1]}
        if empty := [name for name, size in sizes.items() if size == 0]:
            print_warning(
                f"dataset {dataset.name!r} has no {' and no '.join(empty)} edges once "
                f"{cfg.val_fraction} + {cfg.test_fraction} of its edges are held "
                "out: they are not evaluated, and no best epoch is chosen without validation "
                "edges (raise task.val_fraction / task.test_fraction to evaluate)"
            )

    def out_dim(self, model_cfg, dataset):
        return model_cfg.link_width  # embeddings (model.embedding, or model.hidden), paired

    def check_model(self, model_cfg):
        pass  # model.embedding is this task's width

    def best_metric(self, history):
        # Against one negative an edge's reciprocal rank is 1 or 1/2, so MRR only counts
        # the pairs ranked the wrong way and ties between epochs; ROC-AUC over every
        # positive and negative (GAE's figure) tells them apart.
        if self.cfg.eval_negatives == 1 and any("val_auc" in r for r in history):
            return "val_auc"
        return self.best

    def model_options(self):
        return {"scorer": self.cfg.scorer}

    def encoder_state(self, state):
        # LinkModel: the GNN under encoder., the scorer beside it
        return {k.removeprefix("encoder."): v for k, v in state.items()}

    def encoder(self, model):
        return model.encoder

    def objective(self, dataset, rank, owner, train_ids, eval_ids, labels_of):
        return LinkObjective(self.cfg, dataset, rank, owner)

    def metrics(self, outputs, comm):
        # An edge ranks at most eval_negatives + 1: Hits@K beyond the negatives is always 1.
        hits_at = [k for k in self.cfg.hits_at if k <= self.cfg.eval_negatives]
        return link_metrics(outputs, comm, hits_at)

    def check_inference(self, kind, candidates, run_dir):
        if kind == "predict" and not candidates:
            raise GnnrunError(
                f"the run in {run_dir} trained task=link: give the vertex pairs to score with "
                "predict.candidates=PAIRS.npy (shape (2, P) or (P, 2)), or write every vertex's "
                "embedding with `gnnrun embed run=... embed.layer=-1`"
            )
        if candidates and kind != "predict":
            super().check_inference(kind, candidates, run_dir)

    def output_columns(self, num_classes):
        return ("embedding",)  # the embeddings its pairs were scored from

    def prediction_columns(self, logits):
        return {"embedding": logits.astype(np.float32)}


# Rows of the N x N inner products task.loss=reconstruction computes at once.
RECONSTRUCTION_ROWS = 4096


@dataclass
class EdgeTargets:
    """A link step's pairs, as positions into the step's seeds (its embedded vertices)."""

    positives: torch.Tensor  # [2, B]
    negatives: torch.Tensor  # [2, B * k]: positive i's negatives at i*k .. i*k + k - 1

    def to(self, device: torch.device, non_blocking: bool = False) -> EdgeTargets:
        return EdgeTargets(
            self.positives.to(device, non_blocking=non_blocking),
            self.negatives.to(device, non_blocking=non_blocking),
        )


class LinkObjective:
    """Target edges, negatives, the loss and the held-out scores of one rank."""

    def __init__(self, task, dataset: GraphDataset, rank: int, owner: torch.Tensor | None) -> None:
        self.task = task
        # Where negatives' ends come from: the vertices, or the target relation's types.
        relation = target_relation(dataset, task.relation)
        self.destinations = negative_range(dataset, relation, "destination")
        self.sources = negative_range(dataset, relation, "source")
        self.edges = {
            split: torch.from_numpy(np.array(getattr(dataset, f"link_{split}"), dtype=np.int64))
            for split in ("train", "val", "test")
        }
        if relation is not None and (task.self_pairs or task.loss == "reconstruction"):
            raise GnnrunError(_one_graph_only(task, dataset))
        self.directed = dataset.directed
        # The loss needs every vertex's embedding at once (gnnrun.algorithms.single, full batch).
        self.whole_graph_loss = task.loss == "reconstruction"
        if task.self_pairs:  # after the graph's own edges: their ids (negatives' keys) stay
            loops = torch.arange(dataset.num_nodes).repeat(2, 1)
            self.edges["train"] = torch.cat([self.edges["train"], loops], dim=1)

        def owned(edges: torch.Tensor) -> torch.Tensor:
            ids = torch.arange(edges.shape[1])
            return ids if owner is None else ids[owner[edges[1]] == rank]

        self.train_ids = owned(self.edges["train"])  # edges: a step's items
        self.eval_ids = {split: owned(self.edges[split]) for split in ("val", "test")}
        self._held_out: dict[str, HeldOutPairs] = {}
        self.degree_cdf = None
        if task.negatives == "degree":
            first, count = self.destinations
            degree = np.diff(np.asarray(dataset.indptr))[first : first + count]
            self.degree_cdf = degree_weights(degree)

    def step(
        self, edge_ids: torch.Tensor, key: int
    ) -> tuple[torch.Tensor, torch.Tensor, EdgeTargets]:
        """For training edges `edge_ids`: (the vertices to embed, the target pairs that leave
        the sampled blocks, the pairs as positions into those vertices)."""
        positives = self.edges["train"][:, edge_ids]
        negatives = sample_negatives(
            self.task.negatives,
            positives,
            edge_ids,
            self.task.num_negatives,
            key,
            self.destinations,
            self.sources,
            self.degree_cdf,
        )
        seeds, position = torch.unique(
            torch.cat([positives.reshape(-1), negatives.reshape(-1)]), return_inverse=True
        )
        b = positives.numel()
        targets = EdgeTargets(position[:b].view(2, -1), position[b:].view(2, -1))
        return seeds, positives, targets

    def loss(self, model, h: torch.Tensor, targets: EdgeTargets) -> torch.Tensor | None:
        if self.task.loss == "reconstruction":
            raise ValueError("task.loss=reconstruction: call reconstruction_loss on every vertex")
        if not targets.positives.numel():
            return None
        # index_select, not h[...]: indexing's gradient (an accumulating index_put_) adds
        # rows shared by several pairs in a varying order on CPU, index_select's does not.
        pos, neg = targets.positives, targets.negatives
        positive = model.score(h.index_select(0, pos[0]), h.index_select(0, pos[1]))
        negative = model.score(h.index_select(0, neg[0]), h.index_select(0, neg[1]))
        if self.task.loss == "margin":
            each = positive.repeat_interleave(self.task.num_negatives)
            return torch.relu(self.task.margin - each + negative).mean()
        scores = torch.cat([positive, negative])
        labels = torch.cat([torch.ones_like(positive), torch.zeros_like(negative)])
        return torch.nn.functional.binary_cross_entropy_with_logits(scores, labels)

    def reconstruction_loss(self, h: torch.Tensor) -> torch.Tensor:
        """GAE's loss on every vertex's embedding `h` [N, d]: binary cross-entropy of the
        inner products h h^T against the training adjacency matrix (both directions of an
        undirected pair; (v, v) too under task.self_pairs), P ones among N^2 entries,
        weighted as Kipf & Welling's: norm * mean(pos_weight * y * -log s + (1 - y) *
        -log(1 - s)), pos_weight = (N^2 - P) / P and norm = N^2 / (2 (N^2 - P)). That is
        half the mean loss of the ones plus half the mean loss of the zeros, computed so:
        the zeros' sum is every entry's softplus(logit) less the ones'."""
        n = h.shape[0]
        edges = self.edges["train"].to(h.device)
        if not self.directed:  # one direction per pair is stored: the matrix has both
            turned = edges.flip(0)
            edges = torch.cat([edges, turned[:, turned[0] != turned[1]]], dim=1)
        ones = edges.shape[1]
        zeros = n * n - ones
        logits = (h.index_select(0, edges[0]) * h.index_select(0, edges[1])).sum(dim=-1)
        softplus = torch.nn.functional.softplus
        every = sum(
            softplus(h[i : i + RECONSTRUCTION_ROWS] @ h.T).sum()
            for i in range(0, n, RECONSTRUCTION_ROWS)
        )
        ones_loss = softplus(-logits).mean()  # -log sigmoid(x) = softplus(-x)
        zeros_loss = (every - softplus(logits).sum()) / zeros  # -log(1 - sigmoid(x)) = softplus(x)
        return 0.5 * ones_loss + 0.5 * zeros_loss

    @torch.no_grad()
    def evaluate(self, model, source) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split: (scores of this rank's held-out edges [E], of their negatives [E, k]),
        from every vertex's embedding, computed once (`source.every_output`)."""
        return self.scores(model, source.every_output(model))

    @torch.no_grad()
    def scores(
        self, model, rows_of: Callable[[torch.Tensor], torch.Tensor]
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """`evaluate`'s scores; `rows_of(ids)` gives the embeddings of global vertices (a
        collective: called once per split on every rank)."""
        out = {}
        for split in self.eval_ids:
            pairs = self.held_out_pairs(split)
            h = rows_of(pairs.vertices)
            out[split] = (
                score_pairs(model.score, h, pairs.u, pairs.v),
                score_pairs(model.score, h, pairs.sources, pairs.negatives),
            )
        return out

    def held_out_pairs(self, split: str) -> HeldOutPairs:
        """This rank's `split` edges and their fixed negatives, as positions into the
        vertices to embed: the same at every evaluation, so drawn once and kept (int32
        positions: 100 MB for Facebook's 25.6M pairs, where drawing them again took a
        third of each evaluation)."""
        if split in self._held_out:
            return self._held_out[split]
        ids, k = self.eval_ids[split], self.task.eval_negatives
        pairs = self.edges[split][:, ids]
        negatives = held_out_negative_pairs(
            pairs,
            ids,
            k,
            self.destinations,
            self.task.split_seed,
            split,
            self.task.eval_sampler,
            self.sources,
        )
        own_sources = self.task.eval_sampler == "per_source"
        if own_sources:
            negatives = negatives[1:]  # the sources are the edges' own
        vertices, position = torch.unique(
            torch.cat([pairs.reshape(-1), negatives.reshape(-1)]), return_inverse=True
        )
        position = position.to(torch.int32 if vertices.numel() < 2**31 else torch.int64)
        u, v = position[: pairs.numel()].view(2, -1)
        w = position[pairs.numel() :].view(len(negatives), pairs.shape[1], k)
        # per_source: each edge's own source against its k; uniform: pair by pair.
        held = HeldOutPairs(vertices, u, v, u if own_sources else w[0], w[-1])
        self._held_out[split] = held
        return held


@dataclass
class HeldOutPairs:
    """One split's held-out edges (u[i], v[i]) and their negatives (sources[i] or
    sources[i, j], negatives[i, j]), as positions into `vertices` (global ids)."""

    vertices: torch.Tensor  # [n] int64
    u: torch.Tensor  # [E]
    v: torch.Tensor  # [E]
    sources: torch.Tensor  # [E] (per_source) or [E, k] (uniform)
    negatives: torch.Tensor  # [E, k]


def _one_graph_only(task, dataset: GraphDataset) -> str:
    given = " ".join(
        ([f"task.loss={task.loss}"] if task.loss == "reconstruction" else [])
        + (["task.self_pairs=true"] if task.self_pairs else [])
    )
    return (
        f"{given} pairs the vertices of one graph with each other, and {dataset.name} is "
        "heterogeneous: use task.loss=bce (or margin) with task.self_pairs=false"
    )
