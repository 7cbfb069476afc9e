"""GAT attention (Velickovic et al. 2018) on a Block: edge softmax and attention aggregation.

For every edge u->v of a block and head h, with el = a_l . Wh_u (per source)
and er = a_r . Wh_v (per destination):

    alpha[u->v, h] = softmax over v's in-edges of leaky_relu(el[u, h] + er[v, h])
    out[v, h, :]   = sum_u alpha[u->v, h] * feat_src[u, h, :]

Rows without in-edges give 0. `gat_aggregate` runs the fused kernels in
kernels/gat.cpp (forward and a hand-written backward) and falls back to
`gat_aggregate_reference`, plain PyTorch autograd, when they cannot be built or
the inputs are not CPU float32/float64. Attention dropout is not part of it.
A Block with a `sharded` aggregation (SAR) is handed to it: its edge softmax
spans the in-edges from other ranks' vertices too.
"""

from __future__ import annotations

import torch

from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op
from gnnrun.ops.precision import widened

NATIVE_DTYPES = (torch.float32, torch.float64)


def edge_softmax(block: Block, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of per-edge `scores` [E, ...] over each destination's in-edges (CSR edge order).

    Numerically stable (the row max is subtracted first); differentiable by autograd.
    """
    if scores.shape[0] != block.num_edges:
        raise ValueError(f"edge_softmax: {scores.shape[0]} scores for {block.num_edges} edges")
    dst = block.dst_of_edges().to(scores.device)
    index = dst.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    row_max = torch.full(
        (block.num_dst, *scores.shape[1:]), float("-inf"), dtype=scores.dtype, device=scores.device
    )
    # Softmax is shift-invariant, so the max needs no gradient.
    row_max = row_max.scatter_reduce(0, index, scores.detach(), "amax", include_self=True)
    exp = torch.exp(scores - row_max[dst])
    denom = torch.zeros_like(row_max).index_add(0, dst, exp)
    return exp / denom[dst]


def _check_shapes(block: Block, feat_src: torch.Tensor, el: torch.Tensor, er: torch.Tensor):
    if feat_src.dim() != 3 or feat_src.shape[0] != block.num_src:
        raise ValueError(
            f"gat_aggregate: feat_src must be [num_src={block.num_src}, heads, dim], "
            f"got {tuple(feat_src.shape)}"
        )
    heads = feat_src.shape[1]
    if tuple(el.shape) != (block.num_src, heads):
        raise ValueError(
            f"gat_aggregate: el must be [num_src, heads] = {(block.num_src, heads)}, "
            f"got {tuple(el.shape)}"
        )
    if tuple(er.shape) != (block.num_dst, heads):
        raise ValueError(
            f"gat_aggregate: er must be [num_dst, heads] = {(block.num_dst, heads)}, "
            f"got {tuple(er.shape)}"
        )


def gat_aggregate_reference(
    block: Block,
    feat_src: torch.Tensor,
    el: torch.Tensor,
    er: torch.Tensor,
    negative_slope: float = 0.2,
) -> torch.Tensor:
    """Pure-PyTorch GAT aggregation (gather / edge softmax / index_add): oracle and fallback."""
    _check_shapes(block, feat_src, el, er)
    device = feat_src.device
    src = block.indices.to(device=device, dtype=torch.int64)
    dst = block.dst_of_edges().to(device)
    scores = torch.nn.functional.leaky_relu(el[src] + er[dst], negative_slope)
    alpha = edge_softmax(block, scores)
    messages = alpha.unsqueeze(-1) * feat_src[src]
    out = feat_src.new_zeros((block.num_dst, *feat_src.shape[1:]))
    return out.index_add(0, dst, messages)


class GATAggregate(torch.autograd.Function):
    """gnnrun::gat_forward / gat_backward as an autograd node (first derivatives only)."""

    @staticmethod
    def forward(ctx, indptr, indices, feat_src, el, er, negative_slope):
        forward_op = native_op("gat_forward", "gat")
        out, alpha = forward_op(indptr, indices, feat_src, el, er, float(negative_slope))
        ctx.save_for_backward(indptr, indices, feat_src, el, er, alpha)
        ctx.negative_slope = float(negative_slope)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        indptr, indices, feat_src, el, er, alpha = ctx.saved_tensors
        backward_op = native_op("gat_backward", "gat")
        grad_feat, grad_el, grad_er = backward_op(
            indptr, indices, feat_src, el, er, alpha, grad_out.contiguous(), ctx.negative_slope
        )
        needs = ctx.needs_input_grad
        return (
            None,
            None,
            grad_feat if needs[2] else None,
            grad_el if needs[3] else None,
            grad_er if needs[4] else None,
            None,
        )


def gat_aggregate(
    block: Block,
    feat_src: torch.Tensor,
    el: torch.Tensor,
    er: torch.Tensor,
    negative_slope: float = 0.2,
) -> torch.Tensor:
    """GAT attention aggregation: [num_dst, heads, dim] from feat_src [num_src, heads, dim].

    el: [num_src, heads] source logits; er: [num_dst, heads] destination logits.
    Native kernels for CPU float32/float64 (all three of one dtype); the reference otherwise.
    """
    _check_shapes(block, feat_src, el, er)
    feat_src, el, er = widened(feat_src), widened(el), widened(er)
    if block.sharded is not None:
        return block.sharded.gat_aggregate(block, feat_src, el, er, negative_slope)
    native = (
        feat_src.dtype in NATIVE_DTYPES
        and el.dtype == feat_src.dtype
        and er.dtype == feat_src.dtype
        and all(t.device.type == "cpu" for t in (feat_src, el, er))
        and native_op("gat_forward", "gat") is not None
    )
    if not native:
        return gat_aggregate_reference(block, feat_src, el, er, negative_slope)
    return GATAggregate.apply(
        block.indptr.contiguous(),
        block.indices.contiguous(),
        feat_src.contiguous(),
        el.contiguous(),
        er.contiguous(),
        negative_slope,
    )
