"""Sum and mean neighbour aggregation over a Block, with autograd.

`aggregate(block, x, "sum")[v]` is the sum of `x[u]` over the in-neighbours u
of destination v (`"mean"`: divided by v's in-degree; 0 for a vertex without
any). The forward pass is the native kernel in kernels/aggregate.cpp (cache
blocked, OpenMP); the backward pass is the same kernel over the transposed CSR,
computed once per Block and kept on it (a symmetric Block is its own
transpose). `aggregate_with_dst` also returns the
destination rows of x (SAGE's self term) with a single gradient buffer for x;
`aggregate_normalized` is GCN's propagation (self loop and degree scaling) in
the same single pass. A bfloat16 x of 16 to 256 columns stays bfloat16 (the
kernel sums in float32 and rounds each output once); any other bfloat16 x is
taken as float32 (gnnrun.ops.precision). `aggregate_reference` is the
pure-PyTorch oracle.

Off the CPU (GPU ranks), and on the CPU where the kernel cannot be built, the
aggregation is a sparse CSR product through torch (`sparse_aggregate`: cuSPARSE
on a GPU, MKL's sparse BLAS or torch's own loop on a CPU), the backward pass the
product with the transposed CSR; nothing needs a CUDA compiler. Both sparse
matrices are built once per Block and dtype and kept on it. The tests run this
path on CPU tensors against the native kernels (GNNRUN_NO_NATIVE=1 makes every
run take it).

On a vertex-cut part (a Block with a `completion`), the part's edges give a
split vertex only a partial sum: the completion adds its clones' partial sums
(DRPA), and `mean` divides by the vertex's degree in the whole graph.

A Block with a `sharded` aggregation (SAR's edge-cut parts) is handed to it:
it adds the in-edges from other ranks' vertices. `aggregate_with_dst` and
`aggregate_normalized` then take their composite path, whose one aggregation
is such a sum (GCN's source scaling happens on each source's own rank).
"""

from __future__ import annotations

import math

import torch

from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op
from gnnrun.ops.precision import factor_dtype, widened
from gnnrun.ops.spmm import csr_matrix

REDUCES = ("sum", "mean")
NATIVE_DTYPES = (torch.float32, torch.float64)
BF16_COLUMNS = range(16, 257)  # bfloat16 rows the kernel sums in registers, in float32


