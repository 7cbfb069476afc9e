#!/usr/bin/env python
"""DGL's minibatch GraphSAGE training step on a graph and seed batches exported by
scripts/bench_train.py.

Run by `bench_train.py --dgl-python PATH` with the python of a venv that has
DGL 2.1 (it does not import on gnnrun's torch), so this file imports nothing of
gnnrun's. The .npz holds `indptr`, `indices` (gnnrun's in-edge CSR), `feat`,
`label` and `seeds` (one row of seed ids per step, the batches gnnrun trained
on). Every step is what DGL's GraphSAGE minibatch example runs:
`NeighborSampler(reversed fanouts).sample_blocks` and the input features'
gather (MBC), the model and cross entropy (FWD), backward (BWD), zero_grad and
Adam's step (OPT). The model is `SAGEConv(..., "mean")` layers with ReLU and
dropout between them, the widths, dropout and optimizer given. The first
`--warmup` steps are left out of the medians. Prints one JSON object.

    PYTHON_WITH_DGL scripts/dgl_minibatch.py --data steps.npz --fanouts 15 10 5 --classes 47
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
    parser.add_argument("--fanouts", type=int, nargs="+", required=True, help="seeds first")
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = np.load(args.data)
    graph = dgl_graph(data)
    graph.create_formats_()
    feat = torch.from_numpy(data["feat"])
    label = torch.from_numpy(data["label"].astype(np.int64))
    steps = [torch.from_numpy(s) for s in data["seeds"].astype(np.int64)]

    layers = len(args.fanouts)
    dims = [feat.shape[1]] + [args.hidden] * (layers - 1) + [args.classes]
    convs = torch.nn.ModuleList(SAGEConv(dims[i], dims[i + 1], "mean") for i in range(layers))
    optimizer = torch.optim.Adam(convs.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanouts)))

    records = []
    for seeds in steps:
        start = time.perf_counter()
        input_nodes, _, blocks = sampler.sample_blocks(graph, seeds)
        h = feat[input_nodes]
        y = label[seeds]
        built = time.perf_counter()
        for i, (conv, block) in enumerate(zip(convs, blocks, strict=True)):
            h = conv(block, h)
            if i < layers - 1:
                h = F.dropout(F.relu(h), args.dropout, training=True)
        loss = F.cross_entropy(h, y)
        forwarded = time.perf_counter()
        loss.backward()
        backwarded = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        end = time.perf_counter()
        records.append(
            {
                "mbc": built - start,
                "fwd": forwarded - built,
                "bwd": backwarded - forwarded,
                "opt": end - backwarded,
                "total": end - start,
                "edges": sum(b.num_edges() for b in blocks),
            }
        )
    kept = records[args.warmup :]
    print_result(
        ms={
            k: statistics.median(r[k] for r in kept) * 1e3
            for k in ("mbc", "fwd", "bwd", "opt", "total")
        },
        mean_sampled_edges=statistics.mean(r["edges"] for r in kept),
        steps=len(kept),
    )


if __name__ == "__main__":
    main()
