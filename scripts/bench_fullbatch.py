#!/usr/bin/env python
"""Full-batch benchmark: DistGNN's cd0 / cdr / zero_comm, single-rank speed, kernel blocking, memory.

DistGNN's Table 3 and Figure 3 in spirit, on this machine. Measured:

1. Epoch time of `cd0`, `cdr` and `zero_comm` (`model=sage_gcn`, 3 x 256) on
   `synthetic-medium` with 1, 2 and 4 ranks (Libra vertex-cut parts), plus
   `algorithm=single algorithm.mode=full` as the one-process reference. Every
   run is a fresh `gnnrun train` subprocess; figures come from its
   `metrics.rank<R>.jsonl`. The epoch time of an epoch is the slowest rank's
   `epoch_s`; the table shows its median over the epochs after the warm-up
   (`--warmup` epochs, and for cdr at least 2 x `algorithm.delay_epochs`: no remote
   aggregate arrives before epoch `delay`, and the exchanges in flight, with
   each rank's memory, keep growing for a few epochs more; the figures from
   just after `delay` were 25% faster than the steady state). Phases (fwd, bwd, ared, opt and
   DistGNN's LAT / RAT split: `lat_fwd` is the local aggregation of the
   forward pass, `rat_*_pre/wait/post` the remote aggregation's gather,
   waiting on the all-to-all, scatter-add) are medians over the same epochs,
   averaged over ranks. `wall` is the time between consecutive epoch records
   as rank 0 writes them (seen by polling the metrics file), which also holds
   what the trainer does between epochs (checkpoints, cdr's algorithm state).
   With 2 cores, 2 ranks get one core each and 4 ranks share the 2 cores (two
   single-threaded ranks per core): the table says how many threads each has.
   Targets: cdr within 25% of zero_comm.
2. Single-rank full-batch epoch (forward, backward over a cross entropy on
   every vertex, Adam step), in-process, on a Chung-Lu graph of 200k vertices
   and 5M edges with 128-d features: GraphSAGE-mean and GCN, 3 x 256; with
   `--dgl-python PATH` (the python of a venv with DGL 2.1) DGL's epoch of the
   same model on the same graph, features, labels, threads and allocator
   (scripts/dgl_fullbatch.py), and the ratio (goal: 1.6x DGL's speed). Each
   model at each `--dropouts` value (default 0 and 0.5, the same on both
   sides): without dropout the epoch is the layers alone, as the DGL peers'
   harness times it; 0.5 is what `gnnrun train` runs by default, and most of
   gnnrun's lead there is its fused ReLU-dropout against torch's dropout.
3. The aggregation kernel's cache block-size sweep on a sparse and a dense
   graph (scripts/bench_kernels.py's `sweep`): the block size the kernel picks
   by default and the best one for each density.
4. With `--memory`: peak resident memory per rank (`peak_rss_mb`) of one
   zero_comm epoch on `synthetic-large` with 1, 2 and 4 ranks, and the sum
   (`sage_gcn` at `--memory-hidden` units, 64 by default: at the preset's 256,
   one rank of synthetic-large needs more than this machine's memory).

    .venv/bin/python scripts/bench_fullbatch.py                    # 1-3 (about 20 min at 10 epochs a run; the default is now 20)
    .venv/bin/python scripts/bench_fullbatch.py --memory           # and 4 (a few more minutes)
    .venv/bin/python scripts/bench_fullbatch.py --quick            # tiny sizes: a smoke test
    .venv/bin/python scripts/bench_fullbatch.py --skip-train --skip-sweep --json out.json

Prepared datasets and partitions are kept under `--data-root` (default ./data)
and reused; run directories and checkpoints go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gnnrun.memory import allocator_in_use, reexec_with_allocator

reexec_with_allocator()  # as `gnnrun` does: huge pages and tcmalloc (when installed), before torch is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kernels import chung_lu, sweep  # noqa: E402
from dgl_side import check_dgl_python, run_worker  # noqa: E402
from train_runs import GNNRUN, REPO, read_records, run_train  # noqa: E402

from gnnrun.launch.rank import rank_cpus  # noqa: E402
from gnnrun.ops.precision import autocast  # noqa: E402

MAIN_PHASES = ("fwd", "bwd", "ared", "opt")


def table(headers: list[str], rows: list[list[object]]) -> None:
    """A Markdown table on stdout."""
    cells = [[str(c) for c in row] for row in rows]
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in cells:
        print("| " + " | ".join(row) + " |")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


# --------------------------------------------------------------------- gnnrun train runs


class EpochWatcher(threading.Thread):
    """Notes when rank 0's metrics file gains a line (the wall time between epoch records)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.stamps, self.stop = path, [], threading.Event()

    def run(self) -> None:
        lines = 0
        while not self.stop.is_set():
            try:
                with open(self.path) as f:
                    now = f.read().count("\n")
            except FileNotFoundError:
                now = 0
            stamp = time.perf_counter()
            self.stamps.extend([stamp] * (now - lines))
            lines = now
            self.stop.wait(0.02)


