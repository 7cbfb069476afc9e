"""GCN (Kipf & Welling): symmetric normalisation with self-loops."""

from __future__ import annotations

import torch

from gnnrun.models.registry import BLOCK_MESSAGES, LAYERS, ModelConfig
from gnnrun.ops.aggregate import aggregate_normalized
from gnnrun.ops.block import Block
from gnnrun.ops.precision import factor_dtype


class GCNConv(torch.nn.Module):
    """out_v = sum over u in N(v) + {v} of x_u W / sqrt((d_u + 1)(d_v + 1)) + b.

    On the full graph d is the degree, which is Kipf & Welling's
    D^-1/2 (A + I) D^-1/2. On a sampled block, d_v is v's in-degree in the
    block and d_u the number of block edges leaving u, as DGL's GraphConv does.
    The narrower side is aggregated: the linear map goes first when it narrows
    the features, last when it widens them (the normalisation is per row, so
    both orders give the same result).
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(in_dim, out_dim, bias=False)
        # Glorot's initialisation, as Kipf & Welling's GCN and GAE (and PyG's GCNConv):
        # torch's default for a Linear draws weights about 2.5 times smaller, and GAE's
        # inner products then start near 0 and train slower (Cora's test ROC-AUC after
        # its 200 epochs, one seed: 0.878, against 0.905 with Glorot's).
        torch.nn.init.xavier_uniform_(self.linear.weight)
        self.bias = torch.nn.Parameter(torch.zeros(out_dim))
        self.project_first = out_dim < in_dim

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        return self.propagate(block, self.transform(x))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """What the layer computes from each vertex's row alone (gnnrun.models.registry)."""
        return self.linear(x) if self.project_first else x

    def propagate(self, block: Block, rows: torch.Tensor) -> torch.Tensor:
        if self.project_first:
            return gcn_aggregate(block, rows) + self.bias
        return torch.addmm(self.bias, gcn_aggregate(block, rows), self.linear.weight.T)


def gcn_aggregate(block: Block, rows: torch.Tensor) -> torch.Tensor:
    """sum over u in N(v) + {v} of rows_u / sqrt((d_u + 1)(d_v + 1)): GCN's normalised
    aggregation with self-loops, without the linear map."""
    dtype = factor_dtype(rows)  # float32 factors for bfloat16 rows
    norm_src = (block.graph_out_degrees().to(dtype) + 1.0).rsqrt()
    norm_dst = (block.graph_in_degrees().to(dtype) + 1.0).rsqrt()
    return aggregate_normalized(block, rows, norm_src, norm_dst)


class GCNMessage(torch.nn.Module):
    """The pre-normalised block's GCN message (gnnrun.models.gnn): GCN's normalised
    aggregation with self-loops, no weights (Platonov et al. add the self-loops to the
    graph, and the degrees count them, for GCN). The block's feed-forward network's first
    linear map is GCNConv's."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.out_dim = width

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        return gcn_aggregate(block, x)


@LAYERS.register("gcn")
def gcn_layer(
    in_dim: int, out_dim: int, cfg: ModelConfig, is_last: bool, schema=None
) -> torch.nn.Module:
    return GCNConv(in_dim, out_dim)


@BLOCK_MESSAGES.register("gcn")
def gcn_message(width: int, cfg: ModelConfig) -> torch.nn.Module:
    return GCNMessage(width)
