"""RGCN and heterogeneous SAGE against dense per-relation formulas, their gradients, and the
typed input encoder's embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.data.hetero import HeteroSchema, typed_csr
from gnnrun.models.hetero import TypedInput, TypedInputEncoder
from gnnrun.models.rgcn import HeteroSAGEConv, RGCNConv
from gnnrun.models.sage import SAGEConv
from gnnrun.ops.block import Block

SCHEMA = HeteroSchema(
    node_types=["paper", "author"],
    type_counts=[7, 5],
    feat_dims=[3, 0],
    relations=[
        ("author", "writes", "paper"),
        ("paper", "cites", "paper"),
        ("paper", "rev_writes", "author"),
    ],
    target="paper",
)


def small_graph(seed: int = 0) -> tuple[Block, np.ndarray]:
    """A random typed graph as a full block with relations and vertex types, and its dense
    per-relation adjacency [R, N, N] (row = destination)."""
    rng = np.random.default_rng(seed)
    edges = {}
    for s, r, d in SCHEMA.relations:
        count = 14
        src = rng.integers(0, SCHEMA.type_counts[SCHEMA.type_index(s)], count)
        dst = rng.integers(0, SCHEMA.type_counts[SCHEMA.type_index(d)], count)
        edges[(s, r, d)] = (src, dst)
    indptr, indices, edge_type = typed_csr(SCHEMA, edges)
    block = Block.from_csr(indptr, indices)
    block.etypes = torch.from_numpy(edge_type.astype(np.int64))
    n = int(SCHEMA.offsets[-1])
    block.node_types = torch.from_numpy(SCHEMA.type_of(np.arange(n)))
    dense = np.zeros((SCHEMA.num_relations, n, n))
    dst = np.repeat(np.arange(n), np.diff(indptr))
    dense[edge_type, dst, indices] = 1.0
    return block, dense


def mean_rows(adjacency: np.ndarray) -> torch.Tensor:
    degree = adjacency.sum(axis=1, keepdims=True)
    return torch.from_numpy(adjacency / np.maximum(degree, 1))


def weights_from_parameters(layer: RGCNConv) -> list[np.ndarray]:
    """W_r of every relation, built entry by entry from the raw parameters."""
    in_dim, out_dim, relations = layer.in_dim, layer.out_dim, layer.num_relations
    weights = [np.zeros((in_dim, out_dim)) for _ in range(relations)]
    if layer.decomposition == "basis":  # W_r = sum_b a_rb V_b
        a, v = layer.coefficients.detach().numpy(), layer.bases.detach().numpy()
        for r in range(relations):
            for b in range(v.shape[0]):
                weights[r] += a[r, b] * v[b]
    elif layer.decomposition == "block_diagonal":  # W_r = diag(Q_r1, ..., Q_rk)
        q = layer.blocks.detach().numpy()
        rows, cols = q.shape[2], q.shape[3]
        for r in range(relations):
            for k in range(q.shape[1]):
                weights[r][k * rows : (k + 1) * rows, k * cols : (k + 1) * cols] = q[r, k]
    else:
        weights = list(layer.weight.detach().numpy())
    return weights


@pytest.mark.parametrize("decomposition", ["basis", "block_diagonal", "none"])
def test_rgcn_layer_equals_the_dense_per_relation_formula(decomposition):
    torch.manual_seed(0)
    block, dense = small_graph()
    layer = RGCNConv(8, 4, SCHEMA.num_relations, decomposition, num_bases=2, num_blocks=2).double()
    if decomposition == "basis":
        assert layer.bases.shape == (2, 8, 4) and layer.coefficients.shape == (3, 2)
    if decomposition == "block_diagonal":
        assert layer.blocks.shape == (3, 2, 4, 2)
    x = torch.randn(block.num_src, 8, dtype=torch.float64)
    weights = weights_from_parameters(layer)
    # h_v = W_0 x_v + b + sum_r mean_{u in N_r(v)} x_u W_r
    xn = x.numpy()
    expected = (
        xn @ layer.self_loop.weight.detach().numpy().T + layer.self_loop.bias.detach().numpy()
    )
    for r in range(SCHEMA.num_relations):
        expected = expected + mean_rows(dense[r]).numpy() @ xn @ weights[r]
    torch.testing.assert_close(layer(block, x), torch.from_numpy(expected))


def test_rgcn_gradients_pass_gradcheck():
    torch.manual_seed(1)
    block, _ = small_graph(1)
    layer = RGCNConv(4, 3, SCHEMA.num_relations, "basis", num_bases=2, num_blocks=1).double()
    x = torch.randn(block.num_src, 4, dtype=torch.float64, requires_grad=True)
    params = (x, layer.bases, layer.coefficients, layer.self_loop.weight)
    assert torch.autograd.gradcheck(lambda *_: layer(block, x), params)


def test_hetero_sage_sums_one_sage_per_relation_into_each_destination_type():
    torch.manual_seed(2)
    block, dense = small_graph(2)
    dst_types = SCHEMA.relation_types()[1].tolist()
    layer = HeteroSAGEConv(6, 5, "mean", dst_types).double()
    x = torch.randn(block.num_src, 6, dtype=torch.float64)
    types = block.node_types.numpy()
    expected = torch.zeros(block.num_dst, 5, dtype=torch.float64)
    for r, conv in enumerate(layer.convs):
        mine = torch.from_numpy(types == dst_types[r])[:, None]
        per_relation = conv.self_loop(x) + (mean_rows(dense[r]) @ x) @ conv.neigh.weight.T
        expected += torch.where(mine, per_relation, 0.0)
    torch.testing.assert_close(layer(block, x), expected)


def test_one_relation_hetero_sage_is_sage_bit_for_bit():
    torch.manual_seed(3)
    sage = SAGEConv(6, 4, "mean")
    torch.manual_seed(3)
    hetero = HeteroSAGEConv(6, 4, "mean", [0])
    block = Block.from_csr(np.array([0, 2, 3, 3, 5]), np.array([1, 2, 0, 0, 1]))
    x = torch.randn(4, 6, requires_grad=True)
    out_sage, out_hetero = sage(block, x), hetero(block, x)
    assert torch.equal(out_sage, out_hetero)
    (grad_sage,) = torch.autograd.grad(out_sage.square().sum(), x)
    (grad_hetero,) = torch.autograd.grad(out_hetero.square().sum(), x)
    assert torch.equal(grad_sage, grad_hetero)


def test_embeddings_of_featureless_vertices_get_gradients_only_where_read():
    torch.manual_seed(4)
    encoder = TypedInputEncoder(SCHEMA, width=6, project=True)
    # Input rows: papers 1 and 4 (features), authors 0 and 3 (embeddings), mixed order.
    x = TypedInput(
        types=torch.tensor([1, 0, 1, 0]),
        typed_ids=torch.tensor([3, 4, 0, 1]),
        feat={0: torch.randn(2, 3)},
    )
    rows = encoder(x)
    table = encoder.maps["1"].weight
    torch.testing.assert_close(rows[0], table[3])
    torch.testing.assert_close(rows[2], table[0])
    projection = encoder.maps["0"]
    torch.testing.assert_close(rows[1], projection(x.feat[0][0]))
    torch.testing.assert_close(rows[3], projection(x.feat[0][1]))
    rows.sum().backward()
    assert table.grad.is_sparse
    grad = table.grad.coalesce()
    assert sorted(grad.indices()[0].tolist()) == [0, 3]
    assert projection.weight.grad is not None and projection.weight.grad.abs().sum() > 0


def test_unprojected_input_requires_one_width():
    mixed = HeteroSchema(["a", "b"], [2, 2], [3, 4], [("a", "r", "b")], "a")
    with pytest.raises(ValueError, match="widths \\[3, 4\\]"):
        TypedInputEncoder.width_for(mixed, hidden=8, project=False)
    assert TypedInputEncoder.width_for(SCHEMA, hidden=8, project=False) == 3
    assert TypedInputEncoder.width_for(SCHEMA, hidden=8, project=True) == 8


def test_relation_blocks_of_a_part_keep_its_remote_edges_or_are_refused():
    """A homogeneous part's block is its own relation rows and relation block, remote
    shards (sar) and completion (cd0) included: RGCN and heterogeneous SAGE then aggregate
    over every in-edge. A new block built from such a block would aggregate over the
    part's own edges only, and is refused."""
    block, _ = small_graph()
    for attribute in ("sharded", "completion"):
        part = Block(block.indptr, block.indices, block.num_src, **{attribute: object()})
        assert part.relation_rows(1) is part
        assert len(part.relation_blocks(1)) == 1 and part.relation_blocks(1)[0] is part
        typed = Block(
            block.indptr, block.indices, block.num_src, etypes=block.etypes, **{attribute: object()}
        )
        for rebuild in (
            lambda b: b.relation_rows(len(SCHEMA.relations)),
            lambda b: b.relation_blocks(len(SCHEMA.relations)),
            lambda b: b.without_sources(torch.zeros(b.num_src, dtype=torch.bool)),
        ):
            with pytest.raises(ValueError, match="would drop this block's"):
                rebuild(typed)
