#!/usr/bin/env python
"""Which of GAE's choices lift Cora's link-prediction figures: a plain-torch GAE, each
variant against the sampled-negatives baseline (gnnrun's former `model=gae` set-up) in
the same run.

The model is Kipf & Welling's (two GCN layers 32 and 16 wide on a dense normalised
A + I, Glorot weights, Adam lr 0.01, 200 full-batch epochs, inner-product decoder), on
gnnrun's own 85/5/10 edge split (gnnrun.data.edge_split, `task.split_seed=S`) and, by
default, gnnrun's held-out negatives (one uniform vertex pair per edge). Variants:

- `sampled`: one uniform vertex pair per training edge each epoch (the baseline);
- `nobias`: the same without the GCN layers' bias (GAE's layers have none);
- `nonedge`: training negatives redrawn until they are non-edges (PyG's sampler);
- `selfpairs`: `sampled` plus each vertex's (v, v) as a positive (GAE's target A + I);
- `whole`: GAE's weighted loss over the whole adjacency matrix, without the diagonal;
- `whole_selfpairs`: GAE's loss over A + I (`task=gae`);
- `eval_nonedge`: `sampled`, evaluated against non-edges of the whole graph (GAE's).

Test (and validation) ROC-AUC and AP, mean ± std over seeds 0 .. runs - 1 (split and
initialisation), in percent. Needs the prepared Cora (`gnnrun data prepare dataset=cora`).

    .venv/bin/python scripts/gae_ablation.py --runs 10
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.edge_split import held_out_negative_pairs, split_edges
from gnnrun.data.graph import edges_from_csr

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "sampled": {},
    "nobias": {"bias": False},
    "nonedge": {"negatives": "nonedge"},
    "selfpairs": {"self_pairs": True},
    "whole": {"negatives": "whole"},
    "whole_selfpairs": {"negatives": "whole", "self_pairs": True},
    "eval_nonedge": {"eval_negatives": "nonedge"},
}


def run(ds: GraphDataset, seed: int, negatives="uniform", bias=True, self_pairs=False,
        eval_negatives="uniform", epochs=200) -> dict[str, tuple[float, float]]:  # fmt: skip
    n = ds.num_nodes
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    split = split_edges(indptr, indices, False, 0.05, 0.1, seed)
    train = torch.from_numpy(split.train.astype(np.int64))
    a = torch.zeros(n, n)
    a[train[0], train[1]] = a[train[1], train[0]] = 1
    a_loops = a + torch.eye(n)
    d = a_loops.sum(1).rsqrt()
    propagate = d[:, None] * a_loops * d[None, :]
    x = torch.from_numpy(np.array(ds.feat, dtype=np.float32))
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(x.shape[1], 32, bias=bias), torch.nn.Linear(32, 16, bias=bias)]
    for layer in layers:
        torch.nn.init.xavier_uniform_(layer.weight)
        if bias:
            torch.nn.init.zeros_(layer.bias)
    params = [p for layer in layers for p in layer.parameters()]
    optimizer = torch.optim.Adam(params, lr=0.01)

    def embed() -> torch.Tensor:
        return propagate @ layers[1](torch.relu(propagate @ layers[0](x)))

    def bce(scores_pos: torch.Tensor, scores_neg: torch.Tensor) -> torch.Tensor:
        scores = torch.cat([scores_pos, scores_neg])
        labels = torch.cat([torch.ones_like(scores_pos), torch.zeros_like(scores_neg)])
        return torch.nn.functional.binary_cross_entropy_with_logits(scores, labels)

    draws = torch.Generator().manual_seed(seed + 1000)
    positives = train
    if self_pairs:
        positives = torch.cat([train, torch.arange(n).repeat(2, 1)], dim=1)
    for _ in range(epochs):
        optimizer.zero_grad()
        z = embed()
        if negatives == "whole":
            target = a_loops if self_pairs else a
            ones = target.sum()
            pos_weight = (n * n - ones) / ones
            norm = n * n / (2 * (n * n - ones))
            loss = norm * torch.nn.functional.binary_cross_entropy_with_logits(
                z @ z.T, target, pos_weight=pos_weight
            )
        else:
            m = positives.shape[1]
            if negatives == "nonedge":
                candidates = torch.randint(0, n, (2, 2 * m), generator=draws)
                neg = candidates[:, a_loops[candidates[0], candidates[1]] == 0][:, :m]
            else:
                neg = torch.randint(0, n, (2, m), generator=draws)
            loss = bce((z[positives[0]] * z[positives[1]]).sum(1), (z[neg[0]] * z[neg[1]]).sum(1))
        loss.backward()
        optimizer.step()
    out = {}
    with torch.no_grad():
        z = embed()
        whole = torch.zeros(n, n)
        src, dst = edges_from_csr(indptr, indices)
        whole[src, dst] = 1
        for name, stream in (("val", 7), ("test", 9)):
            edges = torch.from_numpy(getattr(split, name).astype(np.int64))
            k = edges.shape[1]
            if eval_negatives == "nonedge":
                pick = torch.Generator().manual_seed(seed + stream)
                candidates = torch.randint(0, n, (2, 4 * k), generator=pick)
                ok = (whole[candidates[0], candidates[1]] == 0) & (candidates[0] != candidates[1])
                neg = candidates[:, ok][:, :k]
            else:
                ids = torch.arange(k)
                neg = held_out_negative_pairs(edges, ids, 1, (0, n), seed, name, "uniform")
                neg = neg.view(2, -1)
            scores = torch.cat([(z[edges[0]] * z[edges[1]]).sum(1), (z[neg[0]] * z[neg[1]]).sum(1)])
            labels = np.r_[np.ones(k), np.zeros(neg.shape[1])]
            out[name] = (roc_auc_score(labels, scores), average_precision_score(labels, scores))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="seeds 0 .. runs - 1")
    parser.add_argument("--variants", nargs="*", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--dataset", type=Path, default=REPO / "data" / "prepared" / "cora")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ds = GraphDataset.load(args.dataset)
    variants = ["sampled", *(v for v in args.variants if v != "sampled")]
    baseline = None
    for name in variants:
        start = time.perf_counter()
        results = [run(ds, seed, **VARIANTS[name]) for seed in range(args.runs)]
        figures = {
            f"{split} {metric}": 100 * np.array([r[split][i] for r in results])
            for split in ("test", "val")
            for i, metric in enumerate(("AUC", "AP"))
        }
        baseline = baseline or figures
        line = " | ".join(
            f"{key} {v.mean():.2f} ± {v.std(ddof=1) if len(v) > 1 else float('nan'):.2f}"
            f" ({v.mean() - baseline[key].mean():+.2f})"
            for key, v in figures.items()
        )
        seconds = time.perf_counter() - start
        print(f"{name:16s} {line}  [{args.runs} seeds, {seconds:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
