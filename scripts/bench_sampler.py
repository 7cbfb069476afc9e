"""Neighbour-sampling throughput: sampled edges per second of the sampling training runs.

Each batch's blocks come from `gnnrun.algorithms.sample_minibatch` over a
`LocalGraphSource`, keyed by `step_key` as a training step's are: the path
`algorithm=single` and `minibatch` take (DistDGL's and the pipeline's ranks ask
other ranks for some of the rows, through the same kernels).

Graph: a seeded Chung-Lu power-law graph (default 1M nodes, 25M directed edges,
i.e. 12.5M undirected pairs stored both ways, degree exponent 2.5, vertex ids
shuffled so that hubs are spread over the id range), drawn vectorised here.

For each fanout list and thread count, `--batches` batches of `--batch-size`
distinct random seeds are sampled (after two warm-up batches); the figure is
the total number of block edges over the total wall time, compaction included. The
numpy reference and the share of compaction are timed hop by hop on the kernels
(`gnnrun.ops.sampling`: `sample_neighbors`, `compact`), the only level that chooses
between native and reference.

Fanouts are in gnnrun's order (PyG's: the first entry is what each seed gets).
`[15, 10, 5]` is DGL's `NeighborSampler([5, 10, 15])`, and `[5, 10, 15]` is
DGL's `[15, 10, 5]`.

With `--dgl-python PATH` (the python of a venv with DGL 2.1, which does not
import on gnnrun's torch), DGL's `NeighborSampler.sample_blocks` samples the same
batches of the same graph with the same fanouts and threads
(scripts/dgl_sample.py), and each list gets gnnrun's ratio to it: a ratio from
one run.

    .venv/bin/python scripts/bench_sampler.py [--nodes 1000000 --edges 25000000]
    .venv/bin/python scripts/bench_sampler.py --dgl-python DGL_VENV/bin/python
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gnnrun.algorithms import LocalGraphSource, sample_minibatch, step_key
from gnnrun.data.dataset import GraphDataset
from gnnrun.ops.native import native_op
from gnnrun.ops.sampling import compact, sample_neighbors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dgl_side import check_dgl_python, run_worker  # noqa: E402

FANOUTS = ([15, 10, 5], [5, 10, 15])  # gnnrun's order


def chung_lu(num_nodes: int, num_edges: int, exponent: float, seed: int):
    """A symmetric in-CSR (int64 indptr, int32 indices) with power-law expected degrees."""
    rng = np.random.default_rng(seed)
    rank = np.arange(1, num_nodes + 1, dtype=np.float64)
    weight = rank ** (-1.0 / (exponent - 1.0))
    cumulative = np.cumsum(weight)
    cumulative /= cumulative[-1]
    relabel = rng.permutation(num_nodes)
    pairs = num_edges // 2

    def endpoints() -> np.ndarray:
        target = rng.random(pairs)
        order = np.argsort(target)  # searching in sorted order walks the cdf forwards
        position = np.empty(pairs, dtype=np.int64)
        position[order] = np.searchsorted(cumulative, target[order], side="right")
        return relabel[np.minimum(position, num_nodes - 1)]

    u, v = endpoints(), endpoints()
    src = np.concatenate([u, v])
    dst = np.concatenate([v, u])
    by_dst = np.argsort(dst, kind="stable")
    indices = src[by_dst].astype(np.int32)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    return torch.from_numpy(indptr), torch.from_numpy(indices)


def busy_cores() -> tuple[float, float]:
    """(CPU seconds spent busy by the whole machine, by this process) so far."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        machine = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        machine = float("nan")
    return machine, time.process_time()


def graph_source(indptr: torch.Tensor, indices: torch.Tensor) -> LocalGraphSource:
    """The drawn graph as training reads it: a dataset without features or labels."""
    n = indptr.numel() - 1
    empty = np.zeros(0, dtype=np.int64)
    dataset = GraphDataset(
        name="chung-lu", indptr=indptr.numpy(), indices=indices.numpy(),
        feat=np.zeros((n, 0), dtype=np.float32), label=np.zeros(n, dtype=np.int64),
        train_idx=empty, val_idx=empty, test_idx=empty, num_classes=1,
    )  # fmt: skip
    return LocalGraphSource(dataset)


def rate(source, batches, fanouts, seed=0) -> tuple[float, float, float]:
    """Training's sampling: (sampled edges per second, mean edges per batch, cores busy
    with other work meanwhile)."""
    for i, warm in enumerate(batches[:2]):
        sample_minibatch(source, warm, fanouts, step_key(seed + 1, 0, i))
    edges = 0
    machine0, own0 = busy_cores()
    start = time.perf_counter()
    for i, seeds in enumerate(batches):
        blocks = sample_minibatch(source, seeds, fanouts, step_key(seed, 0, i))
        edges += sum(b.num_edges for b in blocks)
    elapsed = time.perf_counter() - start
    machine1, own1 = busy_cores()
    others = max(0.0, ((machine1 - machine0) - (own1 - own0)) / elapsed)
    return edges / elapsed, edges / len(batches), others


def kernel_loop(indptr, indices, batches, fanouts, native, seed=0) -> tuple[float, float]:
    """The same hops on the kernels alone, each call timed: (sampled edges per second,
    the share of the time spent compacting: relabelling each hop into a block and
    finding the next hop's frontier, in one pass)."""
    sampling = compacting = 0.0
    edges = 0
    for i, seeds in enumerate(batches):
        dst = seeds
        for layer, fanout in enumerate(fanouts):
            start = time.perf_counter()
            offsets, neighbours = sample_neighbors(
                indptr, indices, dst, fanout, seed + i, layer, native=native
            )
            middle = time.perf_counter()
            dst = compact(dst, offsets, neighbours, native=native)[2]
            sampling += middle - start
            compacting += time.perf_counter() - middle
            edges += int(neighbours.numel())
    return edges / (sampling + compacting), compacting / (sampling + compacting)


