"""Native sum/mean aggregation equals the index_add_ reference, forward and backward."""

from __future__ import annotations

import pytest
import torch

from gnnrun.ops import aggregate as agg
from gnnrun.ops.block import Block
from gnnrun.ops.native import load_kernel_file, native_op

NATIVE = native_op("csr_aggregate", "aggregate") is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="kernels/aggregate.cpp cannot be built here")


def random_block(
    num_dst: int,
    num_src: int,
    seed: int = 0,
    index_dtype: torch.dtype = torch.int64,
    sort_rows: bool = True,
) -> Block:
    """Rows of 0 to 12 edges (many empty), one row of very high degree, self-loops, duplicates."""
    g = torch.Generator().manual_seed(seed)
    degree = torch.randint(0, 13, (num_dst,), generator=g)
    degree[torch.rand(num_dst, generator=g) < 0.2] = 0  # plenty of empty rows
    degree[num_dst // 3] = 40 * num_src  # a hub: every source many times over
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(degree, 0, out=indptr[1:])
    indices = torch.randint(0, num_src, (int(indptr[-1]),), generator=g)
    # Self-loops (destination v is source v) and duplicates of a row's first edge.
    for v in range(0, num_dst, 5):
        lo, hi = int(indptr[v]), int(indptr[v + 1])
        if hi - lo >= 3:
            indices[lo] = v
            indices[lo + 1] = indices[lo + 2]
    if sort_rows:
        for v in range(num_dst):
            lo, hi = int(indptr[v]), int(indptr[v + 1])
            indices[lo:hi] = torch.sort(indices[lo:hi]).values
    block = Block(indptr, indices.to(index_dtype), num_src)
    block.validate()
    return block


def features(block: Block, width: int, dtype=torch.float32, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(block.num_src, width, generator=g, dtype=dtype)


def close(a: torch.Tensor, b: torch.Tensor, terms: int = 1) -> None:
    """Compare with a float64 result: a float32 sum of `terms` values is off by ~sqrt(terms) ulps
    of its partial sums, which grow with the result (a row that gathers the same sources over
    and over, as the hub does, sums them in order, one edge after another)."""
    atol = 1e-4 * max(1.0, terms**0.5)
    rtol = max(1e-5, 2.5e-6 * terms**0.5)
    torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol)


def longest_row(block: Block) -> int:
    return int(block.in_degrees().max())


def reference(block: Block, x: torch.Tensor, reduce: str) -> torch.Tensor:
    return agg.aggregate_reference(block, x.double(), reduce)


@needs_native
@pytest.mark.parametrize("reduce", ["sum", "mean"])
# 1 and 1024: column tiles; 16 to 256: in registers, 17, 47, 127 and 250 with an overlapping
# last vector.
@pytest.mark.parametrize("width", [1, 16, 17, 47, 127, 128, 250, 256, 1024])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_native_matches_reference(reduce, width, index_dtype):
    block = random_block(60, 90, seed=width, index_dtype=index_dtype)  # bipartite
    x = features(block, width).requires_grad_()
    x_ref = x.detach().double().requires_grad_()
    out = agg.aggregate(block, x, reduce)
    ref = agg.aggregate_reference(block, x_ref, reduce)
    close(out, ref, longest_row(block))
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad.double())
    close(x.grad, x_ref.grad, int(torch.bincount(block.indices.long()).max()))


@needs_native
@pytest.mark.parametrize("sort_rows", [True, False])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [37, 300])  # one column tile; three (128 + 128 + 44)
def test_cache_blocks_give_the_same_result(sort_rows, index_dtype, width):
    op = native_op("csr_aggregate", "aggregate")
    block = random_block(200, 333, seed=3, index_dtype=index_dtype, sort_rows=sort_rows)
    x = features(block, width)
    for mean in (False, True):
        ref = reference(block, x, "mean" if mean else "sum")
        for block_rows in (7, 64, 332, 333, 10_000):
            close(op(block.indptr, block.indices, x, mean, block_rows), ref, longest_row(block))


