#!/usr/bin/env python
"""Vertex-order benchmark: what `dataset.reorder` buys the aggregation kernel and a training step.

For each graph and each vertex order of gnnrun.data.reorder, one run measures,
with `--threads` threads (default 2):

- the order's cost: seconds to compute it and to renumber the CSR, and the
  median |u - v| over the edges (how far apart in memory neighbours' rows lie);
- gnnrun `aggregate` (sum) at widths 128 and 256, the orders timed in turn,
  round after round, so that a drift of the machine's speed hits them alike;
  the median time, the speed-up over the source order (the median of the
  per-round ratios), and the effective bandwidth under the no-reuse byte model
  (indptr and indices once, one x row per edge, the output once) as a fraction
  of STREAM copy: above 100% the kernel serves rows from cache;
- a full-batch GraphSAGE-mean 3 x 256 forward + backward step on the community
  graph, source order against the best order, in turn (`--skip-train` leaves
  it out);
- with `--dgl-python PATH`, DGL's `update_all(copy_u, sum)` on the community
  graph in the source order and in the METIS order, so that each order's
  ratio to DGL compares the two on the same graph.

Graphs: a community graph from gnnrun's synthetic generator (default 500k
vertices, average degree 20, 32 communities, as `dataset=synthetic-medium`),
and the Chung-Lu graph of bench_kernels.py (default 1M / 25M), which has no
structure for an order to find.

    .venv/bin/python scripts/bench_vertex_order.py
    .venv/bin/python scripts/bench_vertex_order.py --dgl-python .dgl-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from gnnrun.memory import allocator_in_use, reexec_with_allocator

sys.path.insert(0, str(Path(__file__).resolve().parent))

reexec_with_allocator()  # as `gnnrun` does: huge pages and tcmalloc (when installed), before torch is imported

# ruff: noqa: E402
import numpy as np
import torch
from bench_kernels import chung_lu, dgl_side, model_bytes, stream_copy_gbs
from dgl_side import check_dgl_python, features

from gnnrun.data.prepare import build_dataset
from gnnrun.data.reorder import VERTEX_ORDERS, median_edge_span, permute_csr, vertex_order
from gnnrun.data.synthetic import SyntheticDatasetConfig
from gnnrun.models.gnn import build_model
from gnnrun.models.sage import SageConfig
from gnnrun.ops.aggregate import aggregate
from gnnrun.ops.block import Block


def community_graph(args: argparse.Namespace) -> tuple[Block, np.ndarray]:
    """gnnrun's synthetic generator (its in-CSR and labels), in the order it generates."""
    cfg = SyntheticDatasetConfig(
        name="bench",
        num_nodes=args.community_nodes,
        avg_degree=args.community_degree,
        num_classes=32,
        feat_dim=8,
        seed=args.seed,
        prepared_dir="unused",
    )
    dataset = build_dataset(cfg)
    block = Block.from_csr(np.asarray(dataset.indptr), np.asarray(dataset.indices, np.int64))
    return block, np.asarray(dataset.label)


def reordered(block: Block, method: str) -> tuple[Block, np.ndarray | None, dict]:
    """The block in `method`'s order, the order, and its cost and median edge span."""
    indptr, indices = block.indptr.numpy(), block.indices.numpy()
    start = time.perf_counter()
    order = vertex_order(indptr, indices, method)
    order_s = time.perf_counter() - start
    if order is not None:
        indptr, indices = permute_csr(indptr, indices, order)
    figures = {
        "order_s": order_s,
        "renumber_s": time.perf_counter() - start - order_s,
        "median_edge_span": median_edge_span(indptr, indices),
    }
    moved = Block(
        torch.from_numpy(indptr), torch.from_numpy(indices.astype(np.int64)), block.num_src
    )
    return moved, order, figures


