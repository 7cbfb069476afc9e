"""Synthetic graphs: deterministic bytes, the promised shape, and signal a GNN can use."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.data import build_dataset, prepare_dataset
from gnnrun.data.graph import is_symmetric
from gnnrun.data.synthetic import SyntheticDatasetConfig

TINY = {  # as configs/dataset/synthetic-tiny.yaml
    "name": "synthetic-tiny",
    "num_nodes": 2000,
    "avg_degree": 10,
    "num_classes": 8,
    "feat_dim": 32,
    "max_degree_fraction": 0.05,
}


def test_same_seed_same_bytes_other_seed_other_graph(tmp_path):
    a = prepare_dataset(SyntheticDatasetConfig(**TINY, prepared_dir=str(tmp_path / "a")))
    b = prepare_dataset(SyntheticDatasetConfig(**TINY, prepared_dir=str(tmp_path / "b")))
    c = prepare_dataset(SyntheticDatasetConfig(**TINY, seed=1, prepared_dir=str(tmp_path / "c")))
    assert a.checksum == b.checksum
    for name in ("indptr", "indices", "feat", "label", "train_idx"):
        assert (tmp_path / "a" / f"{name}.npy").read_bytes() == (
            tmp_path / "b" / f"{name}.npy"
        ).read_bytes()
    assert a.checksum != c.checksum


def test_shape_power_law_and_homophily():
    cfg = SyntheticDatasetConfig(
        name="s", num_nodes=20000, avg_degree=16, num_classes=10, feat_dim=8
    )
    g = build_dataset(cfg)
    assert g.num_nodes == 20000
    assert 0.9 * 16 < g.num_edges / g.num_nodes <= 16  # duplicates and self-loops removed
    assert is_symmetric(g.indptr, g.indices)
    deg = g.in_degrees()
    # Heavy tail: the top 1% of vertices hold far more than 1% of the edges.
    top = np.sort(deg)[-200:].sum() / deg.sum()
    assert top > 0.05
    assert deg.max() > 10 * np.median(deg)
    src = np.asarray(g.indices)
    dst = np.repeat(np.arange(g.num_nodes), deg)
    homophily = np.mean(g.label[src] == g.label[dst])
    assert 0.75 < homophily < 0.9  # 0.8 inside + 0.2 / 10 by chance
    # Split fractions as configured, disjoint.
    assert g.train_idx.size == 2000 and g.val_idx.size == 2000 and g.test_idx.size == 16000
    assert np.intersect1d(g.train_idx, g.test_idx).size == 0


def _train(model: torch.nn.Module, x, adj, y, train, test, epochs: int = 100) -> float:
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, adj)[train], y[train])
        loss.backward()
        opt.step()
    with torch.no_grad():
        return (model(x, adj)[test].argmax(1) == y[test]).float().mean().item()


class GCN(torch.nn.Module):
    def __init__(self, d: int, h: int, c: int, use_graph: bool) -> None:
        super().__init__()
        self.l1, self.l2, self.use_graph = torch.nn.Linear(d, h), torch.nn.Linear(h, c), use_graph

    def forward(self, x, adj):
        prop = (lambda z: torch.sparse.mm(adj, z)) if self.use_graph else (lambda z: z)
        return self.l2(prop(torch.relu(self.l1(prop(x)))))


def test_a_two_layer_gcn_clearly_beats_an_mlp():
    """Plain PyTorch, no gnnrun training code: the graph must carry signal the features alone lack."""
    g = build_dataset(SyntheticDatasetConfig(**TINY))
    n = g.num_nodes
    src = torch.from_numpy(np.asarray(g.indices, dtype=np.int64))
    dst = torch.from_numpy(np.repeat(np.arange(n), g.in_degrees()))
    loops = torch.arange(n)
    rows, cols = torch.cat([dst, loops]), torch.cat([src, loops])
    deg = torch.bincount(rows, minlength=n).float()
    values = deg[rows].rsqrt() * deg[cols].rsqrt()
    adj = torch.sparse_coo_tensor(
        torch.stack([rows, cols]), values, (n, n), check_invariants=True
    ).coalesce()
    x, y = torch.from_numpy(np.asarray(g.feat)), torch.from_numpy(np.asarray(g.label))
    train, test = torch.from_numpy(g.train_idx), torch.from_numpy(g.test_idx)
    gcn = _train(GCN(g.feat_dim, 64, g.num_classes, True), x, adj, y, train, test)
    mlp = _train(GCN(g.feat_dim, 64, g.num_classes, False), x, adj, y, train, test)
    print(f"synthetic-tiny test accuracy: GCN {gcn:.3f}, MLP {mlp:.3f}")
    assert gcn > mlp + 0.15
    assert gcn > 0.7