@needs_native
def test_scaled_aggregation():
    op = native_op("csr_aggregate_scaled", "aggregate")
    block = random_block(50, 80, seed=4)
    x = features(block, 150)  # in registers (an overlapping last vector) when not blocked
    scale = torch.rand(block.num_src)
    for block_rows in (0, 9, 10_000):
        close(
            op(block.indptr, block.indices, x, scale, block_rows),
            reference(block, x * scale[:, None], "sum"),
            longest_row(block),
        )


@needs_native
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_transpose_is_a_stable_counting_sort(index_dtype):
    block = random_block(70, 100, seed=5, index_dtype=index_dtype)
    op = native_op("csr_transpose", "aggregate")
    _, _, perm = op(block.indptr, block.indices, block.num_src)
    indptr_t, indices_t = agg.transposed_csr(block)
    src = block.indices.long()
    expected_perm = torch.sort(src, stable=True).indices
    assert torch.equal(perm, expected_perm)
    assert torch.equal(indices_t.long(), block.dst_of_edges()[expected_perm])
    assert indices_t.dtype == index_dtype
    assert torch.equal(indptr_t[1:] - indptr_t[:-1], torch.bincount(src, minlength=100))
    assert agg.transposed_csr(block)[0] is indptr_t  # cached on the block


def symmetric_block(n: int = 80, seed: int = 6) -> Block:
    """An undirected graph's in-CSR: both directions of every edge, rows sorted."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (400,), generator=g)
    dst = torch.randint(0, n, (400,), generator=g)
    keys = torch.unique(torch.cat([dst * n + src, src * n + dst]))  # sorted by (dst, src)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(keys // n, minlength=n), 0, out=indptr[1:])
    return Block(indptr, keys % n, n, symmetric=True)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_a_symmetric_block_is_its_own_transpose(reduce):
    block = symmetric_block()
    block.validate()
    assert agg.transposed_csr(block) == (block.indptr, block.indices)
    plain = Block(block.indptr, block.indices, block.num_src)
    assert all(
        torch.equal(a, b)
        for a, b in zip(agg.transposed_csr(plain), (block.indptr, block.indices), strict=True)
    )
    x = features(block, 32).requires_grad_()
    grads = []
    for b in (block, plain):
        out = agg.aggregate(b, x, reduce)
        grads.append(torch.autograd.grad(out, x, torch.ones_like(out))[0])
    torch.testing.assert_close(grads[0], grads[1])


def test_a_block_wrongly_marked_symmetric_is_refused():
    block = random_block(40, 40, seed=7)
    with pytest.raises(ValueError, match="not its own transpose"):
        Block(block.indptr, block.indices, 40, symmetric=True).validate()


@needs_native
def test_odd_shapes():
    empty = Block(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 5)
    x = torch.randn(5, 3, requires_grad=True)
    for reduce in ("sum", "mean"):
        out = agg.aggregate(empty, x, reduce)
        assert torch.equal(out, torch.zeros(3, 3))
        out.sum().backward()
        assert torch.equal(x.grad, torch.zeros(5, 3))
        x.grad = None
    block = random_block(10, 12, seed=6)
    x3 = torch.randn(12, 2, 3)  # trailing dims are flattened and restored
    close(agg.aggregate(block, x3, "mean"), agg.aggregate_reference(block, x3, "mean"))
    with pytest.raises(ValueError):
        agg.aggregate(block, torch.randn(11, 2))
    with pytest.raises(ValueError):
        agg.aggregate(block, torch.randn(12, 2), "max")


@needs_native
@pytest.mark.parametrize("max_degree", [4, pytest.param(16, marks=pytest.mark.slow)])
def test_large_inputs_in_huge_pages(max_degree):
    """x and the output above 32 MiB: x is staged in huge pages only with >= 8 edges per source."""
    n, width = 140_000, 64
    g = torch.Generator().manual_seed(9)
    degree = torch.randint(max_degree // 2, max_degree + 1, (n,), generator=g)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(degree, 0, out=indptr[1:])
    block = Block(indptr, torch.randint(0, n, (int(indptr[-1]),), generator=g), n)
    x = torch.randn(n, width, generator=g, requires_grad=True)
    for reduce in ("sum", "mean"):
        out = agg.aggregate(block, x, reduce)
        close(out, reference(block, x.detach(), reduce))
        (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
        (expected,) = torch.autograd.grad(
            agg.aggregate_reference(block, x, reduce), x, torch.ones_like(out)
        )
        close(grad, expected, 10)
        out.add_(1)  # an ordinary, writable tensor


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("use", ["both", "aggregate", "dst"])
def test_aggregate_with_dst(reduce, use):
    """Same values and x gradient as aggregate() and a slice, whichever outputs are used."""
    block = random_block(20, 30, seed=10)
    x = features(block, 5).requires_grad_()
    weights = torch.randn(block.num_dst, 5), torch.randn(block.num_dst, 5)

    def loss(out, dst):
        terms = {"both": [out, dst], "aggregate": [out], "dst": [dst]}[use]
        return sum((t * w).sum() for t, w in zip(terms, weights, strict=False))

    out, dst = agg.aggregate_with_dst(block, x, reduce)
    (grad,) = torch.autograd.grad(loss(out, dst), x)
    expected_out, expected_dst = agg.aggregate(block, x, reduce), x[: block.num_dst]
    (expected,) = torch.autograd.grad(loss(expected_out, expected_dst), x)
    close(out, expected_out, longest_row(block))
    assert torch.equal(dst, expected_dst)
    close(grad, expected, longest_row(block))
    with torch.no_grad():
        out, dst = agg.aggregate_with_dst(block, x, reduce)
    close(out, expected_out, longest_row(block))


@needs_native
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_gradcheck(reduce):
    block = random_block(9, 13, seed=7)
    x = torch.randn(block.num_src, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: agg.aggregate(block, t, reduce), (x,))


def test_reference_fallback(monkeypatch):
    block = random_block(30, 40, seed=8)
    x = features(block, 8).requires_grad_()
    expected = {r: agg.aggregate_reference(block, x, r).detach() for r in ("sum", "mean")}
    monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
    load_kernel_file.cache_clear()
    try:
        assert native_op("csr_aggregate", "aggregate") is None
        for reduce, ref in expected.items():
            out = agg.aggregate(block, x, reduce)  # the sparse product (two float32 sums)
            close(out, ref, longest_row(block))
            out.sum().backward()
        indptr_t, indices_t = agg.transposed_csr(Block(block.indptr, block.indices, 40))
        perm = torch.sort(block.indices, stable=True).indices
        assert torch.equal(indices_t, block.dst_of_edges()[perm])
    finally:
        monkeypatch.delenv("GNNRUN_NO_NATIVE")
        load_kernel_file.cache_clear()


def normalized_reference(block: Block, x: torch.Tensor, pre, post) -> torch.Tensor:
    """post[v] (pre[v] x[v] + sum over u in N(v) of pre[u] x[u]) in float64, from the oracle."""
    h = x.double() if pre is None else x.double() * pre.double()[:, None]
    total = agg.aggregate_reference(block, h, "sum") + h[: block.num_dst]
    return total * post.double()[:, None]


@needs_native
@pytest.mark.parametrize("with_pre", [True, False])
@pytest.mark.parametrize("width", [16, 47, 300])  # in registers (47: overlapping); three tiles
def test_normalized_matches_reference(with_pre, width):
    block = random_block(70, 110, seed=width + with_pre)
    g = torch.Generator().manual_seed(5)
    pre = torch.rand(block.num_src, generator=g) + 0.5 if with_pre else None
    post = torch.rand(block.num_dst, generator=g) + 0.5
    x = features(block, width).requires_grad_()
    out = agg.aggregate_normalized(block, x, pre, post)
    expected = normalized_reference(block, x, pre, post)
    close(out, expected, longest_row(block))
    grad_out = torch.randn(out.shape, generator=g)
    (out * grad_out).sum().backward()
    x_ref = x.detach().double().requires_grad_()
    (normalized_reference(block, x_ref, pre, post) * grad_out.double()).sum().backward()
    close(x.grad, x_ref.grad, int(torch.bincount(block.indices, minlength=block.num_src).max()))
    op = native_op("csr_aggregate_normalized", "aggregate")
    for block_rows in (9, 64):  # cache blocks: the self term and scale come once, at the end
        blocked = op(block.indptr, block.indices, x.detach(), pre, post, block_rows)
        close(blocked, expected, longest_row(block))


@needs_native
def test_normalized_gradcheck():
    block = random_block(9, 13, seed=7)
    x = torch.randn(block.num_src, 3, dtype=torch.float64, requires_grad=True)
    pre, post = torch.rand(13, dtype=torch.float64) + 0.5, torch.rand(9, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: agg.aggregate_normalized(block, t, pre, post), (x,))
    assert torch.autograd.gradcheck(lambda t: agg.aggregate_normalized(block, t, None, post), (x,))


def test_normalized_without_native_is_the_composite(monkeypatch):
    block = random_block(20, 30, seed=9)
    x = features(block, 8)
    pre, post = torch.rand(30) + 0.5, torch.rand(20) + 0.5
    monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
    load_kernel_file.cache_clear()
    try:
        out = agg.aggregate_normalized(block, x, pre, post)
        close(out, normalized_reference(block, x, pre, post), longest_row(block))
    finally:
        monkeypatch.delenv("GNNRUN_NO_NATIVE")
        load_kernel_file.cache_clear()


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("shape", [(16,), (4, 8)])
def test_sparse_product_equals_the_native_kernel(reduce, shape):
    """The path GPU ranks take (a torch sparse CSR product, here on CPU tensors) gives the
    native kernel's output and gradient: float64, where both are exact to rounding (the
    hub row sums 1600 terms, in another order)."""
    block = random_block(50, 70, seed=11)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(block.num_src, *shape, dtype=torch.float64, generator=g).requires_grad_()
    native = agg.aggregate(block, x, reduce)
    grad = torch.randn(native.shape, dtype=torch.float64, generator=g)
    (expected,) = torch.autograd.grad(native, x, grad)
    sparse = agg.sparse_aggregate(block, x, reduce)
    (got,) = torch.autograd.grad(sparse, x, grad)
    torch.testing.assert_close(sparse, native, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert torch.autograd.gradcheck(
        lambda t: agg.sparse_aggregate(block, t, reduce),
        (x[:, :2].detach().requires_grad_(),)
        if len(shape) == 1
        else (x.detach()[:, :1, :2].contiguous().requires_grad_(),),
    )


def test_sparse_product_of_a_symmetric_block_and_of_a_moved_one():
    """A symmetric block's transpose is the block itself; a block moved with `to` keeps
    its edges (on a CPU-only machine `to(cpu)` returns the block itself)."""
    n = 40
    g = torch.Generator().manual_seed(3)
    a = torch.rand(n, n, generator=g) < 0.2
    a = a | a.T
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(a.sum(1), 0)
    block = Block(indptr, torch.nonzero(a)[:, 1], n, symmetric=True)
    block.validate()
    x = torch.randn(n, 5, dtype=torch.float64, requires_grad=True)
    out = agg.sparse_aggregate(block, x, "mean")
    torch.testing.assert_close(out, agg.aggregate_reference(block, x, "mean"))
    (grad,) = torch.autograd.grad(out.sum(), x)
    (expected,) = torch.autograd.grad(agg.aggregate_reference(block, x, "mean").sum(), x)
    torch.testing.assert_close(grad, expected)
    assert block.to(torch.device("cpu")) is block
