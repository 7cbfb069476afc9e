#!/usr/bin/env python
"""DGL's neighbour sampling on a graph and seed batches exported by scripts/bench_sampler.py.

Run by `bench_sampler.py --dgl-python PATH` with the python of a venv that has
DGL 2.1 (it does not import on gnnrun's torch), so this file imports nothing of
gnnrun's. The .npz holds `indptr`, `indices` (gnnrun's in-edge CSR, symmetric)
and `batches` (one row of seed ids per batch). For each fanout list (gnnrun's
order: the first entry is what each seed gets), DGL's
`NeighborSampler(reversed list).sample_blocks` builds the blocks of every batch
(sampling and compaction into blocks, as gnnrun's `sample_minibatch` does), after
two warm-up batches; the figure is block edges per second, best of
`--repeats` passes, as bench_sampler.py measures gnnrun. Prints one JSON object.

    PYTHON_WITH_DGL scripts/dgl_sample.py --graph batches.npz --fanouts 15,10,5 5,10,15
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from dgl_side import dgl_graph, print_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", type=Path, required=True)
    parser.add_argument("--fanouts", nargs="+", default=["15,10,5", "5,10,15"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import dgl
    import torch

    torch.set_num_threads(args.threads)
    data = np.load(args.graph)
    graph = dgl_graph(data)
    graph.create_formats_()
    batches = [torch.from_numpy(b) for b in data["batches"].astype(np.int64)]

    runs = []
    for text in args.fanouts:
        fanouts = [int(f) for f in text.split(",")]  # gnnrun's order: seeds first
        sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
        for warm in batches[:2]:
            sampler.sample_blocks(graph, warm)
        best = 0.0
        for _ in range(args.repeats):
            edges = 0
            start = time.perf_counter()
            for seeds in batches:
                _, _, blocks = sampler.sample_blocks(graph, seeds)
                edges += sum(b.num_edges() for b in blocks)
            best = max(best, edges / (time.perf_counter() - start))
        runs.append(
            {"fanouts": fanouts, "edges_per_s": best, "edges_per_batch": edges / len(batches)}
        )
    print_result(runs=runs)


if __name__ == "__main__":
    main()
