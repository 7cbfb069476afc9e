#!/usr/bin/env python
"""DGL's sum and mean aggregation on a graph exported by scripts/bench_kernels.py.

Run by `bench_kernels.py --dgl-python PATH` with the python of a venv that has
DGL 2.1 (it does not import on gnnrun's torch), so this file imports nothing of
gnnrun's. The graph is an .npz with `indptr` and `indices`: gnnrun's in-edge
CSR (row v lists the sources of the edges into v), square. The work is what
DGL's GraphSAGE layers run: `update_all(copy_u, sum | mean)` on a graph kept
in CSC (in-edge CSR), timed as bench_kernels.py times gnnrun's kernel (one
warm-up, the median of `--repeats` calls). Every width uses the same
deterministic features as the caller (`features` below), so the caller can
check that both sides computed the same sums. Threads and allocator come from
the caller: `--threads`, and the environment (LD_PRELOAD, THP_MEM_ALLOC_ENABLE)
it inherits. Prints one JSON object.

    PYTHON_WITH_DGL scripts/dgl_aggregate.py --graph graph.npz --widths 128 256
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from dgl_side import dgl_graph, features, print_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", type=Path, required=True)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import dgl.function as fn
    import torch

    torch.set_num_threads(args.threads)
    data = np.load(args.graph)
    graph = dgl_graph(data).formats("csc")
    graph.create_formats_()

    def aggregate(x: torch.Tensor, reduce: str) -> torch.Tensor:
        graph.srcdata["h"] = x
        reducer = fn.sum("m", "out") if reduce == "sum" else fn.mean("m", "out")
        graph.update_all(fn.copy_u("h", "m"), reducer)
        return graph.dstdata.pop("out")

    runs = []
    for width in args.widths:
        x = torch.from_numpy(features(graph.num_nodes(), width))
        for reduce in ("sum", "mean"):
            out = aggregate(x, reduce)  # the warm-up
            checksum = float(out.double().sum())
            times = []
            for _ in range(args.repeats):
                del out
                start = time.perf_counter()
                out = aggregate(x, reduce)
                times.append(time.perf_counter() - start)
            del out
            runs.append(
                {
                    "width": width,
                    "reduce": reduce,
                    "ms": statistics.median(times) * 1e3,
                    "times_ms": [t * 1e3 for t in times],
                    "checksum": checksum,
                }
            )
        del x
    print_result(runs=runs)


if __name__ == "__main__":
    main()
