#!/usr/bin/env python
"""Aggregation kernel benchmark: gnnrun's native sum/mean against torch's, and against memory.

On a seeded Chung-Lu power-law graph (default 1M vertices, 25M directed edges,
expected degrees Pareto with exponent 2.5 capped at 1% of the vertices; multi-
edges and self-loops kept, rows sorted by source as gnnrun's datasets store
them), one run measures, with `--threads` threads (default 2):

- gnnrun `aggregate` forward, sum and mean, at widths 128 and 256; the
  backward (the same kernel over the transposed CSR) and the transpose itself;
- `torch.sparse.mm` with a CSR sparse tensor (values 1, or 1/in-degree for
  mean) and `index_add_` (gather + scatter, in edge chunks of at most 1 GiB of
  messages, plus a division for mean) on the same inputs;
- the machine's STREAM copy bandwidth (torch copy of 1 GiB float32 arrays,
  counting one read and one write per element, best of several);
- the kernel's effective bandwidth under a stated byte model (the least bytes
  any gather-based kernel moves: indptr and indices once, one x row per edge,
  the output once) as a fraction of STREAM copy;
- a cache block-size sweep (DistGNN Figure 3 in spirit) on this sparse graph
  and on a dense one (default 125k vertices, same 25M edges), with the block
  size the kernel picks by default;
- the same comparison on a smaller graph (`--small-nodes`, `--small-edges`,
  default 200k vertices and 5M edges; `--small-nodes 0` leaves it out);
- with `--precision bf16`, gnnrun's x in bfloat16, as `train.precision=bf16`
  hands it to the kernel (summed in float32, half the bytes in the byte model);
  torch.sparse.mm and DGL stay float32;
- with `--dgl-python PATH` (the python of a venv with DGL 2.1, which does not
  import on gnnrun's torch), DGL's `update_all(copy_u, sum | mean)` on the
  same graphs, threads and allocator, timed the same way
  (scripts/dgl_aggregate.py), its sums checked against gnnrun's, and
  gnnrun's ratio to it: a ratio from one run.

    .venv/bin/python scripts/bench_kernels.py
    .venv/bin/python scripts/bench_kernels.py --json bench.json --repeats 5
    .venv/bin/python scripts/bench_kernels.py --dgl-python DGL_VENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path

from gnnrun.memory import allocator_in_use, reexec_with_allocator

sys.path.insert(0, str(Path(__file__).resolve().parent))

reexec_with_allocator()  # as `gnnrun` does: huge pages and tcmalloc (when installed), before torch is imported

# ruff: noqa: E402
import numpy as np
import torch
from dgl_side import check_dgl_python, features, run_worker

from gnnrun.ops.aggregate import aggregate, transposed_csr
from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op

GIB = 1 << 30
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def chung_lu(
    num_nodes: int, num_edges: int, seed: int, exponent: float = 2.5, cap: float = 0.01
) -> Block:
    """Directed Chung-Lu graph as an in-CSR Block; both endpoints drawn proportional to weight.

    Row lengths come from one multinomial draw over the weights (so the CSR is
    built without sorting the destinations); sources are drawn the same way and
    shuffled, then sorted inside each row.
    """
    rng = np.random.default_rng(seed)
    weight = rng.pareto(exponent - 1, size=num_nodes) + 1.0
    max_degree = max(cap * num_nodes, num_edges / num_nodes)
    for _ in range(3):
        np.minimum(weight, max_degree * weight.mean() / (num_edges / num_nodes), out=weight)
    p = weight / weight.sum()
    in_degree = rng.multinomial(num_edges, p)
    out_degree = rng.multinomial(num_edges, p)
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), out_degree)
    src = torch.from_numpy(src[rng.permutation(num_edges)])
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(torch.from_numpy(in_degree), 0, out=indptr[1:])
    dst = torch.repeat_interleave(torch.arange(num_nodes), torch.from_numpy(in_degree))
    # Sort rows by source: one sort of the (dst, src) keys, which are already grouped by dst.
    keys = torch.sort(dst * num_nodes + src).values
    indices = keys - dst * num_nodes
    del keys, dst, src
    return Block(indptr, indices, num_nodes)


def timed(fn, repeats: int, warmup: bool = True) -> tuple[float, object]:
    """Median wall time in seconds of `repeats` calls (after one warm-up), and the last result."""
    result = fn() if warmup else None
    times = []
    for _ in range(repeats):
        del result
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def stream_copy_gbs(repeats: int = 6) -> float:
    a = torch.ones(GIB // 4, dtype=torch.float32)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - start)
    return 2 * a.numel() * 4 / best / 1e9


def model_bytes(block: Block, width: int, elem: int = 4) -> int:
    """indptr + indices once, one x row gathered per edge, the output written once."""
    return (
        block.indptr.numel() * 8
        + block.num_edges * block.indices.element_size()
        + block.num_edges * width * elem
        + block.num_dst * width * elem
    )


def sparse_csr(block: Block, mean: bool) -> torch.Tensor:
    values = torch.ones(block.num_edges, dtype=torch.float32)
    if mean:
        inv = 1.0 / block.in_degrees().clamp(min=1).float()
        values = torch.repeat_interleave(inv, block.in_degrees())
    return torch.sparse_csr_tensor(
        block.indptr, block.indices, values, size=(block.num_dst, block.num_src)
    )


def index_add(block: Block, x: torch.Tensor, mean: bool, dst: torch.Tensor) -> torch.Tensor:
    out = x.new_zeros((block.num_dst, x.shape[1]))
    chunk = max(1, GIB // (x.shape[1] * x.element_size()))
    for lo in range(0, block.num_edges, chunk):
        hi = min(lo + chunk, block.num_edges)
        out.index_add_(0, dst[lo:hi], x.index_select(0, block.indices[lo:hi]))
    if mean:
        out /= block.in_degrees().clamp(min=1).float()[:, None]
    return out


def block_rows_op():
    return native_op("csr_aggregate_block_rows", "aggregate")


def default_block_rows(block: Block, width: int) -> int:
    return int(block_rows_op()(block.num_dst, block.num_src, block.num_edges, width, 4))


def sweep(block: Block, args: argparse.Namespace, name: str) -> dict:
    width, repeats = args.widths[0], args.repeats
    op = native_op("csr_aggregate", "aggregate")
    x = torch.randn(block.num_src, width)
    default = default_block_rows(block, width)
    sizes = [block.num_src]
    size = 1 << (block.num_src.bit_length() - 1)
    while size >= 8192 and len(sizes) < 7:
        if size < block.num_src:
            sizes.append(size)
        size //= 2
    if default not in sizes:
        sizes.append(default)
    rows = []
    for rows_per_block in sorted(sizes, reverse=True):
        seconds, _ = timed(
            lambda b=rows_per_block: op(block.indptr, block.indices, x, False, b), repeats
        )
        rows.append({"block_rows": rows_per_block, "ms": seconds * 1e3})
    best = min(rows, key=lambda r: r["ms"])
    print(
        f"\nblock-size sweep, {name}: {block.num_src:,} vertices, {block.num_edges:,} edges "
        f"(avg degree {block.num_edges / block.num_dst:.0f}), sum, width {width}, "
        f"x = {block.num_src * width * 4 / 2**20:.0f} MiB"
    )
    for r in rows:
        blocks = -(-block.num_src // r["block_rows"])
        tags = []
        if r["block_rows"] == default:
            tags.append("default")
        if r is best:
            tags.append("best")
        label = "no blocking" if blocks == 1 else f"{blocks} blocks"
        print(
            f"  block_rows {r['block_rows']:>9,} ({label:>12}, "
            f"{r['block_rows'] * width * 4 / 2**20:7.1f} MiB of x): {r['ms']:8.1f} ms"
            + (f"  <- {', '.join(tags)}" if tags else "")
        )
    return {
        "graph": name,
        "num_nodes": block.num_src,
        "num_edges": block.num_edges,
        "width": width,
        "default_block_rows": default,
        "best_block_rows": best["block_rows"],
        "rows": rows,
    }


def sparse_graph(args: argparse.Namespace, stream: float, nodes: int, edges: int) -> list[dict]:
    start = time.perf_counter()
    block = chung_lu(nodes, edges, args.seed)
    degree = block.in_degrees()
    print(
        f"\nChung-Lu graph: {block.num_src:,} vertices, {block.num_edges:,} edges, max in-degree "
        f"{int(degree.max()):,}, {int((degree == 0).sum()):,} empty rows, "
        f"built in {time.perf_counter() - start:.1f} s; int64 indices"
    )
    dgl = dgl_side(block, args)
    transpose = native_op("csr_transpose", "aggregate")
    seconds, _ = timed(partial(transpose, block.indptr, block.indices, block.num_src), 1)
    print(f"csr_transpose (once per block, cached for the backward): {seconds * 1e3:.0f} ms")
    transposed_csr(block)
    dst = block.dst_of_edges()
    print(
        "byte model: indptr (8 B/row) + indices (8 B/edge) + one gathered x row per edge "
        "+ the output once; bandwidth as a fraction of STREAM copy"
    )
    runs = []
    for width in args.widths:
        x = torch.from_numpy(features(block.num_src, width)).to(DTYPES[args.precision])
        for reduce in ("sum", "mean"):
            run = compare(block, x, reduce, dst, stream, args, dgl.get((width, reduce)))
            runs.append(
                {"num_nodes": nodes, "num_edges": edges, "transpose_ms": seconds * 1e3, **run}
            )
    return runs


def dgl_side(block: Block, args: argparse.Namespace) -> dict:
    """DGL's runs on this graph, by (width, reduce); empty without --dgl-python."""
    if not args.dgl_python:
        return {}
    with tempfile.TemporaryDirectory(prefix="bench_kernels_") as tmp:
        graph = Path(tmp) / "graph.npz"
        np.savez(graph, indptr=block.indptr.numpy(), indices=block.indices.numpy())
        worker = run_worker(
            args.dgl_python,
            "dgl_aggregate.py",
            [f"--graph={graph}", "--widths", *map(str, args.widths), f"--repeats={args.repeats}"],
            args.threads,
            timeout=3600,
        )
    if "error" in worker:
        sys.exit("the DGL side failed (above)")
    print(
        f"DGL {worker['dgl']} (torch {worker['torch']}, {worker['threads']} threads, "
        f"allocator {worker['allocator']})"
    )
    return {(r["width"], r["reduce"]): r for r in worker["runs"]}


