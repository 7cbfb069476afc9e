"""GAT attention: the native kernels (kernels/gat.cpp) and the sparse-product path (GPU ranks)
against the PyTorch reference."""

from __future__ import annotations

import pytest
import torch

from gnnrun.ops import attention
from gnnrun.ops.attention import (
    GATAggregate,
    edge_softmax,
    gat_aggregate,
    gat_aggregate_reference,
    sparse_gat_aggregate,
)
from gnnrun.ops.block import Block
from gnnrun.ops.native import load_kernel_file, native_op


@pytest.fixture(scope="module")
def native():
    if native_op("gat_forward", "gat") is None:
        pytest.skip("kernels/gat.cpp cannot be built here")
    return True


def random_block(
    num_dst: int,
    num_src: int,
    num_edges: int,
    seed: int,
    hub_degree: int = 0,
    index_dtype: torch.dtype = torch.int64,
) -> Block:
    """A random block with empty rows, self-loops and (optionally) one very high degree row."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, num_dst, (num_edges,), generator=g)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    empty = torch.arange(0, num_dst, 5)  # every fifth row has no in-edges
    keep = ~torch.isin(dst, empty)
    dst, src = dst[keep], src[keep]
    loops = torch.arange(1, num_dst, 5)  # self-loops: destination v is source v
    dst, src = torch.cat([dst, loops, loops]), torch.cat([src, loops, loops])  # and a duplicate
    if hub_degree and num_dst > 3:
        dst = torch.cat([dst, torch.full((hub_degree,), 3)])
        src = torch.cat([src, torch.randint(0, num_src, (hub_degree,), generator=g)])
    order = torch.argsort(dst, stable=True)
    dst, src = dst[order], src[order]
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    indptr[1:] = torch.bincount(dst, minlength=num_dst).cumsum(0)
    block = Block(indptr, src.to(index_dtype), num_src)
    block.validate()
    return block


def inputs(block: Block, heads: int, dim: int, dtype=torch.float32, seed: int = 0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    feat = torch.randn(block.num_src, heads, dim, generator=g, dtype=dtype)
    el = scale * torch.randn(block.num_src, heads, generator=g, dtype=dtype)
    er = scale * torch.randn(block.num_dst, heads, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (feat, el, er)]


def forward_backward(fn, block, feat, el, er, grad_out=None, slope=0.2):
    out = fn(block, feat, el, er, slope)
    if grad_out is None:
        grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        grad_out = grad_out.to(out.dtype)
    grads = torch.autograd.grad(out, (feat, el, er), grad_out)
    return out.detach(), grads, grad_out


BLOCKS = {
    "square": dict(num_dst=60, num_src=60, num_edges=400, seed=1),
    "bipartite": dict(num_dst=40, num_src=150, num_edges=500, seed=2),
    "hub": dict(num_dst=50, num_src=300, num_edges=300, seed=3, hub_degree=3000),
    "int32": dict(num_dst=30, num_src=70, num_edges=200, seed=4, index_dtype=torch.int32),
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("dim", [1, 8, 64])
def test_native_matches_reference(native, name, heads, dim):
    block = random_block(**BLOCKS[name])
    feat, el, er = inputs(block, heads, dim, scale=3.0)  # large logits: exercises the row max
    out, grads, grad_out = forward_backward(gat_aggregate, block, feat, el, er)
    ref_block = Block(block.indptr, block.indices.long(), block.num_src)
    ref_out, ref_grads, _ = forward_backward(
        gat_aggregate_reference, ref_block, feat, el, er, grad_out
    )
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    empty = block.in_degrees() == 0
    assert empty.any() and (out[empty] == 0).all()


def test_native_float64_and_slope(native):
    block = random_block(**BLOCKS["bipartite"])
    feat, el, er = inputs(block, 4, 8, dtype=torch.float64)
    out, grads, grad_out = forward_backward(gat_aggregate, block, feat, el, er, slope=0.01)
    ref_out, ref_grads, _ = forward_backward(
        gat_aggregate_reference, block, feat, el, er, grad_out, slope=0.01
    )
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("heads,dim", [(1, 1), (2, 3)])
def test_gradcheck_native(native, heads, dim):
    block = random_block(num_dst=8, num_src=12, num_edges=30, seed=5, hub_degree=10)
    feat, el, er = inputs(block, heads, dim, dtype=torch.float64)

    def fn(f, left, right):
        return GATAggregate.apply(block.indptr, block.indices, f, left, right, 0.2)

    assert torch.autograd.gradcheck(fn, (feat, el, er), eps=1e-6, atol=1e-8)


def test_edge_softmax_sums_to_one():
    block = random_block(**BLOCKS["hub"])
    scores = 50 * torch.randn(block.num_edges, 4, dtype=torch.float64)  # exp would overflow
    alpha = edge_softmax(block, scores)
    assert torch.isfinite(alpha).all() and (alpha >= 0).all()
    sums = torch.zeros(block.num_dst, 4, dtype=torch.float64).index_add(
        0, block.dst_of_edges(), alpha
    )
    nonempty = block.in_degrees() > 0
    torch.testing.assert_close(sums[nonempty], torch.ones_like(sums[nonempty]))
    assert (sums[~nonempty] == 0).all()
    # Equal to a dense per-row softmax.
    dst = block.dst_of_edges()
    v = int(torch.argmax(block.in_degrees()))
    torch.testing.assert_close(alpha[dst == v], torch.softmax(scores[dst == v], dim=0))


def test_edge_softmax_grad():
    block = random_block(num_dst=10, num_src=15, num_edges=40, seed=6)
    scores = torch.randn(block.num_edges, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: edge_softmax(block, s), (scores,))


@pytest.mark.parametrize("path", ["native", "sparse"])
def test_empty_block(request, path):
    if path == "native":
        request.getfixturevalue("native")
    aggregate = gat_aggregate if path == "native" else sparse_gat_aggregate
    block = Block(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 5)
    feat, el, er = inputs(block, 2, 3)
    out = aggregate(block, feat, el, er)
    assert out.shape == (3, 2, 3) and (out == 0).all()
    out.sum().backward()
    assert (feat.grad == 0).all() and (el.grad == 0).all() and (er.grad == 0).all()


def test_shape_errors():
    block = random_block(**BLOCKS["bipartite"])
    feat, el, er = inputs(block, 2, 3)
    with pytest.raises(ValueError, match="er must be"):
        gat_aggregate(block, feat, el, el)  # er over the sources, not the destinations
    with pytest.raises(ValueError, match="el must be"):
        gat_aggregate(block, feat, er, er)


def test_native_rejects_bad_source_ids(native):
    block = random_block(num_dst=5, num_src=5, num_edges=10, seed=7)
    feat, el, er = inputs(block, 1, 2)
    bad = block.indices.clone()
    bad[-1] = 5
    op = native_op("gat_forward", "gat")
    with pytest.raises(RuntimeError, match="outside"):
        op(block.indptr, bad, feat.detach(), el.detach(), er.detach(), 0.2)


def test_no_native_takes_the_sparse_path(monkeypatch):
    """Without the kernels (as on a GPU rank) gat_aggregate runs sparse_gat_aggregate."""
    block = random_block(**BLOCKS["square"])
    feat, el, er = inputs(block, 4, 8)
    calls = []
    sparse = attention.sparse_gat_aggregate

    def spy(*args, **kwargs):
        calls.append(1)
        return sparse(*args, **kwargs)

    monkeypatch.setattr(attention, "sparse_gat_aggregate", spy)
    monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
    load_kernel_file.cache_clear()
    try:
        assert native_op("gat_forward", "gat") is None
        out, grads, grad_out = forward_backward(gat_aggregate, block, feat, el, er)
    finally:
        monkeypatch.delenv("GNNRUN_NO_NATIVE")
        load_kernel_file.cache_clear()
    assert calls == [1]
    ref_out, ref_grads, _ = forward_backward(gat_aggregate_reference, block, feat, el, er, grad_out)
    torch.testing.assert_close(out, ref_out)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", sorted(BLOCKS))
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("dim", [1, 8, 64])
def test_sparse_matches_reference(name, heads, dim):
    block = random_block(**BLOCKS[name])
    feat, el, er = inputs(block, heads, dim, scale=3.0)
    out, grads, grad_out = forward_backward(sparse_gat_aggregate, block, feat, el, er)
    ref_out, ref_grads, _ = forward_backward(gat_aggregate_reference, block, feat, el, er, grad_out)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    empty = block.in_degrees() == 0
    assert empty.any() and (out[empty] == 0).all()


@pytest.mark.parametrize("heads,dim", [(1, 1), (3, 2)])
def test_gradcheck_sparse(heads, dim):
    block = random_block(num_dst=8, num_src=12, num_edges=30, seed=5, hub_degree=10)
    feat, el, er = inputs(block, heads, dim, dtype=torch.float64)

    def fn(f, left, right):
        return sparse_gat_aggregate(block, f, left, right, 0.1)

    assert torch.autograd.gradcheck(fn, (feat, el, er), eps=1e-6, atol=1e-8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_sparse_on_gpu_matches_cpu():
    """gat_aggregate on CUDA tensors (the sparse path, cuSPARSE) against the CPU reference,
    and the same bits on a second run (no atomics)."""
    block = random_block(**BLOCKS["hub"])
    feat, el, er = inputs(block, 4, 64, scale=3.0)
    ref_out, ref_grads, grad_out = forward_backward(gat_aggregate_reference, block, feat, el, er)
    cuda = torch.device("cuda")
    on_gpu = [t.detach().to(cuda).requires_grad_() for t in (feat, el, er)]
    # The second run hands over the CPU block: its arrays follow the features.
    runs = [
        forward_backward(gat_aggregate, b, *on_gpu, grad_out.to(cuda))
        for b in (block.to(cuda), block)
    ]
    out, grads, _ = runs[0]
    torch.testing.assert_close(out.cpu(), ref_out, rtol=1e-4, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-3, atol=1e-5)
    assert torch.equal(runs[1][0], out)
    assert all(torch.equal(a, b) for a, b in zip(runs[1][1], grads, strict=True))
