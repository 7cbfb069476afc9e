#!/usr/bin/env python
"""gnnrun beside PyG on the same device, in one run: full-batch epochs, the minibatch step,
peak memory, and gnnrun's own CPU epoch for the GPU's speed-up.

On a machine with a CUDA device the device is the GPU; elsewhere (this 2-core machine,
CI) it is the CPU, which gives the CPU table a current-PyTorch peer beside DGL 2.1.
Every figure is a median over `--epochs` timed epochs or steps after `--warmup`, both
sides on the same graph, features, labels, model widths and optimizer (Adam), no
dropout; on a GPU each timing ends with a synchronisation.

- Full batch: GCN and GraphSAGE-mean 3 x 256 on each graph, GAT 3 x 128 x 4 heads on
  the first. gnnrun: `build_model` on `Block.from_csr` (what `gnnrun train
  algorithm=single algorithm.mode=full` runs). PyG (`torch_geometric.nn`): its fastest
  path, a torch sparse CSR adjacency (`adj_t`, the in-CSR gnnrun keeps), and its
  `edge_index` path (GCNConv cached; GAT on edge_index only, PyG's own path).
- Minibatch step: SAGE 3 x 256, batch 1000, fanouts 5, 10, 15 (the seeds get 5), the
  same blocks sampled once by gnnrun's sampler for both sides (PyG's sampler needs
  pyg-lib); a step copies its blocks and features to the device, then forward,
  backward, Adam.
- With `--cpu-baseline` (on a GPU) gnnrun's full-batch epoch on the machine's CPU
  cores too: the GPU's speed-up over gnnrun's own CPU epoch.

Goals, as ratios of one run: every full-batch cell >= 1.5x PyG's fastest path, the
minibatch step >= 1.5x, GAT >= 2x, the GPU >= 10x gnnrun's CPU epoch.

    .venv/bin/pip install torch-geometric                  # or: pip install -e ".[bench]"
    .venv/bin/python scripts/bench_gpu.py --json gpu.json   # synthetic-small on a CPU
    python scripts/bench_gpu.py --device cuda --graphs synthetic-medium,synthetic-large --cpu-baseline
    .venv/bin/python scripts/bench_gpu.py --quick          # synthetic-tiny: a smoke test

Prepared datasets are kept under `--data-root` (default ./data) and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from gnnrun.algorithms import LocalGraphSource, Minibatch, make_minibatch
from gnnrun.models import build_model
from gnnrun.models.registry import ModelConfig
from gnnrun.ops.block import Block
from gnnrun.ops.spmm import csr_matrix

FANOUTS = [5, 10, 15]  # seeds first
BATCH = 1000
GOALS = {"full": 1.5, "gat": 2.0, "minibatch": 1.5, "cpu": 10.0}


def load_dataset(name: str, data_root: str):
    """The prepared dataset (prepared now if missing), as `gnnrun data prepare` makes it."""
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.data import prepare_dataset
    from gnnrun.schemas import register_schemas

    os.environ.setdefault("GNNRUN_DATA_ROOT", data_root)
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=[f"dataset={name}"]))
    return prepare_dataset(cfg.dataset)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> dict:
    """Median seconds of `step` after warm-up; peak device memory (GPU) over the timed steps."""
    for _ in range(warmup):
        step()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    figures = {"s": statistics.median(times), "all_s": times}
    if device.type == "cuda":
        figures["peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return figures


def training_step(model, optimizer, forward: Callable[[], torch.Tensor], label) -> Callable:
    def step() -> None:
        loss = torch.nn.functional.cross_entropy(forward(), label)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()

    return step


def attempt(name: str, run: Callable[[], dict]) -> dict:
    """A cell's figures, or why it could not be measured (out of memory, PyG missing a path)."""
    try:
        return run()
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:
        reason = str(exc).strip().splitlines()[0][:160]
        print(f"  {name}: not measured ({type(exc).__name__}: {reason})", flush=True)
        return {"failed": reason}
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------- gnnrun


def gnnrun_model(kind: str, in_dim: int, classes: int) -> torch.nn.Module:
    if kind == "gat":
        cfg = ModelConfig(name="gat", hidden=128, layers=3, heads=4, dropout=0.0)
    else:
        cfg = ModelConfig(name=kind, hidden=256, layers=3, dropout=0.0, aggregator="mean")
    return build_model(cfg, in_dim, classes)