def train_run(
    args: argparse.Namespace,
    tmp: Path,
    dataset: str,
    algorithm: str,
    ranks: int,
    epochs: int,
    tag: str,
    extra: tuple[str, ...] = (),
) -> dict:
    """One `gnnrun train` subprocess; its per-rank, per-epoch records."""
    name = f"{tag}-{dataset}-{algorithm}-{ranks}"
    run_dir = tmp / f"run-{name}"
    overrides = [
        f"dataset={dataset}",
        "model=sage_gcn",
        f"algorithm={algorithm}",
        f"cluster.nprocs={ranks}",
        f"train.epochs={epochs}",
        "train.eval_every=100000",
        f"hydra.run.dir={run_dir}",
        f"train.checkpoint_dir={tmp / ('ckpt-' + name)}",
        # Only the final checkpoint: cdr's state (every exchange in flight, about
        # 1 GB per rank on synthetic-small) written mid-run, and the kernel writing
        # it back afterwards, would slow the epochs measured after it.
        f"train.checkpoint_every={epochs + 1}",
        f"paths.data_root={args.data_root}",
        *extra,
    ]
    if algorithm == "single":
        overrides.append("algorithm.mode=full")
    if algorithm == "cdr":
        overrides += [
            f"algorithm.delay_epochs={args.delay}",
            f"algorithm.bins={args.bins}",
            f"algorithm.backward={args.backward}",
        ]
    watcher = EpochWatcher(run_dir / "metrics.rank0.jsonl")
    watcher.start()
    start = time.perf_counter()
    try:
        returncode = run_train(overrides, tmp / f"{name}.log", args.timeout)
    finally:
        watcher.stop.set()
        watcher.join()
    result = {
        "dataset": dataset,
        "algorithm": algorithm,
        "ranks": ranks,
        "epochs": epochs,
        "run_s": time.perf_counter() - start,
        "returncode": returncode,
        "command": "gnnrun train " + " ".join(overrides),
    }
    if returncode != 0:
        tail = (tmp / f"{name}.log").read_text()[-2000:]
        result["error"] = tail
        print(f"  {name}: FAILED (exit {returncode}); log tail:\n{tail}", file=sys.stderr)
        return result
    result["records"] = read_records(run_dir)
    result["wall_between_records"] = [
        b - a for a, b in zip(watcher.stamps, watcher.stamps[1:], strict=False)
    ]
    return result


def summarize_run(run: dict, skip: int) -> dict:
    """Medians over the epochs after `skip`: epoch time (slowest rank), phases (rank mean)."""
    records = run["records"]
    epochs = len(records[0])
    keep = list(range(min(skip, epochs - 1), epochs))
    epoch_s = [max(records[r][e]["epoch_s"] for r in records) for e in keep]

    def phase(name: str) -> float:
        return statistics.fmean(
            statistics.median(records[r][e]["time"].get(name, 0.0) for e in keep) for r in records
        )

    names = sorted({k for r in records for rec in records[r] for k in rec["time"]})
    phases = {k: phase(k) for k in names if not k.endswith("_exact") and k != "eval"}
    # Interval i ends with record i + 1: checkpoint i, epoch i + 1; the last one also evaluates.
    walls = run["wall_between_records"][max(0, keep[0] - 1) : -1]
    out = {
        "epochs_kept": keep,
        "epoch_s": statistics.median(epoch_s),
        "wall_s": statistics.median(walls) if walls else None,
        "phases": phases,
        "split_fraction": statistics.fmean(
            records[r][-1].get("split_fraction", 0.0) for r in records
        ),
        "drpa_mb": statistics.fmean(
            statistics.median(records[r][e]["bytes"].get("drpa", 0) for e in keep) / 1e6
            for r in records
        ),
        "allreduce_mb": statistics.fmean(
            statistics.median(records[r][e]["bytes"].get("allreduce", 0) for e in keep) / 1e6
            for r in records
        ),
        "peak_rss_mb": [max(rec["peak_rss_mb"] for rec in records[r]) for r in sorted(records)],
    }
    last = records[0][-1]
    out["final"] = {k: v for k, v in last.items() if k.endswith(("_acc", "_auc"))}
    return out


