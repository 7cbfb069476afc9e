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
    cfg = ModelConfig(name=name, hidden=16, layers=2, heads=4 if name == "gat" else 1)
    model = build_model(cfg, in_dim=7, num_classes=3)
    x = torch.randn(200, 7)
    full = model([block, block], x)
    assert full.shape == (200, 3)
    seeds = torch.arange(0, 200, 7)
    blocks = sample_blocks(block.indptr, block.indices, seeds, [5, 5], seed=1)
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
    cfg = ModelConfig(name=name, aggregator=aggregator, layers=2, hidden=8, heads=2)
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


# The options around the layers (gnnrun.models.gnn), a few combinations of them.
AROUND = {
    "residual+layer": dict(residual=True, norm="layer"),
    "batch+input+output": dict(norm="batch", input_mlp=True, output_mlp=True),
    "residual+jk-cat": dict(residual=True, jk="cat"),
    "all+jk-max": dict(residual=True, norm="batch", input_mlp=True, output_mlp=True, jk="max"),
    "pre-norm-ffn+layer": dict(block="pre_norm_ffn", norm="layer", activation="gelu"),
    "pre-norm-ffn+batch": dict(block="pre_norm_ffn", norm="batch"),
}


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("options", AROUND.values(), ids=AROUND.keys())
def test_options_around_layers_layer_by_layer_equal_the_forward_pass(name, options):
    """What layer-wise inference runs (transform, then propagate; jk given the earlier
    outputs) is the forward pass, and with every neighbour sampled the minibatch equals
    the full batch on the seeds (residuals and jk read the destinations' rows first)."""
    torch.manual_seed(0)
    block = random_graph(120, 700)
    cfg = ModelConfig(name=name, hidden=8, layers=3, heads=2, **options)
    model = build_model(cfg, in_dim=6, num_classes=3).eval()
    x = torch.randn(120, 6)
    full = model([block] * 3, x)
    assert full.shape == (120, 3)
    h, outputs = x, []
    for i in range(3):
        rows = model.transform(i, h) if model.transforms(i) else h
        h = model.propagate(i, block, rows, outputs if i == 2 and cfg.jk != "none" else None)
        outputs.append(h)
    torch.testing.assert_close(h, full, rtol=1e-5, atol=1e-5)
    if name != "gcn":  # GCN normalises by the block's degrees (DGL's convention)
        seeds = torch.arange(0, 120, 5)
        blocks = sample_blocks(block.indptr, block.indices, seeds, [-1] * 3, seed=1)
        sampled = model(blocks, x[blocks[0].src_ids])
        torch.testing.assert_close(sampled, full[seeds], rtol=1e-5, atol=1e-5)


def test_options_build_what_they_say():
    cfg = ModelConfig(name="sage", hidden=8, layers=2, residual=True, jk="cat", norm="layer")
    model = build_model(cfg, in_dim=5, num_classes=3)
    # A linear skip where the widths differ (5 -> 8), the identity where they do not.
    assert isinstance(model.skips[0], torch.nn.Linear) and model.skips[0].bias is None
    assert isinstance(model.skips[1], torch.nn.Identity)
    # jk implies the output linear layer, over both layers' outputs concatenated; the
    # last message-passing layer is then a hidden one, normalised.
    assert model.output_linear.in_features == 16 and len(model.norms) == 2
    assert isinstance(model.norms[1], torch.nn.LayerNorm)
    plain = build_model(ModelConfig(name="sage", hidden=8, layers=2), in_dim=5, num_classes=3)
    assert plain.skips is None and plain.output_linear is None and len(plain.norms) == 1
    assert type(model).dims_of(model.state_dict(), 2) == (5, 3)
    inputs = ModelConfig(name="sage", hidden=8, layers=2, input_mlp=True, output_mlp=True)
    assert type(model).dims_of(build_model(inputs, 5, 3).state_dict(), 2) == (5, 3)


def test_batch_norm_trains_on_the_batch_and_infers_with_running_statistics():
    torch.manual_seed(0)
    block = random_graph(50, 200)
    cfg = ModelConfig(name="gcn", hidden=8, layers=2, norm="batch", dropout=0.0)
    model = build_model(cfg, in_dim=4, num_classes=2)
    x = torch.randn(50, 4)
    model([block, block], x).sum().backward()  # train mode: the batch's statistics
    assert model.norms[0].num_batches_tracked == 1
    assert not torch.equal(model.norms[0].running_mean, torch.zeros(8))
    model.eval()
    one = model([block, block], x)[:5]
    again = model([block, block], x)[:5]
    assert torch.equal(one, again)


def test_model_config_takes_the_sampling_settings_it_had_with_a_deprecation_warning():
    # Programs outside the project build ModelConfig(..., fanouts=..., batch_size=...)
    # for full-batch models; the settings moved to the sampled algorithms.
    with pytest.warns(DeprecationWarning, match=r"fanouts and batch_size moved .*algorithm"):
        cfg = ModelConfig(name="sage", hidden=8, layers=3, fanouts=[5, 10, 15], batch_size=1000)
    assert cfg == ModelConfig(name="sage", hidden=8, layers=3)
    assert not hasattr(cfg, "fanouts")
    with pytest.raises(TypeError):  # any other unknown setting is still an error
        ModelConfig(name="sage", fanout=[5])