def in_turn(fns: dict[str, callable], rounds: int) -> dict[str, list[float]]:
    """Seconds of each call, the calls made in turn, `rounds` times, after one warm-up each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def kernel_runs(name: str, block: Block, args: argparse.Namespace, stream: float) -> list[dict]:
    print(f"\n{name}: {block.num_src:,} vertices, {block.num_edges:,} edges")
    blocks, figures = {}, {}
    for method in ["none", *(m for m in VERTEX_ORDERS if m != "none")]:  # the source first
        blocks[method], _, figures[method] = reordered(block, method)
        f = figures[method]
        print(
            f"  {method:>6}: order {f['order_s']:.1f} s, renumber {f['renumber_s']:.1f} s, "
            f"median edge span {f['median_edge_span']:,.0f}"
        )
    runs = []
    for width in args.widths:
        x = torch.from_numpy(features(block.num_src, width))
        times = in_turn(
            {m: (lambda b=b, x=x: aggregate(b, x, "sum")) for m, b in blocks.items()}, args.rounds
        )
        nbytes = model_bytes(block, width)
        for method, seconds in times.items():
            median = statistics.median(seconds)
            speedup = statistics.median(
                base / own for base, own in zip(times["none"], seconds, strict=True)
            )
            gbs = nbytes / median / 1e9
            print(
                f"  sum width {width}, {method:>6}: {median * 1e3:7.1f} ms, {speedup:.2f}x the "
                f"source order; {gbs:5.1f} GB/s in the no-reuse model = {gbs / stream:.0%} of STREAM"
            )
            runs.append(
                {
                    "graph": name,
                    "width": width,
                    "order": method,
                    "ms": median * 1e3,
                    "speedup": speedup,
                    "model_gbs": gbs,
                    "stream_fraction": gbs / stream,
                    **figures[method],
                }
            )
    return runs


def training_step(block: Block, label: np.ndarray, order: np.ndarray | None, args) -> callable:
    """A full-batch SAGE-mean 3 x 256 forward + backward over `block` in `order`."""
    torch.manual_seed(args.seed)
    model = build_model(SageConfig(name="sage", hidden=256, layers=3), 128, 32)
    x = torch.from_numpy(features(block.num_src, 128))
    y = torch.from_numpy(label if order is None else label[order])
    train = torch.arange(0, block.num_src, 10)

    def step() -> None:
        model.zero_grad()
        logits = model([block] * 3, x)
        torch.nn.functional.cross_entropy(logits[train], y[train]).backward()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--community-nodes", type=int, default=500_000)
    parser.add_argument("--community-degree", type=float, default=20.0)
    parser.add_argument("--nodes", type=int, default=1_000_000, help="Chung-Lu; 0: leave it out")
    parser.add_argument("--edges", type=int, default=25_000_000)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--dgl-python", help="the python of a venv with DGL 2.1: DGL's sums too")
    args = parser.parse_args()
    check_dgl_python(args.dgl_python)
    torch.set_num_threads(args.threads)
    stream = stream_copy_gbs()
    print(f"threads {args.threads}; allocator {allocator_in_use()}; STREAM copy {stream:.1f} GB/s")
    results: dict = {"threads": args.threads, "stream_copy_gbs": stream, "runs": []}

    community, label = community_graph(args)
    results["runs"] += kernel_runs("community graph", community, args, stream)
    if args.nodes:
        results["runs"] += kernel_runs(
            "Chung-Lu graph", chung_lu(args.nodes, args.edges, args.seed), args, stream
        )

    best = max(
        (r for r in results["runs"] if r["graph"] == "community graph" and r["order"] != "none"),
        key=lambda r: r["speedup"],
    )["order"]
    if args.dgl_python:
        args.repeats = args.rounds
        moved, _, _ = reordered(community, "metis")
        for name, block in (("none", community), ("metis", moved)):
            dgl = dgl_side(block, args)
            ours = {
                r["width"]: r["ms"]
                for r in results["runs"]
                if r["graph"] == "community graph" and r["order"] == name
            }
            for width in args.widths:
                ms = dgl[(width, "sum")]["ms"]
                print(
                    f"  DGL, community graph, {name} order, sum width {width}: {ms:,.1f} ms "
                    f"(DGL / gnnrun {ms / ours[width]:.2f}x)"
                )
                results.setdefault("dgl", []).append({"order": name, "width": width, "ms": ms})

    if not args.skip_train:
        moved, order, _ = reordered(community, best)
        steps = {
            "none": training_step(community, label, None, args),
            best: training_step(moved, label, order, args),
        }
        times = in_turn(steps, max(3, args.rounds // 2))
        ratio = statistics.median(a / b for a, b in zip(times["none"], times[best], strict=True))
        print(
            f"\nfull-batch SAGE-mean 3 x 256 step, community graph: source order "
            f"{statistics.median(times['none']):.2f} s, {best} order "
            f"{statistics.median(times[best]):.2f} s: {ratio:.2f}x"
        )
        results["train_step"] = {
            "order": best,
            "speedup": ratio,
            **{k: statistics.median(v) for k, v in times.items()},
        }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
