"""GAT attention (Velickovic et al. 2018) on a Block: edge softmax and attention aggregation.

For every edge u->v of a block and head h, with el = a_l . Wh_u (per source)
and er = a_r . Wh_v (per destination):

    alpha[u->v, h] = softmax over v's in-edges of leaky_relu(el[u, h] + er[v, h])
    out[v, h, :]   = sum_u alpha[u->v, h] * feat_src[u, h, :]

Rows without in-edges give 0. `gat_aggregate` runs the fused kernels in
kernels/gat.cpp (forward and a hand-written backward) on CPU float32/float64.
Elsewhere (GPU ranks, or a CPU where the kernels cannot be built) it runs
`sparse_gat_aggregate`: per head, a torch sparse CSR product with the attention
weights as values (cuSPARSE on a GPU), its backward the product with the
transposed CSR and a sampled dense product (SDDMM) for the weights' gradient,
the edge softmax and the logits' gradients as segment sums over the CSR rows.
No per-edge feature row is formed, and no sum depends on the order of atomic
additions: the products run on explicit transposes (cuSPARSE documents its
transposed products as varying between runs), so the same inputs give the same
bits on every run (the GPU test checks two runs).
`gat_aggregate_reference`, plain PyTorch autograd (every edge's message
gathered, weighted and scattered with `index_add`), is the oracle, and the path
for other dtypes (float16). Attention dropout is not part of it.
A Block with a `sharded` aggregation (SAR) is handed to it: its edge softmax
spans the in-edges from other ranks' vertices too.
"""

from __future__ import annotations

import torch

from gnnrun.ops.aggregate import transposed_edges
from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op
from gnnrun.ops.precision import widened
from gnnrun.ops.spmm import csr_matrix

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
    Native kernels for CPU float32/float64 (all three of one dtype); sparse products
    for float32/float64 elsewhere; the reference otherwise.
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
        if feat_src.dtype in NATIVE_DTYPES and el.dtype == er.dtype == feat_src.dtype:
            return sparse_gat_aggregate(block, feat_src, el, er, negative_slope)
        return gat_aggregate_reference(block, feat_src, el, er, negative_slope)
    return GATAggregate.apply(
        block.indptr.contiguous(),
        block.indices.contiguous(),
        feat_src.contiguous(),
        el.contiguous(),
        er.contiguous(),
        negative_slope,
    )


def sparse_gat_aggregate(
    block: Block,
    feat_src: torch.Tensor,
    el: torch.Tensor,
    er: torch.Tensor,
    negative_slope: float = 0.2,
) -> torch.Tensor:
    """`gat_aggregate` as torch sparse CSR products and segment sums, on any device (the
    block's arrays follow the features there, as in the reference)."""
    _check_shapes(block, feat_src, el, er)
    block = block.to(feat_src.device)
    return _SparseGATAggregate.apply(block, feat_src, el, er, float(negative_slope))


def _segment_sum(values: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
    """Sums of `values` [E, heads] over the CSR rows `indptr` (0 for an empty row), added in
    float64: a hub's thousands of softmax gradients nearly cancel, and float32 sums lose
    their last digits (a few values per edge: cheap beside the rows' products)."""
    return torch.segment_reduce(values.double(), "sum", offsets=indptr).to(values.dtype)


def _csr_edge_softmax(block: Block, scores: torch.Tensor) -> torch.Tensor:
    """`edge_softmax` with each row's max and sum as segment reductions (no atomics)."""
    dst = block.dst_of_edges()
    row_max = torch.segment_reduce(scores, "max", offsets=block.indptr)
    exp = torch.exp(scores - row_max[dst])
    return exp / _segment_sum(exp, block.indptr)[dst]


def _head_matrices(indptr, indices, values, shape) -> list[torch.Tensor]:
    """One sparse CSR matrix per head, over the same index arrays, with values[:, h]."""
    return [
        csr_matrix(indptr, indices, values[:, h].contiguous(), shape)
        for h in range(values.shape[1])
    ]


class _SparseGATAggregate(torch.autograd.Function):
    """Forward: alpha = edge softmax of leaky_relu(el[u] + er[v]); out[:, h] = A_h @ feat[:, h],
    A_h the block's CSR with alpha[:, h] as values. Backward (first derivatives only):
    d feat[:, h] = A_h^T @ d out[:, h]; d alpha[e, h] = d out[v, h] . feat[u, h] (SDDMM);
    then the softmax's and leaky_relu's derivatives, summed per destination for er and
    per source (over the transposed CSR) for el."""

    @staticmethod
    def forward(ctx, block, feat_src, el, er, negative_slope):
        src = block.indices.long()
        dst = block.dst_of_edges()
        logits = el[src] + er[dst]  # [E, heads]
        alpha = _csr_edge_softmax(block, torch.nn.functional.leaky_relu(logits, negative_slope))
        shape = (block.num_dst, block.num_src)
        out = feat_src.new_empty((block.num_dst, *feat_src.shape[1:]))
        for h, matrix in enumerate(_head_matrices(block.indptr, block.indices, alpha, shape)):
            out[:, h] = matrix @ feat_src[:, h]
        ctx.block, ctx.negative_slope = block, negative_slope
        ctx.save_for_backward(feat_src, logits, alpha)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        feat_src, logits, alpha = ctx.saved_tensors
        block = ctx.block
        indptr_t, indices_t, perm = transposed_edges(block)
        grad_feat = torch.empty_like(feat_src)
        grad_alpha = torch.empty_like(alpha)
        transposes = _head_matrices(
            indptr_t, indices_t, alpha[perm], (block.num_src, block.num_dst)
        )
        pattern = csr_matrix(
            block.indptr,
            block.indices,
            alpha.new_zeros(alpha.shape[0]),
            (block.num_dst, block.num_src),
        )
        for h, transposed in enumerate(transposes):
            grad_h = grad_out[:, h].contiguous()
            feat_h = feat_src[:, h].contiguous()
            grad_feat[:, h] = transposed @ grad_h
            grad_alpha[:, h] = torch.sparse.sampled_addmm(
                pattern, grad_h, feat_h.t(), beta=0.0
            ).values()
        # Softmax: d score = alpha * (d alpha - sum over the row of alpha * d alpha).
        dst = block.dst_of_edges()
        row_sum = _segment_sum(alpha * grad_alpha, block.indptr)
        grad_score = alpha * (grad_alpha - row_sum[dst])
        slope = torch.where(logits > 0, 1.0, ctx.negative_slope).to(logits.dtype)
        grad_logits = grad_score * slope
        grad_er = _segment_sum(grad_logits, block.indptr)
        grad_el = _segment_sum(grad_logits[perm], indptr_t)
        return None, grad_feat, grad_el, grad_er, None