def dgl_side(args, indptr, indices, batches) -> dict:
    """DGL's sampled edges per second by fanout list (gnnrun's order); empty without
    --dgl-python."""
    if not args.dgl_python:
        return {}
    with tempfile.TemporaryDirectory(prefix="bench_sampler_") as tmp:
        graph = Path(tmp) / "graph.npz"
        np.savez(graph, indptr=indptr.numpy(), indices=indices.numpy(), batches=np.stack(batches))
        worker = run_worker(
            args.dgl_python,
            "dgl_sample.py",
            [
                f"--graph={graph}",
                "--fanouts",
                *(",".join(map(str, f)) for f in FANOUTS),
                f"--repeats={args.repeats}",
            ],
            max(args.threads),
            timeout=3600,
        )
    if "error" in worker:
        sys.exit("the DGL side failed (above)")
    print(f"DGL {worker['dgl']} (torch {worker['torch']}, allocator {worker['allocator']})")
    return {tuple(r["fanouts"]): r for r in worker["runs"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=25_000_000)
    parser.add_argument("--exponent", type=float, default=2.5)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--ref-batches", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument(
        "--dgl-python", help="the python of a venv with DGL 2.1: DGL's sampler, side by side"
    )
    parser.add_argument(
        "--graph-cache",
        help="an .npz to keep the drawn graph in (redrawn if drawn with other arguments)",
    )
    args = parser.parse_args()
    check_dgl_python(args.dgl_python)

    if native_op("sample_neighbors", "sampler") is None:
        raise SystemExit("kernels/sampler.cpp did not build; nothing native to measure")
    start = time.perf_counter()
    cached = (
        np.load(args.graph_cache) if args.graph_cache and os.path.exists(args.graph_cache) else None
    )
    key = np.array([args.nodes, args.edges, args.exponent])
    if cached is not None and np.array_equal(cached["key"], key):
        indptr, indices = torch.from_numpy(cached["indptr"]), torch.from_numpy(cached["indices"])
    else:
        indptr, indices = chung_lu(args.nodes, args.edges, args.exponent, seed=0)
        if args.graph_cache:
            np.savez(args.graph_cache, key=key, indptr=indptr.numpy(), indices=indices.numpy())
    deg = indptr[1:] - indptr[:-1]
    print(
        f"Chung-Lu graph: {args.nodes:,} nodes, {indices.numel():,} edges, max degree "
        f"{int(deg.max()):,}, {int((deg == 0).sum()):,} isolated "
        f"({time.perf_counter() - start:.1f} s to draw)"
    )
    rng = np.random.default_rng(1)
    order = rng.permutation(args.nodes)[: args.batches * args.batch_size]
    batches = [torch.from_numpy(b.copy()) for b in order.reshape(args.batches, -1)]

    dgl = dgl_side(args, indptr, indices, batches)
    default_threads = torch.get_num_threads()
    print(
        f"batch {args.batch_size}, {args.batches} batches, best of {args.repeats}; "
        "fanouts in gnnrun order (first entry = each seed's neighbours)"
    )
    source = graph_source(indptr, indices)
    for fanouts in FANOUTS:
        dgl_name = list(reversed(fanouts))
        results = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            best, per_batch, others = 0.0, 0.0, 0.0
            for _ in range(args.repeats):
                r, per_batch, busy = rate(source, batches, fanouts)
                if r > best:
                    best, others = r, busy
            results[threads] = best
            print(
                f"  gnnrun {fanouts} (DGL {dgl_name}), {threads} thread(s): "
                f"{best / 1e6:6.1f} M edges/s  ({per_batch:,.0f} edges/batch, "
                f"{per_batch / best * 1e3:.1f} ms/batch; other jobs busy {others:.1f} cores)"
            )
        torch.set_num_threads(default_threads)
        ref = kernel_loop(indptr, indices, batches[: args.ref_batches], fanouts, native=False)[0]
        top = results[max(results)]
        print(
            f"  numpy reference, {default_threads} thread(s): {ref / 1e6:6.2f} M edges/s; "
            f"native/reference {top / ref:.0f}x"
        )
        if 1 in results and 2 in results:
            print(f"  2-thread speed-up {results[2] / results[1]:.2f}x")
        torch.set_num_threads(1)
        bare, share = max(  # best of the repeats, as the training path's figure is
            kernel_loop(indptr, indices, batches, fanouts, native=True) for _ in range(args.repeats)
        )
        torch.set_num_threads(default_threads)
        print(f"  compaction (relabelling and next frontier), 1 thread: {share:.0%} of sampling")
        if 1 in results:  # what the training path adds to the kernels (blocks, dispatch)
            print(
                f"  the kernels' hops alone, 1 thread: {bare / 1e6:6.1f} M edges/s; "
                f"training path / kernels {results[1] / bare:.2f}x"
            )
        if dgl:
            theirs = dgl[tuple(fanouts)]["edges_per_s"]
            print(
                f"  DGL {dgl_name}, {max(args.threads)} thread(s), same batches: "
                f"{theirs / 1e6:6.1f} M edges/s "
                f"({dgl[tuple(fanouts)]['edges_per_batch']:,.0f} edges/batch); "
                f"gnnrun / DGL {top / theirs:.2f}x "
                f"(goal >= 2x: {'met' if top >= 2 * theirs else 'NOT met'})"
            )


if __name__ == "__main__":
    main()