def aggregate(block: Block, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """Aggregate source features `x` [num_src, ...] into destination rows [num_dst, ...]."""
    _check(block, x, reduce)
    x = _kernel_input(block, x, "csr_aggregate")
    if block.sharded is not None:
        return block.sharded.aggregate(block, x, reduce)
    if block.completion is None:
        return local_aggregate(block, x, reduce)
    with block.completion.local_phase():
        partial = local_aggregate(block, x, "sum")
    total = block.completion(partial)
    if reduce == "sum":
        return total
    degree = block.graph_in_degrees().clamp(min=1).to(x.dtype)
    return total / degree.reshape(-1, *([1] * (x.dim() - 1)))


def local_aggregate(block: Block, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """Aggregate over the block's own edges only."""
    forward = native_op("csr_aggregate", "aggregate")
    if forward is None or not _kernel_takes(x) or x.device.type != "cpu":
        return sparse_aggregate(block, widened(x), reduce)
    out = _Aggregate.apply(block, x.flatten(1), reduce == "mean")
    # Not a view when x is a matrix: a completion adds into this sum in place, and
    # autograd would wrap an in-place change of a view in copies of the whole sum.
    return out if x.dim() == 2 else out.reshape((block.num_dst, *x.shape[1:]))


def aggregate_with_dst(
    block: Block, x: torch.Tensor, reduce: str = "sum"
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(aggregate(block, x, reduce), x[:block.num_dst])`, sharing one gradient buffer for x.

    What SAGE's self term needs. Taken apart, autograd gives
    the slice its own zero-filled [num_src, ...] gradient and then adds the two
    [num_src, ...] gradients; here the backward adds the destination rows'
    gradient into the aggregation's gradient in place (num_dst rows).
    """
    _check(block, x, reduce)
    x = _kernel_input(block, x, "csr_aggregate")
    fused = _native_applies("csr_aggregate", block, x)
    if not (fused and x.requires_grad and torch.is_grad_enabled()):
        return aggregate(block, x, reduce), x[: block.num_dst]
    flat = x.flatten(1)
    out, dst = _AggregateWithDst.apply(block, flat, reduce == "mean")
    return out.reshape((block.num_dst, *x.shape[1:])), dst.reshape((block.num_dst, *x.shape[1:]))


def aggregate_normalized(
    block: Block, x: torch.Tensor, pre: torch.Tensor | None, post: torch.Tensor
) -> torch.Tensor:
    """`post[v] * (pre[v] x[v] + sum over in-neighbours u of pre[u] x[u])` (`pre` None: 1).

    GCN's propagation (pre, post: inverse square roots of degree + 1) and
    DistGNN's GraphSAGE-gcn (post = 1 / (in-degree + 1)). Natively one pass
    each way, against four elementwise passes over [num_src, F] for the
    scaled copy, the self term and the row scaling, and their gradients. On a
    vertex-cut part the completion must see the plain sum, and the self term
    counts once per vertex, not once per clone: that takes the separate passes.
    """
    _check(block, x, "sum")
    x = _kernel_input(block, x, "csr_aggregate_normalized")
    if not _native_applies("csr_aggregate_normalized", block, x):
        return _aggregate_normalized_composite(block, x, pre, post)
    out = _AggregateNormalized.apply(block, x.flatten(1), pre, post)
    return out.reshape((block.num_dst, *x.shape[1:]))


def _native_applies(op: str, block: Block, x: torch.Tensor) -> bool:
    """Whether a fused native op serves: built, a block with neither completion nor remote
    shards, CPU x of a dtype and width the kernel takes."""
    return (
        native_op(op, "aggregate") is not None
        and block.completion is None
        and block.sharded is None
        and _kernel_takes(x)
        and x.device.type == "cpu"
    )


def _kernel_takes(x: torch.Tensor) -> bool:
    if x.dtype == torch.bfloat16:
        return math.prod(x.shape[1:]) in BF16_COLUMNS
    return x.dtype in NATIVE_DTYPES


def _kernel_input(block: Block, x: torch.Tensor, op: str) -> torch.Tensor:
    """x as the aggregation takes it: bfloat16 kept where the native op reads it, widened
    to float32 elsewhere."""
    if x.dtype == torch.bfloat16 and not _native_applies(op, block, x):
        return widened(x)
    return x


def _aggregate_normalized_composite(block, x, pre, post):
    x = widened(x)
    column = (-1, *([1] * (x.dim() - 1)))
    h = x if pre is None else x * pre.to(x.dtype).reshape(column)
    total, h_dst = aggregate_with_dst(block, h, "sum")
    return (total + h_dst) * post.to(x.dtype).reshape(column)


def aggregate_reference(block: Block, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """index_add_ over the edges: slow, obviously right, differentiable by autograd."""
    _check(block, x, reduce)
    dst = block.dst_of_edges()
    messages = x.index_select(0, block.indices.long())
    out = x.new_zeros((block.num_dst, *x.shape[1:])).index_add_(0, dst, messages)
    if reduce == "mean":
        degree = block.in_degrees().clamp(min=1).to(x.dtype)
        out = out / degree.reshape(-1, *([1] * (x.dim() - 1)))
    return out


def sparse_aggregate(block: Block, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """`aggregate` over the block's own edges as a torch sparse CSR product, on any device."""
    _check(block, x, reduce)
    out = _SparseAggregate.apply(block, x.flatten(1), reduce == "mean")
    return out if x.dim() == 2 else out.reshape((block.num_dst, *x.shape[1:]))


def _sparse_matrices(block: Block, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, A^T) of the block as sparse CSR tensors of ones in `dtype` on its device,
    A being num_dst x num_src; kept on the block (per dtype)."""
    cache = getattr(block, "_sparse", None)
    if cache is None or cache[0] is not block.indptr or cache[1] is not block.indices:
        cache = (block.indptr, block.indices, {})
        object.__setattr__(block, "_sparse", cache)
    if dtype not in cache[2]:
        indptr_t, indices_t = transposed_csr(block)
        ones = torch.ones(block.num_edges, dtype=dtype, device=block.device)
        cache[2][dtype] = (
            csr_matrix(block.indptr, block.indices, ones, (block.num_dst, block.num_src)),
            csr_matrix(indptr_t, indices_t, ones, (block.num_src, block.num_dst)),
        )
    return cache[2][dtype]


class _SparseAggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block: Block, x: torch.Tensor, mean: bool) -> torch.Tensor:
        ctx.block, ctx.inv_degree = block, None
        matrix, _ = _sparse_matrices(block, x.dtype)
        out = matrix @ x.contiguous()
        if mean:
            ctx.inv_degree = 1.0 / block.in_degrees().clamp(min=1).to(x.dtype).unsqueeze(1)
            out.mul_(ctx.inv_degree)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        if not ctx.needs_input_grad[1]:
            return None, None, None
        if ctx.inv_degree is not None:
            grad_out = grad_out * ctx.inv_degree
        _, transposed = _sparse_matrices(ctx.block, grad_out.dtype)
        return None, transposed @ grad_out.contiguous(), None


def transposed_csr(block: Block) -> tuple[torch.Tensor, torch.Tensor]:
    """(indptr_t, indices_t) of the block's out-CSR, computed once and kept on the block;
    a symmetric block's own CSR."""
    if block.symmetric:
        return block.indptr, block.indices
    cached = getattr(block, "_transposed", None)
    if cached is not None and cached[0] is block.indptr and cached[1] is block.indices:
        return cached[2]
    op = native_op("csr_transpose", "aggregate")
    if op is not None and block.device.type == "cpu":
        indptr_t, indices_t, _ = op(block.indptr, _contiguous(block.indices), block.num_src)
        result = (indptr_t, indices_t)  # not the edge permutation: nothing here needs it
    else:
        indptr_t, indices_t, _ = transposed_edges(block)
        result = (indptr_t, indices_t)
    # Not a dataclass field: stays out of eq/repr; replaced arrays invalidate it.
    object.__setattr__(block, "_transposed", (block.indptr, block.indices, result))
    return result


def transposed_edges(block: Block) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indptr_t, indices_t, permutation) of the block's out-CSR with torch's sort on the
    block's device: edge `permutation[i]` of the block is edge i of the transpose, the
    edges of a source in their CSR order (a stable sort: the same on every run)."""
    cached = getattr(block, "_transposed_edges", None)
    if cached is not None and cached[0] is block.indptr and cached[1] is block.indices:
        return cached[2]
    perm = torch.sort(block.indices.long(), stable=True).indices
    counts = torch.bincount(block.indices.long(), minlength=block.num_src)
    indptr_t = torch.zeros(block.num_src + 1, dtype=torch.int64, device=block.device)
    torch.cumsum(counts, 0, out=indptr_t[1:])
    result = (indptr_t, block.dst_of_edges()[perm].to(block.indices.dtype), perm)
    object.__setattr__(block, "_transposed_edges", (block.indptr, block.indices, result))
    return result


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block: Block, x: torch.Tensor, mean: bool) -> torch.Tensor:
        ctx.block = block
        ctx.mean = mean
        ctx.num_src = x.shape[0]
        op = native_op("csr_aggregate", "aggregate")
        return op(block.indptr, _contiguous(block.indices), x.contiguous(), mean)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        if not ctx.needs_input_grad[1]:
            return None, None, None
        return None, _aggregate_backward(ctx.block, grad_out, ctx.mean), None


class _AggregateWithDst(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block: Block, x: torch.Tensor, mean: bool):
        ctx.block = block
        ctx.mean = mean
        ctx.src_shape = x.shape
        ctx.set_materialize_grads(False)
        op = native_op("csr_aggregate", "aggregate")
        out = op(block.indptr, _contiguous(block.indices), x.contiguous(), mean)
        return out, x[: block.num_dst]

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor | None, grad_dst: torch.Tensor | None):
        if not ctx.needs_input_grad[1]:
            return None, None, None
        if grad_out is not None:
            grad_x = _aggregate_backward(ctx.block, grad_out, ctx.mean)  # a new tensor: ours
        elif grad_dst is not None:
            grad_x = grad_dst.new_zeros(ctx.src_shape)
        else:
            return None, None, None
        if grad_dst is not None:
            grad_x[: ctx.block.num_dst].add_(grad_dst)
        return None, grad_x, None


class _AggregateNormalized(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block: Block, x: torch.Tensor, pre, post) -> torch.Tensor:
        ctx.block, ctx.pre, ctx.post = block, pre, post
        op = native_op("csr_aggregate_normalized", "aggregate")
        return op(block.indptr, _contiguous(block.indices), x.contiguous(), pre, post)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        if not ctx.needs_input_grad[1]:
            return None, None, None, None
        # d out[v] / d x[u] = post[v] pre[u] for u in N(v) + {v}: the same
        # operation over the transposed CSR, pre and post swapped.
        indptr_t, indices_t = transposed_csr(ctx.block)
        op = native_op("csr_aggregate_normalized", "aggregate")
        grad_x = op(indptr_t, indices_t, grad_out.contiguous(), ctx.post, ctx.pre)
        return None, grad_x, None, None


def _aggregate_backward(block: Block, grad_out: torch.Tensor, mean: bool) -> torch.Tensor:
    """The gradient for x of aggregate(block, x): the kernel over the transposed CSR."""
    indptr_t, indices_t = transposed_csr(block)
    grad_out = grad_out.contiguous()
    if mean:
        inv_degree = 1.0 / block.in_degrees().clamp(min=1).to(factor_dtype(grad_out))
        op = native_op("csr_aggregate_scaled", "aggregate")
        return op(indptr_t, indices_t, grad_out, inv_degree)
    op = native_op("csr_aggregate", "aggregate")
    return op(indptr_t, indices_t, grad_out, False)


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _check(block: Block, x: torch.Tensor, reduce: str) -> None:
    if reduce not in REDUCES:
        raise ValueError(f"reduce must be one of {REDUCES}, not {reduce!r}")
    if x.dim() < 1 or x.shape[0] != block.num_src:
        raise ValueError(
            f"x has {x.shape[0] if x.dim() else 0} rows, the block {block.num_src} sources"
        )