def forward_backward(block: Block, x: torch.Tensor, reduce: str, grad: torch.Tensor):
    return torch.autograd.grad(aggregate(block, x, reduce), x, grad)[0]


def compare(
    block: Block,
    x: torch.Tensor,
    reduce: str,
    dst: torch.Tensor,
    stream: float,
    args: argparse.Namespace,
    dgl: dict | None = None,
) -> dict:
    width, mean = x.shape[1], reduce == "mean"
    t_ours, ours = timed(partial(aggregate, block, x, reduce), args.repeats)
    checksum = float(ours.double().sum())
    # torch.sparse.mm in float32 (it takes no bfloat16 dense side on the CPU).
    a = sparse_csr(block, mean)
    t_sp, theirs = timed(partial(torch.sparse.mm, a, x.float()), args.repeats)
    err = float((ours.float() - theirs).abs().max())
    del theirs, a
    grad = torch.randn(block.num_dst, width).to(x.dtype)
    xg = x.detach().requires_grad_()
    t_fb, _ = timed(partial(forward_backward, block, xg, reduce, grad), max(1, args.repeats - 1))
    t_ia = None
    if not args.skip_index_add:
        t_ia, ref = timed(partial(index_add, block, x, mean, dst), 1, warmup=False)
        err = max(err, float((ours.float() - ref.float()).abs().max()))
        del ref
    del ours
    nbytes = model_bytes(block, width, x.element_size())
    gbs = nbytes / t_ours / 1e9
    ia = "" if t_ia is None else f", index_add_ {t_ia * 1e3:,.0f} ms ({t_ia / t_ours:.1f}x)"
    if dgl is not None:
        # Both sides summed the same deterministic features: the totals agree to float32's
        # rounding (bfloat16's, whose features are rounded) unless the graphs or the
        # reductions differ.
        tolerance = 1e-2 if x.dtype == torch.bfloat16 else 1e-4
        if abs(dgl["checksum"] - checksum) > tolerance * abs(checksum):
            sys.exit(f"DGL's {reduce} total {dgl['checksum']} is not gnnrun's {checksum}")
        ia += f", DGL {dgl['ms']:,.0f} ms (DGL / gnnrun {dgl['ms'] / (t_ours * 1e3):.2f}x)"
    print(
        f"{reduce} width {width}: gnnrun {t_ours * 1e3:,.0f} ms, torch.sparse.mm "
        f"{t_sp * 1e3:,.0f} ms ({t_sp / t_ours:.1f}x){ia}; "
        f"{nbytes / 1e9:.1f} GB in the model -> {gbs:.1f} GB/s = {gbs / stream:.0%} of STREAM; "
        f"forward+backward {t_fb * 1e3:,.0f} ms; max |diff| {err:.1e}"
    )
    return {
        "reduce": reduce,
        "width": width,
        "gnnrun_ms": t_ours * 1e3,
        "sparse_mm_ms": t_sp * 1e3,
        "index_add_ms": None if t_ia is None else t_ia * 1e3,
        "forward_backward_ms": t_fb * 1e3,
        "model_gb": nbytes / 1e9,
        "gnnrun_gbs": gbs,
        "stream_fraction": gbs / stream,
        "max_abs_diff": err,
        "dgl_ms": None if dgl is None else dgl["ms"],
        "dgl_over_gnnrun": None if dgl is None else dgl["ms"] / (t_ours * 1e3),
        "block_rows": default_block_rows(block, width),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000, help="0: no large graph")
    parser.add_argument("--edges", type=int, default=25_000_000)
    parser.add_argument("--small-nodes", type=int, default=200_000, help="0: no small graph")
    parser.add_argument("--small-edges", type=int, default=5_000_000)
    parser.add_argument("--dense-nodes", type=int, default=125_000)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-index-add", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true", help="no block-size sweeps")
    parser.add_argument(
        "--precision",
        choices=sorted(DTYPES),
        default="fp32",
        help="gnnrun's x: bf16 as under train.precision=bf16 (DGL stays float32)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--dgl-python",
        help="the python of a venv with DGL 2.1: also time DGL's aggregation, side by side",
    )
    args = parser.parse_args()
    check_dgl_python(args.dgl_python)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    if native_op("csr_aggregate", "aggregate") is None:
        raise SystemExit("kernels/aggregate.cpp cannot be built: nothing to benchmark")
    results: dict = {"threads": args.threads, "torch": torch.__version__}

    stream = stream_copy_gbs()
    results["stream_copy_gbs"] = stream
    print(
        f"threads {args.threads}; allocator {allocator_in_use()}; "
        f"STREAM copy (torch, 1 GiB float32): {stream:.1f} GB/s"
    )

    results["runs"] = sparse_graph(args, stream, args.nodes, args.edges) if args.nodes else []
    if args.small_nodes:
        results["runs"] += sparse_graph(args, stream, args.small_nodes, args.small_edges)
    results["sweeps"] = []
    if not args.skip_sweep:
        if args.nodes:
            sparse = chung_lu(args.nodes, args.edges, args.seed)
            results["sweeps"].append(sweep(sparse, args, "sparse"))
        dense = chung_lu(args.dense_nodes, args.edges, args.seed + 1)
        results["sweeps"].append(sweep(dense, args, "dense"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
