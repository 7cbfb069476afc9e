"""GraphSAGE (Hamilton et al.) with the `mean` and `gcn` aggregators."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnrun.config import check
from gnnrun.models.registry import BLOCK_MESSAGES, LAYERS, ModelConfig
from gnnrun.ops.aggregate import aggregate, aggregate_normalized, aggregate_with_dst
from gnnrun.ops.block import Block
from gnnrun.ops.precision import factor_dtype

AGGREGATORS = ("mean", "gcn")


@dataclass
class SageConfig(ModelConfig):
    def validate(self) -> None:
        super().validate()
        check(
            self.aggregator in AGGREGATORS,
            f"model.aggregator {self.aggregator!r}: choose one of {', '.join(AGGREGATORS)}",
        )


class SAGEConv(torch.nn.Module):
    """mean: W_self x_v + W_neigh mean_u x_u.  gcn: W (x_v + sum_u x_u) / (deg(v) + 1).

    The `gcn` form is DistGNN's "GraphSAGE with the GCN aggregator". When the
    output is narrower than the input the linear map goes first, so the
    aggregation moves fewer bytes; the result is the same (both are linear).
    """

    def __init__(self, in_dim: int, out_dim: int, aggregator: str) -> None:
        super().__init__()
        if aggregator not in AGGREGATORS:
            raise ValueError(f"model.aggregator {aggregator!r}: choose mean or gcn")
        self.aggregator = aggregator
        self.neigh = torch.nn.Linear(in_dim, out_dim, bias=aggregator == "gcn")
        self.self_loop = torch.nn.Linear(in_dim, out_dim) if aggregator == "mean" else None
        self.project_first = out_dim < in_dim

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        return self.propagate(block, self.transform(x))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """What the layer computes from each vertex's row alone (gnnrun.models.registry).

        mean: both maps in one GEMM, so that x is read once and gets one gradient
        buffer (x[:num_dst] for the self term would cost autograd a zero-filled
        [num_src, in_dim] gradient, then a copy and an add).
        """
        if not self.project_first:
            return x
        if self.aggregator == "mean":
            return x @ torch.cat([self.neigh.weight, self.self_loop.weight]).T
        return x @ self.neigh.weight.T

    def propagate(self, block: Block, rows: torch.Tensor) -> torch.Tensor:
        if self.aggregator == "mean":
            if self.project_first:
                out_dim = self.neigh.out_features
                neigh = aggregate(block, rows[:, :out_dim].contiguous(), "mean")
                return neigh.add_(rows[: block.num_dst, out_dim:]).add_(self.self_loop.bias)
            # One gradient buffer for x (aggregate_with_dst), and the neighbour
            # term accumulated by the GEMM into the self term in place: torch.addmm
            # would first copy the self term into a new [num_dst, out] output.
            mean, x_dst = aggregate_with_dst(block, rows, "mean")
            out = self.self_loop(x_dst)  # bfloat16 under autocast; addmm_ is not cast
            return out.addmm_(mean.to(out.dtype), self.neigh.weight.T.to(out.dtype))
        scale = 1.0 / (block.graph_in_degrees().to(factor_dtype(rows)) + 1.0)
        if self.project_first:
            return aggregate_normalized(block, rows, None, scale).add_(self.neigh.bias)
        return self.neigh(aggregate_normalized(block, rows, None, scale))


class SAGEMessage(torch.nn.Module):
    """The pre-normalised block's SAGE message (gnnrun.models.gnn), no weights. mean: each
    destination's row, then the mean of its in-neighbours' (Platonov et al.'s, twice the
    width: the feed-forward network's first linear map then is W_self x_v + W_neigh mean_u
    x_u + b, SAGEConv's). gcn: (x_v + sum_u x_u) / (deg(v) + 1)."""

    def __init__(self, width: int, aggregator: str) -> None:
        super().__init__()
        if aggregator not in AGGREGATORS:
            raise ValueError(f"model.aggregator {aggregator!r}: choose mean or gcn")
        self.aggregator = aggregator
        self.out_dim = 2 * width if aggregator == "mean" else width

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        if self.aggregator == "mean":
            mean, x_dst = aggregate_with_dst(block, x, "mean")
            return torch.cat([x_dst, mean], dim=1)
        scale = 1.0 / (block.graph_in_degrees().to(factor_dtype(x)) + 1.0)
        return aggregate_normalized(block, x, None, scale)


@BLOCK_MESSAGES.register("sage")
def sage_message(width: int, cfg: ModelConfig) -> torch.nn.Module:
    return SAGEMessage(width, cfg.aggregator)


@LAYERS.register("sage", SageConfig)
def sage_layer(
    in_dim: int, out_dim: int, cfg: ModelConfig, is_last: bool, schema=None
) -> torch.nn.Module:
    return SAGEConv(in_dim, out_dim, cfg.aggregator)
