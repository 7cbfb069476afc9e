#!/usr/bin/env python
"""SAR benchmark: `sar` against its memory baseline `domain_parallel`, and against `cd0` and
`single` for speed.

Every run is a fresh `gnnrun train` subprocess; figures come from its
`metrics.rank<R>.jsonl`. Measured, from one invocation (so ratios compare runs
made under the same load):

1. Peak resident memory per rank of one training epoch above what the rank held
   when it began (`train_rss_growth_mb`: activations, remote rows, gradients),
   and of the whole rank (`peak_rss_mb`, its own VmHWM: torch, the dataset and the
   part included), of `sar`, `sar`
   with prefetch and `domain_parallel` on `--memory-dataset` with each rank
   count of `--ranks`, and the ratio of domain_parallel's largest per-rank
   peak to sar's, for both figures. Also the peak number of remote rows
   alive at once per layer that the algorithm counted, against the remote rows
   a layer needs.
2. Epoch time of `sar`, `sar` with prefetch, `domain_parallel`, `cd0` (Libra
   vertex-cut parts; it refuses GAT) and `single` full batch on `--dataset`:
   per epoch the slowest rank's `epoch_s`, median over the epochs after
   `--warmup`; its split (fwd, bwd, comm = waiting on other ranks, ared, opt)
   is the median over the same epochs, averaged over ranks; bytes per purpose
   per epoch, mean over ranks. Ratios to domain_parallel, cd0 (same rank
   count) and single.

With 2 cores, 2 ranks get one core each and 4 ranks share them; the threads
column says how many threads each rank has.

    .venv/bin/python scripts/bench_sar.py                     # synthetic-medium, model=sage
    .venv/bin/python scripts/bench_sar.py --model gat         # cd0 left out (no GAT)
    .venv/bin/python scripts/bench_sar.py --quick             # synthetic-tiny, 3 epochs: a smoke test
    .venv/bin/python scripts/bench_sar.py --json out.json
    .venv/bin/python scripts/bench_sar.py --skip-speed --ranks 4 \
        --memory-dataset-overrides dataset.num_nodes=1000000,dataset.name=synthetic-1m

Prepared datasets and partitions are kept under `--data-root` (default ./data)
and reused; run directories and checkpoints go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from gnnrun.memory import reexec_with_allocator

reexec_with_allocator()  # as `gnnrun` does, before torch is imported

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fullbatch import available_gib, load, table, threads_note  # noqa: E402
from train_runs import GNNRUN, REPO, epoch_figures, variant_run  # noqa: E402

PHASES = ("fwd", "bwd", "comm", "ared", "opt")
# (label, algorithm, its overrides)
VARIANTS = {
    "sar": ("sar", ("algorithm.prefetch=false",)),
    "sar+prefetch": ("sar", ("algorithm.prefetch=true",)),
    "domain_parallel": ("domain_parallel", ()),
    "cd0": ("cd0", ()),
    "single": ("single", ("algorithm.mode=full",)),
}
MEMORY_VARIANTS = ("sar", "sar+prefetch", "domain_parallel")
SPEED_VARIANTS = ("sar", "sar+prefetch", "domain_parallel", "cd0")


def train_run(
    args,
    tmp: Path,
    tag: str,
    dataset: str,
    label: str,
    ranks: int,
    epochs: int,
    dataset_overrides=(),
):
    algorithm, extra = VARIANTS[label]
    return variant_run(
        args,
        tmp,
        tag,
        dataset,
        label,
        ranks,
        epochs,
        [*dataset_overrides, f"model={args.model}", *args.model_overrides],
        [f"algorithm={algorithm}", *extra],
    )


def memory_figures(run: dict) -> dict:
    records = run["records"]
    last = [records[r][-1] for r in sorted(records)]
    return {
        "peak_gib": [max(rec["peak_rss_mb"] for rec in records[r]) / 1024 for r in sorted(records)],
        # What the training epoch held above the process, dataset and part (None: no VmHWM).
        "train_gib": [
            max((rec.get("train_rss_growth_mb") or 0) for rec in records[r]) / 1024
            for r in sorted(records)
        ],
        "remote_rows_peak": [rec.get("remote_rows_peak") for rec in last],
        "remote_rows": [rec.get("remote_rows") for rec in last],
    }


def memory(args: argparse.Namespace, tmp: Path) -> list[dict]:
    dataset = args.memory_dataset
    print(
        f"\n## Peak memory per rank: {' '.join([dataset, *args.memory_dataset_overrides])}, "
        f"model={args.model}, 1 epoch; load {load()}"
    )
    runs, rows = [], []
    for ranks in args.ranks:
        for label in MEMORY_VARIANTS:
            free = available_gib()
            if free < args.memory_min_free_gib:
                rows.append([ranks, label, f"skipped: {free:.1f} GiB available", "", "", "", ""])
                continue
            run = train_run(
                args, tmp, "memory", dataset, label, ranks, 1, args.memory_dataset_overrides
            )
            if "records" in run:
                run["memory"] = memory_figures(run)
                run.pop("records")
                m = run["memory"]
                rows.append(
                    [
                        ranks,
                        label,
                        " ".join(f"{p:.3f}" for p in m["train_gib"]),
                        f"{max(m['train_gib']):.3f}",
                        f"{max(m['peak_gib']):.2f}",
                        " / ".join(str(p) for p in m["remote_rows_peak"]),
                        " / ".join(str(n) for n in m["remote_rows"]),
                    ]
                )
                print(
                    f"  {label} x{ranks}: training {max(m['train_gib']):.3f} GiB, "
                    f"process {max(m['peak_gib']):.2f} GiB",
                    flush=True,
                )
            else:
                rows.append([ranks, label, "failed", "", "", "", ""])
            runs.append(run)
    print(
        "training: the epoch's peak resident memory above what the rank held when it began "
        "(train_rss_growth_mb: activations, remote rows, gradients), per rank and the max; "
        "process: the whole rank's peak (peak_rss_mb: with torch, the dataset and the part); "
        "remote rows alive at once per layer (input layer first) and the remote rows a "
        "layer needs, per rank"
    )
    table(
        [
            "ranks",
            "algorithm",
            "training GiB per rank",
            "max",
            "process GiB (max)",
            "remote rows peak",
            "remote rows",
        ],
        rows,
    )
    for figure, name in (("train_gib", "training peak"), ("peak_gib", "process peak")):
        for ranks in args.ranks:
            peak = {
                r["label"]: max(r["memory"][figure])
                for r in runs
                if r["ranks"] == ranks and "memory" in r
            }
            for label in ("sar", "sar+prefetch"):
                if peak.get("domain_parallel") and label in peak:
                    print(
                        f"{ranks} ranks: domain_parallel / {label} {name} per rank = "
                        f"{peak['domain_parallel'] / peak[label]:.2f}x"
                    )
    return runs


def speed(args: argparse.Namespace, tmp: Path) -> list[dict]:
    print(
        f"\n## Epoch time: {args.dataset}, model={args.model}, {args.epochs} epochs, "
        f"medians after {args.warmup}; load {load()}"
    )
    plan = [("single", 1)] + [(label, r) for r in args.ranks for label in SPEED_VARIANTS]
    if args.model.startswith("gat"):
        plan = [(label, r) for label, r in plan if label != "cd0"]  # DistGNN refuses GAT
    runs = []
    for label, ranks in plan:
        run = train_run(args, tmp, "epochs", args.dataset, label, ranks, args.epochs)
        if "records" in run:
            run["epochs"] = epoch_figures(run, args.warmup, PHASES)
            run.pop("records")
            print(f"  {label} x{ranks}: {run['epochs']['epoch_s']:.3f} s/epoch", flush=True)
        runs.append(run)
    ok = {(r["label"], r["ranks"]): r["epochs"] for r in runs if "epochs" in r}
    single = ok.get(("single", 1), {}).get("epoch_s")

    def ratio(seconds: float, to: tuple[str, int]) -> str:
        return f"{seconds / ok[to]['epoch_s']:.2f}" if to in ok else ""

    rows = []
    for r in runs:
        if "epochs" not in r:
            rows.append([r["ranks"], r["label"], "failed", *[""] * 10])
            continue
        e = r["epochs"]
        rows.append(
            [
                r["ranks"],
                r["label"],
                threads_note(r["ranks"]),
                f"{e['epoch_s']:.3f}",
                *(f"{e['phases'][k]:.3f}" for k in PHASES),
                " ".join(f"{p}={mb:.1f}" for p, mb in e["mb"].items()),
                ratio(e["epoch_s"], ("domain_parallel", r["ranks"])),
                ratio(e["epoch_s"], ("cd0", r["ranks"])),
                f"{e['epoch_s'] / single:.2f}" if single else "",
            ]
        )
    print("epoch = slowest rank's epoch_s; phases are rank means; comm = waiting on other ranks")
    table(
        [
            "ranks",
            "algorithm",
            "threads",
            "epoch s",
            *PHASES,
            "MB sent per epoch",
            "/domain_parallel",
            "/cd0",
            "/single",
        ],
        rows,
    )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-root", type=Path, default=REPO / "data")
    parser.add_argument("--dataset", default="synthetic-medium")
    parser.add_argument("--memory-dataset", default="synthetic-medium")
    parser.add_argument(
        "--memory-dataset-overrides",
        type=lambda s: s.split(","),
        default=[],
        help="comma-separated dataset settings for the memory runs, e.g. "
        "dataset.num_nodes=1000000,dataset.name=synthetic-1m (give a new name: the prepared "
        "data and partitions are kept under it)",
    )
    parser.add_argument("--model", default="sage", help="sage, sage_gcn, gcn or gat")
    parser.add_argument(
        "--model-overrides",
        type=lambda s: s.split(","),
        default=[],
        help="comma-separated model settings, e.g. model.hidden=128,model.layers=3",
    )
    parser.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="epochs left out of the medians")
    parser.add_argument("--memory-min-free-gib", type=float, default=8.0)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per gnnrun run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--json", type=Path, help="also write all figures to this file")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so that a running gnnrun child is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.quick:
        args.dataset = args.memory_dataset = "synthetic-tiny"
        args.epochs, args.warmup, args.memory_min_free_gib = 3, 1, 1.0
    if args.memory_dataset_overrides and not any(
        o.startswith("dataset.name=") for o in args.memory_dataset_overrides
    ):
        parser.error(
            "--memory-dataset-overrides changes the graph: add dataset.name=<a new name> to it, "
            f"or its prepared data would replace {args.memory_dataset}'s"
        )
    args.data_root = args.data_root.resolve()
    results: dict = {
        "load_before": load(),
        "cores": os.cpu_count(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    print(f"load average before (1/5/15 min): {results['load_before']}")
    for dataset, overrides in {
        (args.dataset, ()),
        (args.memory_dataset, tuple(args.memory_dataset_overrides)),
    }:
        command = [*GNNRUN, "data", "prepare", f"dataset={dataset}", *overrides]
        prepared = subprocess.run(
            [*command, f"paths.data_root={args.data_root}"], cwd=REPO, stdout=subprocess.DEVNULL
        )
        if prepared.returncode != 0:
            sys.exit(f"bench_sar: `{' '.join(command[1:])}` failed (its error is above)")
    with tempfile.TemporaryDirectory(prefix="bench-sar-") as tmp_name:
        tmp = Path(tmp_name)
        if not args.skip_memory:
            results["memory"] = memory(args, tmp)
        if not args.skip_speed:
            results["speed"] = speed(args, tmp)
    results["load_after"] = load()
    print(f"\nload average after (1/5/15 min): {results['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
