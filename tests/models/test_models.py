"""Models against dense formulas, on full graphs and sampled blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.data.graph import csr_from_edges
from gnnrun.models import build_model
from gnnrun.models.gcn import GCNConv
from gnnrun.models.registry import ModelConfig
from gnnrun.models.sage import SAGEConv
from gnnrun.ops.block import Block
from gnnrun.ops.sampling import sample_blocks


def random_graph(n: int = 60, m: int = 300, seed: int = 0) -> Block:
    rng = np.random.default_rng(seed)
    indptr, indices = csr_from_edges(
        rng.integers(0, n, m), rng.integers(0, n, m), n, symmetrize=True
    )
    return Block.from_csr(indptr, indices)


def dense_adjacency(block: Block) -> torch.Tensor:
    a = torch.zeros(block.num_dst, block.num_src, dtype=torch.float64)
    a[block.dst_of_edges(), block.indices] = 1.0
    return a


@pytest.mark.parametrize("in_dim,out_dim", [(5, 3), (3, 5)])  # projection first / aggregation first
def test_gcn_is_kipf_and_welling_on_the_full_graph(in_dim, out_dim):
    torch.manual_seed(0)
    block = random_graph()
    x = torch.randn(block.num_src, in_dim, dtype=torch.float64)
    layer = GCNConv(in_dim, out_dim).double()
    a_hat = dense_adjacency(block) + torch.eye(block.num_dst, dtype=torch.float64)
    d = a_hat.sum(1).rsqrt()
    expected = (d[:, None] * a_hat * d[None, :]) @ (x @ layer.linear.weight.T) + layer.bias
    assert torch.allclose(layer(block, x), expected)


@pytest.mark.parametrize("in_dim,out_dim", [(8, 3), (3, 8)])  # projection first / aggregation first
def test_sage_gcn_aggregator_matches_the_formula(in_dim, out_dim):
    torch.manual_seed(0)
    block = random_graph()
    x = torch.randn(block.num_src, in_dim, dtype=torch.float64)
    layer = SAGEConv(in_dim, out_dim, "gcn").double()
    a = dense_adjacency(block)
    mean_with_self = (a @ x + x) / (a.sum(1, keepdim=True) + 1)
    assert torch.allclose(layer(block, x), layer.neigh(mean_with_self))


@pytest.mark.parametrize("in_dim,out_dim", [(8, 3), (3, 8)])
def test_sage_mean_aggregator_matches_the_formula(in_dim, out_dim):
    torch.manual_seed(0)
    block = random_graph()
    x = torch.randn(block.num_src, in_dim, dtype=torch.float64)
    layer = SAGEConv(in_dim, out_dim, "mean").double()
    a = dense_adjacency(block)
    mean = (a @ x) / a.sum(1, keepdim=True).clamp(min=1)
    assert torch.allclose(layer(block, x), layer.self_loop(x) + layer.neigh(mean))


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_every_model_runs_full_batch_and_on_sampled_blocks_with_gradients(name):
    torch.manual_seed(0)
    block = random_graph(200, 1500)
    cfg = ModelConfig(
        name=name, hidden=16, layers=2, heads=4 if name == "gat" else 1, fanouts=[5, 5]
    )
    model = build_model(cfg, in_dim=7, num_classes=3)
    x = torch.randn(200, 7)
    full = model([block, block], x)
    assert full.shape == (200, 3)
    seeds = torch.arange(0, 200, 7)
    blocks = sample_blocks(block.indptr, block.indices, seeds, cfg.fanouts, seed=1)
    out = model(blocks, x[blocks[0].src_ids])
    assert out.shape == (seeds.numel(), 3)
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    if name == "gcn":
        return  # GCN normalises by degrees inside the block (as DGL does), not the graph's
    # With every neighbour sampled, the minibatch equals the full-batch output on the seeds.
    model.eval()
    all_blocks = sample_blocks(block.indptr, block.indices, seeds, [-1, -1], seed=1)
    assert torch.allclose(
        model(all_blocks, x[all_blocks[0].src_ids]), model([block, block], x)[seeds], atol=1e-5
    )


@pytest.mark.parametrize(
    "name, aggregator", [("sage", "mean"), ("sage", "gcn"), ("gcn", "mean"), ("gat", "mean")]
)
def test_every_model_runs_on_an_empty_minibatch(name, aggregator):
    # A rank whose part has no training vertices still runs each step (hec's pushes are collectives).
    cfg = ModelConfig(name=name, aggregator=aggregator, layers=2, hidden=8, fanouts=[2, 2], heads=2)
    model = build_model(cfg, 5, 3)
    empty = Block(torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 0)
    x = torch.zeros(0, 5, requires_grad=True)
    out = model([empty, empty], x)
    out.sum().backward()
    assert out.shape == (0, 3) and x.grad.shape == (0, 5)


def test_gat_self_loops_keep_remote_shards_and_refuse_a_completion():
    """GAT's looped block keeps a part's remote shards (sar); a vertex-cut part's completion
    it could not keep is refused rather than dropped."""
    from gnnrun.models.gat import with_self_loops

    indptr, indices = np.array([0, 1, 2]), np.array([1, 0])
    sharded = Block.from_csr(indptr, indices)
    sharded.sharded = marker = object()
    assert with_self_loops(sharded).sharded is marker
    completed = Block.from_csr(indptr, indices)
    completed.completion = object()
    with pytest.raises(ValueError, match="clone completion"):
        with_self_loops(completed)
