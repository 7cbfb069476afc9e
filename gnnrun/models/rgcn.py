"""Relational layers for heterogeneous graphs: RGCN (Schlichtkrull et al.) and a
heterogeneous GraphSAGE (one SAGE per relation, summed, as DGL's HeteroGraphConv).

RGCN, for destination v, relations r, N_r(v) v's in-neighbours by relation r:

    h'_v = W_0 h_v + b + sum_r mean_{u in N_r(v)} h_u W_r

with a self-loop weight W_0 and the relation weights W_r decomposed to share
parameters across relations (`model.decomposition`):

- `basis`: W_r = sum_b a_rb V_b over `model.num_bases` bases V_b [in, out];
- `block_diagonal`: W_r = diag(Q_r1, ..., Q_rk), k = `model.num_blocks` blocks
  of [in / k, out / k] (in and out must be multiples of k);
- `none`: a full W_r per relation.

The means of all relations come from one aggregation over rows `v * R + r`
(gnnrun.ops.block.Block.relation_rows), which reads each edge once; the
[num_dst, R * in] means then meet the stacked [R * in, out] weights in one
GEMM. On a homogeneous graph (one relation) RGCN is W_0 h_v + mean W_1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnrun.config import check
from gnnrun.data.hetero import HeteroSchema
from gnnrun.models.registry import LAYERS, ModelConfig
from gnnrun.models.sage import SageConfig, SAGEConv
from gnnrun.ops.aggregate import aggregate
from gnnrun.ops.block import Block

DECOMPOSITIONS = ("basis", "block_diagonal", "none")


@dataclass
class RGCNConfig(ModelConfig):
    decomposition: str = "basis"
    num_bases: int = 2  # basis: shared by all relations (capped at the relation count)
    num_blocks: int = 4  # block_diagonal: blocks per relation weight

    def validate(self) -> None:
        super().validate()
        check(
            self.decomposition in DECOMPOSITIONS,
            f"model.decomposition {self.decomposition!r}: choose one of {', '.join(DECOMPOSITIONS)}",
        )
        check(self.num_bases >= 1, "model.num_bases must be at least 1")
        check(self.num_blocks >= 1, "model.num_blocks must be at least 1")

    def check_widths(self, widths: list[int]) -> None:
        if self.decomposition == "block_diagonal":
            check(
                all(w % self.num_blocks == 0 for w in widths),
                f"model.num_blocks={self.num_blocks} must divide every layer's width "
                f"({' -> '.join(map(str, widths))}, the last the classes): choose a divisor "
                "of them all, or model.decomposition=basis",
            )


class RGCNConv(torch.nn.Module):
    """One RGCN layer (module docstring)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_relations: int,
        decomposition: str,
        num_bases: int,
        num_blocks: int,
    ) -> None:
        super().__init__()
        self.num_relations, self.decomposition = num_relations, decomposition
        self.in_dim, self.out_dim = in_dim, out_dim
        self.self_loop = torch.nn.Linear(in_dim, out_dim)
        gain = torch.nn.init.calculate_gain("relu")
        if decomposition == "basis":
            bases = min(num_bases, num_relations)
            self.bases = torch.nn.Parameter(torch.empty(bases, in_dim, out_dim))
            self.coefficients = torch.nn.Parameter(torch.empty(num_relations, bases))
            torch.nn.init.xavier_uniform_(self.bases, gain=gain)
            torch.nn.init.xavier_uniform_(self.coefficients, gain=gain)
        elif decomposition == "block_diagonal":
            if in_dim % num_blocks or out_dim % num_blocks:
                raise ValueError(
                    f"model.num_blocks={num_blocks} must divide every layer's input and output "
                    f"width ({in_dim} -> {out_dim}): choose a divisor of both, or "
                    "model.decomposition=basis"
                )
            self.blocks = torch.nn.Parameter(
                torch.empty(num_relations, num_blocks, in_dim // num_blocks, out_dim // num_blocks)
            )
            torch.nn.init.xavier_uniform_(self.blocks, gain=gain)
        else:
            self.weight = torch.nn.Parameter(torch.empty(num_relations, in_dim, out_dim))
            torch.nn.init.xavier_uniform_(self.weight, gain=gain)

    def relation_weights(self) -> torch.Tensor:
        """W_r of every relation: [R, in, out]."""
        if self.decomposition == "basis":
            return torch.einsum("rb,bio->rio", self.coefficients, self.bases)
        if self.decomposition == "block_diagonal":
            return torch.stack([torch.block_diag(*blocks) for blocks in self.blocks])
        return self.weight

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        out = self.self_loop(x[: block.num_dst])
        # Every relation's mean in one aggregation, over rows v * R + r; then
        # [num_dst, R * in] @ [R * in, out] sums the relations' products in one GEMM.
        means = aggregate(block.relation_rows(self.num_relations), x, "mean")
        means = means.reshape(block.num_dst, self.num_relations * self.in_dim).to(out.dtype)
        weights = self.relation_weights().reshape(-1, self.out_dim).to(out.dtype)
        return out.addmm_(means, weights)


class HeteroSAGEConv(torch.nn.Module):
    """A SAGE layer per relation; a destination sums those of the relations into its type."""

    def __init__(self, in_dim: int, out_dim: int, aggregator: str, relation_dst: list[int]) -> None:
        super().__init__()
        self.relation_dst = relation_dst  # destination type of each relation
        self.convs = torch.nn.ModuleList(
            SAGEConv(in_dim, out_dim, aggregator) for _ in relation_dst
        )
        self.out_dim = out_dim

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        relations = block.relation_blocks(len(self.convs))
        dst_types = None if block.node_types is None else block.node_types[: block.num_dst]
        # Summed in float32 at least (bfloat16 terms under autocast).
        out = x.new_zeros(
            block.num_dst, self.out_dim, dtype=torch.promote_types(x.dtype, torch.float32)
        )
        for conv, relation, dst_type in zip(self.convs, relations, self.relation_dst, strict=True):
            rows = (
                torch.arange(block.num_dst, device=block.device)
                if dst_types is None
                else torch.nonzero(dst_types == dst_type).squeeze(1)
            )
            if rows.numel():
                out = out.index_add(0, rows, conv(relation, x)[rows].to(out.dtype))
        return out


def _relation_dst(schema: HeteroSchema | None) -> list[int]:
    return [0] if schema is None else schema.relation_types()[1].tolist()


@LAYERS.register("rgcn", RGCNConfig)
def rgcn_layer(
    in_dim: int, out_dim: int, cfg: RGCNConfig, is_last: bool, schema: HeteroSchema | None
) -> torch.nn.Module:
    num_relations = 1 if schema is None else schema.num_relations
    return RGCNConv(
        in_dim, out_dim, num_relations, cfg.decomposition, cfg.num_bases, cfg.num_blocks
    )


@LAYERS.register("hetero_sage", SageConfig)
def hetero_sage_layer(
    in_dim: int, out_dim: int, cfg: ModelConfig, is_last: bool, schema: HeteroSchema | None
) -> torch.nn.Module:
    return HeteroSAGEConv(in_dim, out_dim, cfg.aggregator, _relation_dst(schema))