def gnnrun_full(kind: str, dataset, device: torch.device, args) -> dict:
    torch.manual_seed(0)
    block = Block.from_csr(dataset.indptr, dataset.indices, symmetric=not dataset.directed)
    block = block.to(device)
    x = torch.from_numpy(np.array(dataset.feat, dtype=np.float32)).to(device)
    label = torch.from_numpy(np.array(dataset.label, dtype=np.int64)).to(device)
    model = gnnrun_model(kind, x.shape[1], dataset.num_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    blocks = [block] * 3
    step = training_step(model, optimizer, lambda: model(blocks, x), label)
    return timed(step, device, args.warmup, args.epochs)


def sampled_minibatches(dataset, count: int) -> list[Minibatch]:
    """`count` minibatches of the training vertices, sampled as `gnnrun train` samples them."""
    source = LocalGraphSource(dataset)
    label = torch.from_numpy(np.array(dataset.label, dtype=np.int64))
    order = torch.from_numpy(np.array(dataset.train_idx, dtype=np.int64))
    order = order[torch.randperm(order.numel(), generator=torch.Generator().manual_seed(0))]
    batches = []
    for i in range(count):
        seeds = order[(i * BATCH) % order.numel() :][:BATCH]
        blocks, x = make_minibatch(source, seeds, FANOUTS, key=i)
        batches.append(Minibatch(blocks, x, label[seeds]))
    return batches


def gnnrun_minibatch(batches: list[Minibatch], dataset, device: torch.device, args) -> dict:
    torch.manual_seed(0)
    model = gnnrun_model("sage", dataset.feat_dim, dataset.num_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    position = iter(range(1 << 30))

    def step() -> None:
        batch = batches[next(position) % len(batches)].to(device)
        training_step(model, optimizer, lambda: model(batch.blocks, batch.x), batch.targets)()

    return timed(step, device, args.warmup, args.epochs * 4)


# ---------------------------------------------------------------------------- PyG


class PygNet(torch.nn.Module):
    """Three PyG layers with ReLU between them, as gnnrun's models stack theirs."""

    def __init__(self, convs: list[torch.nn.Module]) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(convs)

    def forward(self, x, graphs, sizes=None):
        for i, conv in enumerate(self.convs):
            if sizes is None:
                x = conv(x, graphs[i])
            else:  # bipartite blocks: (sources, destinations)
                x = conv((x, x[: sizes[i][1]]), graphs[i], size=sizes[i])
            if i < len(self.convs) - 1:
                x = torch.relu(x)
        return x


def pyg_net(kind: str, in_dim: int, classes: int, cached: bool) -> torch.nn.Module:
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    widths = [in_dim, 256, 256, classes]
    if kind == "sage":
        convs = [SAGEConv(a, b, aggr="mean") for a, b in zip(widths, widths[1:], strict=False)]
    elif kind == "gcn":
        convs = [GCNConv(a, b, cached=cached) for a, b in zip(widths, widths[1:], strict=False)]
    else:  # GAT 3 x 128 x 4 heads: hidden layers concatenate 4 heads of 32, the last averages
        convs = [
            GATConv(in_dim, 32, heads=4),
            GATConv(128, 32, heads=4),
            GATConv(128, classes, heads=4, concat=False),
        ]
    return PygNet(convs)


def pyg_full(kind: str, path: str, dataset, device: torch.device, args) -> dict:
    torch.manual_seed(0)
    indptr = torch.from_numpy(np.array(dataset.indptr, dtype=np.int64))
    indices = torch.from_numpy(np.array(dataset.indices, dtype=np.int64))
    n = indptr.numel() - 1
    if path == "csr":  # adj_t[dst, src]: the in-CSR, as gnnrun keeps it
        graph = csr_matrix(indptr, indices, torch.ones(indices.numel()), (n, n)).to(device)
    else:
        dst = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
        graph = torch.stack([indices, dst]).to(device)
    x = torch.from_numpy(np.array(dataset.feat, dtype=np.float32)).to(device)
    label = torch.from_numpy(np.array(dataset.label, dtype=np.int64)).to(device)
    model = pyg_net(kind, x.shape[1], dataset.num_classes, cached=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    step = training_step(model, optimizer, lambda: model(x, [graph] * 3), label)
    return timed(step, device, args.warmup, args.epochs)


def pyg_minibatch(batches: list[Minibatch], dataset, device: torch.device, args) -> dict:
    torch.manual_seed(0)
    model = pyg_net("sage", dataset.feat_dim, dataset.num_classes, cached=False).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    # The same blocks as edge_index [2, E] (local source, destination) and their sizes.
    converted = []
    for batch in batches:
        edges = [torch.stack([b.indices, b.dst_of_edges()]) for b in batch.blocks]
        sizes = [(b.num_src, b.num_dst) for b in batch.blocks]
        converted.append((edges, sizes, batch.x, batch.targets))
    position = iter(range(1 << 30))

    def step() -> None:
        edges, sizes, x, y = converted[next(position) % len(converted)]
        edges = [e.to(device) for e in edges]
        x, y = x.to(device), y.to(device)
        training_step(model, optimizer, lambda: model(x, edges, sizes), y)()

    return timed(step, device, args.warmup, args.epochs * 4)


# ---------------------------------------------------------------------------- report


def ratio(other: dict, ours: dict) -> float | None:
    if "s" in other and "s" in ours:
        return other["s"] / ours["s"]
    return None


def cell(figures: dict) -> str:
    if "s" not in figures:
        return "n/a"
    text = f"{figures['s'] * 1e3:.1f} ms"
    return text + (f" ({figures['peak_mb']:.0f} MB)" if "peak_mb" in figures else "")


def verdict(value: float | None, goal: float) -> str:
    if value is None:
        return ""
    return f"{value:.2f}x ({'met' if value >= goal else 'NOT met'}, goal {goal}x)"


def bench_graph(
    graph: str, first: bool, device: torch.device, args, cells: list[dict], rows: list[list[str]]
) -> None:
    """The cells of one graph (GAT and the minibatch step on the first graph only)."""
    dataset = load_dataset(graph, args.data_root)
    print(f"## {graph}: {dataset.num_nodes:,} vertices, {len(dataset.indices):,} edges", flush=True)
    for kind in ["gcn", "sage"] + (["gat"] if first and not args.skip_gat else []):
        ours = attempt(f"gnnrun {kind}", lambda k=kind: gnnrun_full(k, dataset, device, args))
        paths = ["edge_index"] if kind == "gat" else ["csr", "edge_index"]
        peers = {
            p: attempt(f"PyG {kind} {p}", lambda k=kind, p=p: pyg_full(k, p, dataset, device, args))
            for p in paths
        }
        fastest = min((f for f in peers.values() if "s" in f), key=lambda f: f["s"], default={})
        entry = {"graph": graph, "work": f"full {kind}", "gnnrun": ours, **peers}
        if args.cpu_baseline and device.type == "cuda" and kind != "gat":
            entry["gnnrun_cpu"] = attempt(
                f"gnnrun {kind} cpu",
                lambda k=kind: gnnrun_full(k, dataset, torch.device("cpu"), args),
            )
        cells.append(entry)
        goal = GOALS["gat" if kind == "gat" else "full"]
        rows.append(
            [
                graph,
                f"full {kind}",
                cell(ours),
                cell(peers.get("csr", {})),
                cell(peers["edge_index"]),
                verdict(ratio(fastest, ours), goal),
                verdict(ratio(entry.get("gnnrun_cpu", {}), ours), GOALS["cpu"]),
            ]
        )
        print("  " + " | ".join(rows[-1][1:]), flush=True)
    if first:
        batches = sampled_minibatches(dataset, args.warmup + args.epochs * 4)
        ours = attempt("gnnrun minibatch", lambda: gnnrun_minibatch(batches, dataset, device, args))
        peer = attempt("PyG minibatch", lambda: pyg_minibatch(batches, dataset, device, args))
        cells.append({"graph": graph, "work": "minibatch sage", "gnnrun": ours, "edge_index": peer})
        rows.append(
            [
                graph,
                "minibatch step sage",
                cell(ours),
                "",
                cell(peer),
                verdict(ratio(peer, ours), GOALS["minibatch"]),
                "",
            ]
        )
        print("  " + " | ".join(rows[-1][1:]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument(
        "--graphs",
        help="comma-separated datasets (default: synthetic-medium,synthetic-large on a GPU; "
        "synthetic-small on a CPU, where PyG's CSR GCN of synthetic-medium passed 18 GB)",
    )
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs (4x as many steps)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--cpu-baseline", action="store_true", help="gnnrun's epoch on the CPU")
    parser.add_argument("--skip-gat", action="store_true")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--quick", action="store_true", help="synthetic-tiny, 2 epochs")
    args = parser.parse_args()
    if args.quick:
        args.graphs, args.epochs, args.warmup = "synthetic-tiny", 2, 1
    device = torch.device(
        "cuda"
        if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        else "cpu"
    )
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device cuda: this torch ({torch.__version__}) sees no CUDA device")
    if args.graphs is None:
        args.graphs = (
            "synthetic-medium,synthetic-large" if device.type == "cuda" else "synthetic-small"
        )
    torch.set_num_threads(args.threads)
    try:
        import torch_geometric
    except ImportError:
        sys.exit("PyG is not installed: pip install torch-geometric (or -e '.[bench]')")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"# gnnrun beside PyG {torch_geometric.__version__} on {where}, torch {torch.__version__}, "
        f"{args.threads} CPU threads; median of {args.epochs} epochs ({args.epochs * 4} "
        f"minibatch steps) after {args.warmup} warm-up\n",
        flush=True,
    )
    results: dict = {
        "device": where,
        "torch": torch.__version__,
        "pyg": torch_geometric.__version__,
        "cells": [],
    }
    rows: list[list[str]] = []
    for g, graph in enumerate(args.graphs.split(",")):
        bench_graph(graph, g == 0, device, args, results["cells"], rows)
    headers = [
        "graph",
        "work",
        "gnnrun",
        "PyG csr",
        "PyG edge_index",
        "PyG best / gnnrun",
        "gnnrun CPU / GPU",
    ]
    print("\n| " + " | ".join(headers) + " |\n|" + "---|" * len(headers))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
