#!/usr/bin/env python
"""DGL's full-batch GCN or GraphSAGE-mean epoch on a graph exported by a gnnrun benchmark.

Run by `bench_spmm1d.py` and `bench_fullbatch.py` with `--dgl-python PATH`, the
python of a venv that has DGL 2.1 (it does not import on gnnrun's torch), so
this file imports nothing of gnnrun's. The graph is the one gnnrun trains on in
the same invocation, as an .npz: `indptr`, `indices` (gnnrun's in-edge CSR: row
v lists the sources of the edges into v), `feat`, `label`, `train_idx`,
`num_classes`.

`--model gcn` is `model=gcn`'s: DGL GraphConv layers (symmetric normalisation,
`norm="both"`) on the graph with a self loop added to every vertex. `--model
sage` is GraphSAGE-mean: DGL SAGEConv layers (`"mean"`: a linear map of the
vertex's own features plus one of its in-neighbours' mean, as gnnrun's `sage`).
Both put ReLU and dropout between layers and dropout on the input (torch's
dropout; gnnrun's is its own fused kernel), Adam with gnnrun's learning rate and
weight decay, cross entropy over the training vertices. An epoch is zero_grad + forward + loss (fwd),
backward (bwd) and the optimizer step (opt), as gnnrun's trainer times it.
Threads and allocator come from the caller: `--threads`, and the environment
(LD_PRELOAD, THP_MEM_ALLOC_ENABLE) it inherits. Prints one JSON object.

    PYTHON_WITH_DGL scripts/dgl_fullbatch.py --data graph.npz --model gcn --layers 2 --hidden 64
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from dgl_side import dgl_graph, print_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--model", choices=("gcn", "sage"), default="gcn")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--input-dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2, help="epochs left out of the median")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import GraphConv, SAGEConv

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = np.load(args.data)
    graph = dgl_graph(data)
    if args.model == "gcn":
        graph = dgl.add_self_loop(graph)
    graph.create_formats_()
    feat = torch.from_numpy(data["feat"].astype(np.float32))
    train = torch.from_numpy(data["train_idx"].astype(np.int64))
    label = torch.from_numpy(data["label"].astype(np.int64))[train]

    dims = [feat.shape[1]] + [args.hidden] * (args.layers - 1) + [int(data["num_classes"])]

    def conv(i: int) -> torch.nn.Module:
        if args.model == "gcn":
            return GraphConv(dims[i], dims[i + 1], norm="both")
        return SAGEConv(dims[i], dims[i + 1], "mean")

    convs = torch.nn.ModuleList(conv(i) for i in range(args.layers))
    optimizer = torch.optim.Adam(convs.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    def forward() -> torch.Tensor:
        h = F.dropout(feat, args.input_dropout, training=True)
        for i, conv in enumerate(convs):
            h = conv(graph, h)
            if i < args.layers - 1:
                h = F.dropout(F.relu(h), args.dropout, training=True)
        return h

    epochs = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(forward()[train], label)
        forwarded = time.perf_counter()
        loss.backward()
        backwarded = time.perf_counter()
        optimizer.step()
        end = time.perf_counter()
        epochs.append(
            {
                "epoch_s": end - start,
                "fwd": forwarded - start,
                "bwd": backwarded - forwarded,
                "opt": end - backwarded,
                "loss": float(loss),
            }
        )
    kept = epochs[min(args.warmup, args.epochs - 1) :]
    print_result(
        num_nodes=graph.num_nodes(),
        model=args.model,
        num_edges=graph.num_edges(),
        dims=dims,
        epoch_s=statistics.median(e["epoch_s"] for e in kept),
        phases={k: statistics.median(e[k] for e in kept) for k in ("fwd", "bwd", "opt")},
        epochs=epochs,
    )


if __name__ == "__main__":
    main()
