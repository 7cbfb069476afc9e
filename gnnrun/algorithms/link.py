"""Link prediction's steps and evaluation, for the sampled algorithms and full batch.

A step trains on a minibatch of target edges, the training edges this rank
owns (a rank owns the edges into its vertices, DistDGL's assignment), each
with `task.num_negatives` negatives (gnnrun.ops.negatives, keyed by the step,
so that a distributed run builds one process's minibatches exactly). The
model embeds the unique endpoints of positives and negatives, sampled from
the message-passing graph with the step's target edges taken out of every
block (gnnrun.algorithms.sources); the scorer (gnnrun.models.link) scores
each pair, and the loss is binary cross-entropy over positives (label 1) and
negatives (label 0), or the margin loss mean(relu(margin - s(pos) + s(neg)))
over each positive and its own negatives.

Evaluation embeds every vertex once (each rank its own, sampled with one key
for all steps, so that a vertex's embedding does not depend on the batch it
came in), then scores each held-out edge (u, v) and its fixed negatives
(u, w), or (x, w) with both ends uniform under `task.eval_sampler=uniform`
(gnnrun.data.edge_split); the trainer turns those into MRR, Hits@K and
ROC-AUC over all ranks (gnnrun.train.metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.edge_split import held_out_negative_pairs, negative_range, target_relation
from gnnrun.ops.negatives import degree_weights, sample_negatives

# Pairs scored at once in evaluation: bounds the [pairs, width] rows gathered.
SCORE_CHUNK = 1 << 18


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

        def owned(edges: torch.Tensor) -> torch.Tensor:
            ids = torch.arange(edges.shape[1])
            return ids if owner is None else ids[owner[edges[1]] == rank]

        self.train_ids = owned(self.edges["train"])
        self.eval_ids = {split: owned(self.edges[split]) for split in ("val", "test")}
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

    @torch.no_grad()
    def evaluate(
        self, model, rows_of: Callable[[torch.Tensor], torch.Tensor]
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split: (scores of this rank's held-out edges [E], of their negatives [E, k]).
        `rows_of(ids)` gives the embeddings of global vertices (a collective: called once
        per split on every rank)."""
        out = {}
        k = self.task.eval_negatives
        for split, ids in self.eval_ids.items():
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
            needed, position = torch.unique(
                torch.cat([pairs.reshape(-1), negatives.reshape(-1)]), return_inverse=True
            )
            h = rows_of(needed)
            u, v = position[: pairs.numel()].view(2, -1)
            w = position[pairs.numel() :].view(len(negatives), pairs.shape[1], k)
            s = u if own_sources else w[0]  # per_source: one source against its k
            out[split] = (_score(model, h, u, v[:, None]).view(-1), _score(model, h, s, w[-1]))
        return out


def _score(model, h: torch.Tensor, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """[E, k] scores of the pairs (u[i], w[i, j]) of embedding rows `h` (or (u[i, j],
    w[i, j]) for u [E, k]), in chunks."""
    chunk = max(1, SCORE_CHUNK // w.shape[1])

    def sources(rows: torch.Tensor) -> torch.Tensor:
        return h[rows][:, None, :] if rows.dim() == 1 else h[rows]

    scores = [
        model.score(sources(u[i : i + chunk]), h[w[i : i + chunk]]).float()
        for i in range(0, u.shape[0], chunk)
    ]
    return torch.cat(scores) if scores else torch.zeros(0, w.shape[1], device=h.device)
