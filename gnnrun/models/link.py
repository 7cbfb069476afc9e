"""Link prediction's model: a GNN that embeds vertices and a scorer of vertex pairs.

The encoder is any model of the registry, its output `hidden` wide (the vertex
embedding). The scorer gives a pair (u, v) a logit from the two embeddings:

- `dot`: <h_u, h_v>;
- `mlp`: a two-layer perceptron on h_u * h_v (OGB's link-prediction examples'
  predictor; the product keeps the score symmetric in u and v).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# Bytes of embedding rows `score_pairs` gathers at once. On the CPU a few MiB: they stay in
# cache, and glibc reuses the block (blocks of 32 MiB and more are mapped afresh each
# time, page faults and all: scoring took 2-7x as long). A GPU's caching allocator has
# neither cost, and fewer, larger chunks launch fewer kernels.
SCORE_CHUNK_BYTES = {"cpu": 4 << 20, "cuda": 1 << 28}


class DotScorer(torch.nn.Module):
    def forward(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        if h_u.dim() == 3 and h_u.shape[1] == 1 and h_v.dim() == 3:
            # One source against k vertices each: a batched product reads h_v once.
            return torch.bmm(h_v, h_u.transpose(1, 2)).squeeze(-1)
        return (h_u * h_v).sum(dim=-1)


class MLPScorer(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, 1)

    def forward(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(h_u * h_v))).squeeze(-1)


def score_pairs(
    score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    h: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    """`score` of pairs of rows of `h`, a few MiB of rows at a time: u [P] with v [P]
    gives [P]; u [E] (one source against k) or [E, k] with v [E, k] gives [E, k]."""
    per_row = v.shape[1] if v.dim() == 2 else 1
    budget = SCORE_CHUNK_BYTES.get(h.device.type, SCORE_CHUNK_BYTES["cpu"])
    chunk = max(1, budget // (h.shape[1] * h.element_size() * per_row))

    def rows_of(index: torch.Tensor) -> torch.Tensor:
        # index_select of the flat index gathers 4x faster than h[index] with a 2-D index.
        flat = index.reshape(-1).to(h.device)
        return h.index_select(0, flat).view(*index.shape, h.shape[1])

    def sources(index: torch.Tensor) -> torch.Tensor:
        one_each = index.dim() == 1 and v.dim() == 2
        return rows_of(index)[:, None, :] if one_each else rows_of(index)

    scores = [
        score(sources(u[i : i + chunk]), rows_of(v[i : i + chunk])).float()
        for i in range(0, u.shape[0], chunk)
    ]
    return torch.cat(scores) if scores else torch.zeros(v.shape, device=h.device)


def build_scorer(name: str, width: int) -> torch.nn.Module:
    if name == "dot":
        return DotScorer()
    if name == "mlp":
        return MLPScorer(width)
    raise ValueError(f"unknown scorer {name!r}: choose dot or mlp")


class LinkModel(torch.nn.Module):
    """`encoder`'s vertex embeddings (forward, as the encoder's) and `score` of vertex pairs."""

    def __init__(self, encoder: torch.nn.Module, scorer: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.scorer = scorer

    @property
    def layers(self) -> torch.nn.ModuleList:
        return self.encoder.layers

    def forward(self, blocks, x, layer_input=None) -> torch.Tensor:
        return self.encoder(blocks, x, layer_input)

    def score(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """One logit per pair: row i of h_u with row i of h_v ([n, d] each), or each of
        h_v's k rows with h_u's one ([n, 1, d] and [n, k, d] give [n, k])."""
        return self.scorer(h_u, h_v)
