#!/usr/bin/env python
"""GAT attention aggregation: the sparse-product path against the reference, on one device.

`gat_aggregate` on a GPU runs `sparse_gat_aggregate` (per head, a sparse CSR
product with the attention weights as values, its backward the transposed product
and a sampled dense product); `gat_aggregate_reference` gathers every edge's
feature row, weights it and scatters it with `index_add`. On a seeded random block
shaped like the first layer of a sampled minibatch (default 50,000 destinations
of 15 in-edges each among 480,000 sources, as a 1000-seed batch with fanouts
15/10/5 on synthetic-large; 4 heads of 128), one run measures each path's forward
and backward (median of `--rounds` after one warm-up, the device synchronised
around each), the bytes it keeps for the backward (tensors saved by autograd,
each storage once), and on a GPU its peak memory. On a CPU the native kernels
(kernels/gat.cpp) are measured too. The outputs and gradients of every path are
checked against the reference before any figure is printed.

    .venv/bin/python scripts/bench_gat.py
    python3 scripts/bench_gat.py --device cuda
    .venv/bin/python scripts/bench_gat.py --dst 5000 --src 40000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from gnnrun.ops.attention import gat_aggregate, gat_aggregate_reference, sparse_gat_aggregate
from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op


def random_block(num_dst: int, num_src: int, degree: int, device: torch.device) -> Block:
    """num_dst destinations, each with `degree` in-edges from uniform random sources."""
    generator = torch.Generator().manual_seed(0)
    indices = torch.randint(0, num_src, (num_dst * degree,), generator=generator)
    indptr = torch.arange(0, num_dst * degree + 1, degree)
    return Block(indptr, indices, num_src).to(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saved_bytes(fn: Callable, args: tuple) -> int:
    """Bytes of the tensors autograd keeps for the backward of fn(*args), each storage once."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
    return sum(n for ptr, n in storages.items() if ptr not in inputs)  # beyond the inputs


def measure(fn: Callable, args: tuple, grad_out: torch.Tensor, rounds: int, device) -> dict:
    forward, backward = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    for _ in range(rounds + 1):  # the first round warms up
        synchronize(device)
        start = time.perf_counter()
        out = fn(*args)
        synchronize(device)
        middle = time.perf_counter()
        grads = torch.autograd.grad(out, args[1:4], grad_out)
        synchronize(device)
        forward.append(middle - start)
        backward.append(time.perf_counter() - middle)
    figures = {
        "fwd_ms": 1e3 * statistics.median(forward[1:]),
        "bwd_ms": 1e3 * statistics.median(backward[1:]),
        "saved_mb": saved_bytes(fn, args) / 1e6,
        "out": out.detach(),
        "grads": grads,
    }
    if device.type == "cuda":
        figures["peak_mb"] = (torch.cuda.max_memory_allocated(device) - before) / 1e6
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dst", type=int, default=50_000)
    parser.add_argument("--src", type=int, default=480_000)
    parser.add_argument("--degree", type=int, default=15)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128, help="columns per head")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if min(args.dst, args.src, args.degree, args.heads, args.dim, args.rounds) < 1:
        parser.error("--dst, --src, --degree, --heads, --dim and --rounds: give 1 or more")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch sees no CUDA device; run with --device cpu")
    block = random_block(args.dst, args.src, args.degree, device)
    generator = torch.Generator().manual_seed(1)

    def tensor(*shape):
        return torch.randn(*shape, generator=generator).to(device).requires_grad_()

    feat, el, er = (
        tensor(args.src, args.heads, args.dim),
        tensor(args.src, args.heads),
        tensor(args.dst, args.heads),
    )
    grad_out = torch.randn(args.dst, args.heads, args.dim, generator=generator).to(device)
    paths = {"reference": gat_aggregate_reference, "sparse": sparse_gat_aggregate}
    if device.type == "cpu" and native_op("gat_forward", "gat") is not None:
        paths["native"] = gat_aggregate
    print(f"# {device}: block {args.dst:,} x {args.src:,}, {block.num_edges:,} edges, "
          f"{args.heads} heads of {args.dim}, {torch.get_num_threads()} threads, "
          f"median of {args.rounds} rounds")  # fmt: skip
    results = {}
    for name, fn in paths.items():
        results[name] = measure(fn, (block, feat, el, er), grad_out, args.rounds, device)
    reference = results["reference"]
    for figures in results.values():
        torch.testing.assert_close(figures["out"], reference["out"], rtol=1e-4, atol=1e-4)
        for got, want in zip(figures["grads"], reference["grads"], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    peak = "peak MB |" if device.type == "cuda" else ""
    print(
        f"| path | forward ms | backward ms | reference / path (fwd+bwd) | kept for backward MB | {peak}"
    )
    print("|---|---|---|---|---|" + ("---|" if peak else ""))
    total = reference["fwd_ms"] + reference["bwd_ms"]
    for name, f in results.items():
        row = (f"| {name} | {f['fwd_ms']:.1f} | {f['bwd_ms']:.1f} | "
               f"{total / (f['fwd_ms'] + f['bwd_ms']):.2f}x | {f['saved_mb']:.0f} |")  # fmt: skip
        print(row + (f" {f['peak_mb']:.0f} |" if peak else ""))


if __name__ == "__main__":
    main()
