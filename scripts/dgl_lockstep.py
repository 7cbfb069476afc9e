#!/usr/bin/env python
"""DGL's side of scripts/bench_vs_dgl_paired.py: one operation at a time, on request.

Run by bench_vs_dgl_paired.py with the python of a venv that has DGL 2.1, so
this file imports nothing of gnnrun's. It loads the graph (`--data`, an .npz
with `indptr`, `indices`, `feat`, `label`, `train_idx`, `num_classes`), prints
one JSON line when ready, then reads one operation per line from stdin and
answers each with one JSON line, `{"wall": s, "cpu": s}` (the process's CPU
time, all threads), until an empty line:

- `agg sum|mean WIDTH`: `update_all(copy_u, sum | mean)` on the graph in CSC,
  with the deterministic features of dgl_side.features;
- `epoch sage|gcn DROPOUT`: one full-batch epoch (forward, cross entropy over
  `train_idx`, backward, Adam step) of SAGEConv-mean or GraphConv (self loops,
  symmetric normalisation) 3 x 256, ReLU and dropout between layers, none on
  the input; each model and dropout is built at its first request.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from dgl_side import dgl_graph, features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import dgl
    import dgl.function as fn
    import torch
    import torch.nn.functional as F
    from dgl.nn import GraphConv, SAGEConv

    torch.set_num_threads(args.threads)
    data = np.load(args.data)
    graph = dgl_graph(data)
    graph.create_formats_()
    csc = graph.formats("csc")
    csc.create_formats_()
    looped = dgl.add_self_loop(graph)
    looped.create_formats_()
    feat = torch.from_numpy(data["feat"].astype(np.float32))
    label = torch.from_numpy(data["label"].astype(np.int64))
    train = torch.from_numpy(data["train_idx"].astype(np.int64))
    classes = int(data["num_classes"])
    inputs: dict = {}
    epochs: dict = {}

    def aggregation(reduce: str, width: int):
        if width not in inputs:
            inputs[width] = torch.from_numpy(features(graph.num_nodes(), width))

        def run():
            csc.srcdata["h"] = inputs[width]
            reducer = fn.sum("m", "out") if reduce == "sum" else fn.mean("m", "out")
            csc.update_all(fn.copy_u("h", "m"), reducer)
            return csc.dstdata.pop("out")

        return run

    def epoch(model: str, dropout: float):
        if (model, dropout) in epochs:
            return epochs[(model, dropout)]
        torch.manual_seed(0)
        dims = [feat.shape[1], 256, 256, classes]
        if model == "gcn":
            convs = [GraphConv(dims[i], dims[i + 1], norm="both") for i in range(3)]
            on = looped
        else:
            convs = [SAGEConv(dims[i], dims[i + 1], "mean") for i in range(3)]
            on = graph
        layers = torch.nn.ModuleList(convs)
        optimizer = torch.optim.Adam(layers.parameters(), lr=1e-3)

        def run():
            h = feat
            for i, conv in enumerate(layers):
                h = conv(on, h)
                if i < len(layers) - 1:
                    h = F.relu(h)
                    if dropout:
                        h = F.dropout(h, dropout, training=True)
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(h[train], label[train]).backward()
            optimizer.step()

        epochs[(model, dropout)] = run
        return run

    print(json.dumps({"dgl": dgl.__version__, "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            break
        kind, what, size = words
        run = aggregation(what, int(size)) if kind == "agg" else epoch(what, float(size))
        wall, cpu = time.perf_counter(), time.process_time()
        out = run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        del out
        print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


if __name__ == "__main__":
    main()
