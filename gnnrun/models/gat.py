"""GAT (Velickovic et al.): multi-head attention with edge softmax over in-neighbours."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnrun.config import check
from gnnrun.models.registry import BLOCK_MESSAGES, LAYERS, ModelConfig
from gnnrun.ops.attention import gat_aggregate
from gnnrun.ops.block import Block


@dataclass
class GatConfig(ModelConfig):
    def validate(self) -> None:
        super().validate()
        check(
            (self.layers == 1 and not self.pre_norm) or self.hidden % self.heads == 0,
            f"model.hidden ({self.hidden}) must be a multiple of model.heads ({self.heads}): "
            "hidden GAT layers concatenate their heads",
        )


class GATConv(torch.nn.Module):
    """Hidden layers concatenate their heads; the output layer averages them.

    Each vertex also attends to itself (a self-loop), as in the original GAT,
    so a vertex without in-neighbours keeps its own features.
    """

    def __init__(
        self, in_dim: int, out_dim: int, heads: int, concat: bool, negative_slope: float = 0.2
    ) -> None:
        super().__init__()
        self.heads, self.concat, self.negative_slope = heads, concat, negative_slope
        self.head_dim = out_dim // heads if concat else out_dim
        if concat and out_dim % heads:
            raise ValueError(
                f"model.hidden ({out_dim}) must be a multiple of model.heads ({heads})"
            )
        self.linear = torch.nn.Linear(in_dim, heads * self.head_dim, bias=False)
        self.project_first = True  # the attention reads the projected rows
        self.attn_src = torch.nn.Parameter(torch.empty(heads, self.head_dim))
        self.attn_dst = torch.nn.Parameter(torch.empty(heads, self.head_dim))
        self.bias = torch.nn.Parameter(torch.zeros(heads * self.head_dim if concat else out_dim))
        torch.nn.init.xavier_uniform_(self.attn_src)
        torch.nn.init.xavier_uniform_(self.attn_dst)

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        return self.propagate(block, self.transform(x))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """What the layer computes from each vertex's row alone (gnnrun.models.registry)."""
        return self.linear(x)

    def propagate(self, block: Block, rows: torch.Tensor) -> torch.Tensor:
        h = rows.view(-1, self.heads, self.head_dim)
        el = (h * self.attn_src).sum(-1)
        er = (h[: block.num_dst] * self.attn_dst).sum(-1)
        out = gat_aggregate(with_self_loops(block), h, el, er, self.negative_slope)
        out = out.flatten(1) if self.concat else out.mean(1)
        return out + self.bias


class GATMessage(torch.nn.Module):
    """The pre-normalised block's GAT message (gnnrun.models.gnn), Platonov et al.'s: a
    linear map with a bias, then per head h and edge u -> v (self-loops included)

        score[u->v, h] = leaky_relu(A_u[h] . x_u + b[h] + A_v[h] . x_v)

    over the whole projected rows x (not only head h's slice, as GATConv's attention),
    softmax over v's in-edges, and head h's slice of the rows summed with those weights;
    the heads concatenated. Head h's slice is the columns h * d / heads onwards (theirs
    interleave the heads' columns: the same model, its projection's columns permuted)."""

    def __init__(self, width: int, heads: int, negative_slope: float = 0.2) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"model.hidden ({width}) must be a multiple of model.heads ({heads})")
        self.heads, self.head_dim, self.negative_slope = heads, width // heads, negative_slope
        self.linear = torch.nn.Linear(width, width)
        self.attn_src = torch.nn.Linear(width, heads)
        self.attn_dst = torch.nn.Linear(width, heads, bias=False)
        self.out_dim = width

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        el, er = self.attn_src(x), self.attn_dst(x[: block.num_dst])
        h = x.view(-1, self.heads, self.head_dim)
        out = gat_aggregate(with_self_loops(block), h, el, er, self.negative_slope)
        return out.flatten(1)


def with_self_loops(block: Block) -> Block:
    """The block plus an edge v -> v for every destination (cached on the block)."""
    cached = getattr(block, "_with_self_loops", None)
    if cached is not None:
        return cached
    if block.completion is not None:
        # A vertex-cut part's completion sums partial aggregates; the edge softmax's
        # maximum and denominator would need completing too (the DistGNN algorithms
        # refuse model=gat), and the looped block would drop the completion unsaid.
        raise ValueError("GAT's self-loops would drop this block's clone completion")
    degrees = block.in_degrees()
    indptr = torch.zeros_like(block.indptr)
    indptr[1:] = torch.cumsum(degrees + 1, 0)
    indices = block.indices.new_empty(block.num_edges + block.num_dst)
    loop_positions = indptr[1:] - 1
    mask = torch.ones(indices.numel(), dtype=torch.bool, device=indices.device)
    mask[loop_positions] = False
    indices[mask] = block.indices
    indices[loop_positions] = torch.arange(
        block.num_dst, dtype=indices.dtype, device=indices.device
    )
    # Remote shards (SAR) stay with the block: the self-loops are local edges.
    looped = Block(indptr, indices, block.num_src, block.src_ids, sharded=block.sharded)
    object.__setattr__(block, "_with_self_loops", looped)
    return looped


@LAYERS.register("gat", GatConfig)
def gat_layer(
    in_dim: int, out_dim: int, cfg: ModelConfig, is_last: bool, schema=None
) -> torch.nn.Module:
    return GATConv(in_dim, out_dim, cfg.heads, concat=not is_last)


@BLOCK_MESSAGES.register("gat")
def gat_message(width: int, cfg: ModelConfig) -> torch.nn.Module:
    return GATMessage(width, cfg.heads)