def threads_note(ranks: int) -> str:
    cpus, threads = rank_cpus(0, ranks, 0, 0)
    per_core = max(1, ranks // max(1, os.cpu_count() or 1))
    return f"{threads} thr" + (f", {per_core}/core" if per_core > 1 else "")


def training(args: argparse.Namespace, tmp: Path) -> list[dict]:
    print(
        f"\n## Full-batch epochs: {args.dataset}, model=sage_gcn (3 x 256), "
        f"{args.epochs} epochs, cdr delay {args.delay} bins {args.bins} backward {args.backward}; load {load()}"
    )
    print(f"{os.cpu_count()} cores; threads per rank set by gnnrun (cluster.threads_per_rank=0)")
    runs = []
    plan = [(1, "single")] + [(r, a) for r in args.ranks for a in args.algorithms]
    for ranks, algorithm in plan:
        t0 = time.perf_counter()
        run = train_run(args, tmp, args.dataset, algorithm, ranks, args.epochs, "epochs")
        if "records" in run:
            # Every bin's sums in use, and the exchanges in flight at their steady number.
            skip = (
                max(args.warmup, 2 * args.delay, args.delay + args.bins)
                if algorithm == "cdr"
                else args.warmup
            )
            run["summary"] = summarize_run(run, skip)
            s = run["summary"]
            print(
                f"  {algorithm:>9} x{ranks}: {s['epoch_s']:.3f} s/epoch "
                f"(run {time.perf_counter() - t0:.0f} s, load {load()})",
                flush=True,
            )
        run.pop("records", None)
        runs.append(run)

    ok = [r for r in runs if "summary" in r]
    zero = {r["ranks"]: r["summary"]["epoch_s"] for r in ok if r["algorithm"] == "zero_comm"}
    single = next((r["summary"]["epoch_s"] for r in ok if r["algorithm"] == "single"), None)
    print(
        "\nepoch = slowest rank's epoch_s, median over the kept epochs; wall = time between "
        "rank 0's epoch records (epoch + checkpoint; the last, with evaluation, left out); "
        "phases are rank means.\n"
        "LAT = lat_fwd (forward local aggregation); RAT pre/wait/post summed over forward and "
        "backward; other = epoch - fwd - bwd - ared - opt (cdr: waits at the epoch's end)."
    )
    rows = []
    for r in runs:
        if "summary" not in r:
            rows.append([r["ranks"], r["algorithm"], "failed", *[""] * 14])
            continue
        s, p = r["summary"], r["summary"]["phases"]

        def rat(part: str, p=p) -> float:
            return p.get(f"rat_fwd_{part}", 0.0) + p.get(f"rat_bwd_{part}", 0.0)

        other = s["epoch_s"] - sum(p.get(k, 0.0) for k in MAIN_PHASES)
        vs_zero = s["epoch_s"] / zero[r["ranks"]] if r["ranks"] in zero else None
        rows.append(
            [
                r["ranks"],
                r["algorithm"],
                threads_note(r["ranks"]),
                f"{s['epochs_kept'][0]}-{s['epochs_kept'][-1]}",
                f"{s['epoch_s']:.3f}",
                f"{s['wall_s']:.3f}" if s["wall_s"] is not None else "",
                f"{p.get('fwd', 0):.3f}",
                f"{p.get('bwd', 0):.3f}",
                f"{p.get('ared', 0):.3f}",
                f"{p.get('opt', 0):.3f}",
                f"{other:.3f}",
                f"{p.get('lat_fwd', 0):.3f}" if "lat_fwd" in p else "",
                f"{rat('pre'):.3f}/{rat('wait'):.3f}/{rat('post'):.3f}"
                if "rat_fwd_pre" in p
                else "",
                f"{s['split_fraction']:.1%}" if r["algorithm"] != "single" else "",
                f"{s['drpa_mb']:.0f}",
                f"{vs_zero:.2f}" if vs_zero else "",
                f"{s['epoch_s'] / single:.2f}" if single else "",
            ]
        )
    table(
        [
            "ranks",
            "algorithm",
            "threads",
            "epochs",
            "epoch s",
            "wall s",
            "fwd",
            "bwd",
            "ared",
            "opt",
            "other",
            "LAT fwd",
            "RAT pre/wait/post",
            "split",
            "DRPA MB",
            "/zero_comm",
            "/single",
        ],
        rows,
    )
    for ranks in args.ranks:
        cdr = next(
            (r for r in ok if r["algorithm"] == "cdr" and r["ranks"] == ranks and ranks > 1), None
        )
        if cdr and ranks in zero:
            ratio = cdr["summary"]["epoch_s"] / zero[ranks]
            print(
                f"target cdr <= 1.25 x zero_comm, {ranks} ranks: {ratio:.2f}x -> "
                f"{'met' if ratio <= 1.25 else 'NOT met'}"
            )
    return runs


# ------------------------------------------------------------- single rank against DGL


def single_rank(args: argparse.Namespace) -> list[dict]:
    from gnnrun.models import build_model
    from gnnrun.models.registry import ModelConfig

    torch.set_num_threads(args.threads)
    nodes, edges = args.dgl_nodes, args.dgl_edges
    print(
        f"\n## Single rank against DGL 2.1: Chung-Lu {nodes:,} vertices, {edges:,} edges, "
        f"128-d features, {args.threads} threads, in-process, allocator {allocator_in_use()}, "
        f"gnnrun in {args.precision} (DGL in fp32); "
        f"load {load()}"
    )
    block = chung_lu(nodes, edges, args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(nodes, 128, generator=generator)
    label = torch.randint(0, 16, (nodes,), generator=generator)
    epochs = args.dgl_warmup + args.dgl_repeats
    results, rows = [], []
    for name, dropout in ((m, p) for m in ("sage", "gcn") for p in args.dropouts):
        fields = {"aggregator": "mean"} if name == "sage" else {}
        cfg = ModelConfig(name=name, hidden=256, layers=3, dropout=dropout, **fields)
        torch.manual_seed(args.seed)
        model = build_model(cfg, 128, 16)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        blocks = [block] * cfg.layers
        times = []
        for _ in range(epochs):
            start = time.perf_counter()
            with autocast(args.precision, torch.device("cpu")):
                loss = torch.nn.functional.cross_entropy(model(blocks, x), label)
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
        del model, optimizer
        seconds = statistics.median(times[args.dgl_warmup :])
        dgl = dgl_epoch(args, name, cfg, block, x, label, epochs)
        results.append(
            {
                "model": name,
                "dropout": dropout,
                "precision": args.precision,
                "epoch_s": seconds,
                "all": times,
                **dgl,
            }
        )
        ratio = dgl["dgl_s"] / seconds if "dgl_s" in dgl else None
        rows.append(
            [
                f"{name} (mean)" if name == "sage" else name,
                f"{dropout:g}",
                f"{seconds:.3f}",
                " ".join(f"{t:.2f}" for t in times),
                f"{dgl['dgl_s']:.3f}" if ratio else dgl.get("dgl_skipped", "failed"),
                f"{ratio:.2f}x" if ratio else "",
                ("met" if ratio >= 1.6 else "NOT met") if ratio else "",
            ]
        )
    print(
        f"3 layers x 256, dropout after each hidden layer as in the table (none on the input), "
        f"the same on both sides (gnnrun's fused ReLU-dropout, DGL's torch dropout), cross "
        f"entropy over all {nodes:,} vertices, Adam; median of {args.dgl_repeats} epochs after "
        f"{args.dgl_warmup} warm-up, on both sides"
    )
    table(
        [
            "model",
            "dropout",
            "epoch s",
            "all epochs s",
            "DGL 2.1 s",
            "DGL / gnnrun",
            "goal >= 1.6x",
        ],
        rows,
    )
    print(f"load after: {load()}")
    return results


def dgl_epoch(args, name: str, cfg, block, x, label, epochs: int) -> dict:
    """DGL's epoch of the same model on the same graph, features and labels (its own venv)."""
    if not args.dgl_python:
        return {"dgl_skipped": "no --dgl-python"}
    with tempfile.TemporaryDirectory(prefix="bench_fullbatch_") as tmp:
        data = Path(tmp) / "graph.npz"
        np.savez(
            data,
            indptr=block.indptr.numpy(),
            indices=block.indices.numpy(),
            feat=x.numpy(),
            label=label.numpy(),
            train_idx=np.arange(block.num_dst),
            num_classes=16,
        )
        worker = run_worker(
            args.dgl_python,
            "dgl_fullbatch.py",
            [
                f"--data={data}",
                f"--model={name}",
                f"--layers={cfg.layers}",
                f"--hidden={cfg.hidden}",
                f"--dropout={cfg.dropout}",
                f"--input-dropout={cfg.input_dropout}",
                "--lr=0.01",
                "--weight-decay=0",
                f"--epochs={epochs}",
                f"--warmup={args.dgl_warmup}",
                f"--seed={args.seed}",
            ],
            args.threads,
            args.timeout,
        )
    if "error" in worker:
        return {"dgl_error": worker["error"], "dgl_command": worker["command"]}
    return {
        "dgl_s": worker["epoch_s"],
        "dgl_all": [e["epoch_s"] for e in worker["epochs"]],
        "dgl_versions": {"dgl": worker["dgl"], "torch": worker["torch"]},
        "dgl_allocator": worker["allocator"],
        "dgl_command": worker["command"],
    }


# ------------------------------------------------------------------- block-size sweep


def block_sweep(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    print(f"\n## Aggregation kernel block-size sweep (scripts/bench_kernels.py); load {load()}")
    kernel_args = argparse.Namespace(widths=[128], repeats=args.sweep_repeats)
    sweeps = [
        sweep(chung_lu(args.sweep_nodes, args.sweep_edges, args.seed), kernel_args, "sparse"),
        sweep(
            chung_lu(args.sweep_dense_nodes, args.sweep_edges, args.seed + 1), kernel_args, "dense"
        ),
    ]
    print()
    rows = []
    for s in sweeps:
        ms = {r["block_rows"]: r["ms"] for r in s["rows"]}
        no_blocking = ms.get(s["num_nodes"])
        rows.append(
            [
                s["graph"],
                f"{s['num_nodes']:,}",
                f"{s['num_edges'] / s['num_nodes']:.0f}",
                f"{s['default_block_rows']:,} ({ms[s['default_block_rows']]:.0f} ms)",
                f"{s['best_block_rows']:,} ({ms[s['best_block_rows']]:.0f} ms)",
                f"{no_blocking:.0f}" if no_blocking else "",
                f"{ms[s['default_block_rows']] / ms[s['best_block_rows']]:.2f}",
            ]
        )
    table(
        [
            "graph",
            "vertices",
            "avg degree",
            "default block_rows",
            "best block_rows",
            "no blocking ms",
            "default/best",
        ],
        rows,
    )
    print(f"load after: {load()}")
    return sweeps


# --------------------------------------------------------------------------- memory


def memory(args: argparse.Namespace, tmp: Path) -> list[dict]:
    dataset = args.memory_dataset
    width = (f"model.hidden={args.memory_hidden}",)
    print(
        f"\n## Peak memory per rank: {dataset}, zero_comm, sage_gcn 3 x {args.memory_hidden}, "
        f"1 epoch; load {load()}"
    )
    subprocess.run(
        [*GNNRUN, "data", "prepare", f"dataset={dataset}", f"paths.data_root={args.data_root}"],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    results, rows = [], []
    for ranks in args.ranks:
        free = available_gib()
        if free < args.memory_min_free_gib:
            print(f"  {ranks} ranks skipped: {free:.1f} GiB available < {args.memory_min_free_gib}")
            rows.append([ranks, "skipped (memory)", "", "", f"{free:.1f}"])
            continue
        run = train_run(args, tmp, dataset, "zero_comm", ranks, 1, "memory", width)
        if "records" not in run:
            why = "killed (out of memory?)" if "signal 9" in run.get("error", "") else "failed"
            rows.append([ranks, why, "", "", f"{free:.1f}"])
            results.append(run)
            continue
        records = run.pop("records")
        peaks = [max(rec["peak_rss_mb"] for rec in records[r]) / 1024 for r in sorted(records)]
        run.update(peak_gib=peaks, sum_gib=sum(peaks))
        results.append(run)
        rows.append(
            [
                ranks,
                " ".join(f"{p:.2f}" for p in peaks),
                f"{max(peaks):.2f}",
                f"{sum(peaks):.2f}",
                f"{free:.1f}",
            ]
        )
        print(f"  {ranks} ranks: max {max(peaks):.2f} GiB (run {run['run_s']:.0f} s)", flush=True)
    print("peak_rss_mb of each rank process (its VmHWM: training epoch and the final evaluation)")
    table(["ranks", "peak GiB per rank", "max", "sum", "available GiB before"], rows)
    maxima = [max(r["peak_gib"]) for r in results if "peak_gib" in r]
    if len(maxima) > 1:
        falls = all(b < a for a, b in zip(maxima, maxima[1:], strict=False))
        print(f"per-rank peak falls as ranks grow: {'yes' if falls else 'NO'}")
    print(f"load after: {load()}")
    return results


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-root", type=Path, default=REPO / "data")
    parser.add_argument("--dataset", default="synthetic-medium")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2, help="epochs left out of the medians")
    parser.add_argument("--delay", type=int, default=5, help="cdr's algorithm.delay_epochs")
    parser.add_argument(
        "--bins",
        type=int,
        default=None,
        help="cdr's algorithm.bins (default: one per epoch of delay)",
    )
    parser.add_argument(
        "--backward",
        default="autograd",
        choices=("autograd", "delayed", "exact"),
        help="cdr's algorithm.backward",
    )
    parser.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    parser.add_argument(
        "--algorithms", type=lambda s: s.split(","), default=["cd0", "cdr", "zero_comm"]
    )
    parser.add_argument("--threads", type=int, default=2, help="in-process parts (2 and 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help="gnnrun's, in part 2"
    )
    parser.add_argument("--dgl-nodes", type=int, default=200_000)
    parser.add_argument("--dgl-edges", type=int, default=5_000_000)
    parser.add_argument("--dgl-warmup", type=int, default=1)
    parser.add_argument("--dgl-repeats", type=int, default=4)
    parser.add_argument(
        "--dropouts",
        type=float,
        nargs="+",
        default=[0.0, 0.5],
        help="part 2's hidden dropout, each timed apart: 0 times the layers alone (as the DGL "
        "peers' harness does), 0.5 is model.dropout's default (what `gnnrun train` runs)",
    )
    parser.add_argument("--sweep-nodes", type=int, default=1_000_000)
    parser.add_argument("--sweep-dense-nodes", type=int, default=125_000)
    parser.add_argument("--sweep-edges", type=int, default=25_000_000)
    parser.add_argument("--sweep-repeats", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="also measure peak memory (4)")
    parser.add_argument("--memory-dataset", default="synthetic-large")
    parser.add_argument("--memory-min-free-gib", type=float, default=8.0)
    parser.add_argument(
        "--memory-hidden",
        type=int,
        default=64,
        help="hidden units of the memory runs (synthetic-large fits 24 GiB at 64, not at 256)",
    )
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-dgl", action="store_true", help="skip part 2")
    parser.add_argument(
        "--dgl-python", help="the python of a venv with DGL 2.1: DGL's epochs in part 2"
    )
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per gnnrun run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--json", type=Path, help="also write all figures to this file")
    args = parser.parse_args()
    check_dgl_python(args.dgl_python)
    # SIGTERM unwinds like Ctrl-C, so that a running gnnrun child is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.quick:
        args.dataset = args.memory_dataset = "synthetic-tiny"
        args.epochs, args.warmup, args.delay = 4, 1, 1
        args.dgl_nodes, args.dgl_edges, args.dgl_repeats = 20_000, 200_000, 2
        args.sweep_nodes, args.sweep_dense_nodes, args.sweep_edges = 100_000, 12_500, 1_000_000
        args.sweep_repeats, args.memory_min_free_gib = 1, 1.0
    if args.bins is None:
        args.bins = max(args.delay, 1)  # cdr's default: one bin per epoch of delay
    args.data_root = args.data_root.resolve()

    results: dict = {
        "load_before": load(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    print(f"load average before (1/5/15 min): {results['load_before']}")
    with tempfile.TemporaryDirectory(prefix="bench-fullbatch-") as tmp_name:
        tmp = Path(tmp_name)
        if not args.skip_train:
            results["training"] = training(args, tmp)
        if not args.skip_dgl:
            results["single_rank_vs_dgl"] = single_rank(args)
        if not args.skip_sweep:
            results["block_sweep"] = block_sweep(args)
        if args.memory:
            results["memory"] = memory(args, tmp)
    results["load_after"] = load()
    print(f"\nload average after (1/5/15 min): {results['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
