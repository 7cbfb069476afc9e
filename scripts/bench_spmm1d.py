#!/usr/bin/env python
"""spmm1d benchmark: MG-GCN's staged 1D SpMM against `single`, `cd0`, `sar` and DGL on one GCN.

Every run is a fresh `gnnrun train` subprocess; figures come from its
`metrics.rank<R>.jsonl`. Measured, from one invocation (so ratios compare runs
made under the same load):

1. Epoch time of `spmm1d` (overlap on and off) on each rank count of `--ranks`,
   `single` full batch on one rank, and `cd0` (Libra vertex cut) and `sar`
   (METIS edge cut) on the same rank counts, with the same dataset and model:
   per epoch the slowest rank's `epoch_s`, median over the epochs after
   `--warmup`. Its split: fwd, bwd, comm (blocked on other ranks), ared, opt,
   and spmm1d's own phases: compute (the tile products), bcast (each
   broadcast's time from issue to arrival, summed; overlapped with compute
   when overlap is on) and wait (blocked on broadcasts); rank means of the
   same medians. Bytes per purpose per epoch, rank means. Ratios to single
   and to cd0 and sar on the same rank count, and to DGL.

   With `--dgl-python PATH` (the python of a venv with DGL 2.1, which does not
   import on gnnrun's torch) also DGL's full-batch GCN on the same graph:
   the prepared dataset gnnrun trains on is exported to a temporary .npz
   (in-edge CSR, features, labels, training vertices) and
   scripts/dgl_fullbatch.py times DGL GraphConv layers on it (self loops,
   symmetric normalisation) with the same widths, dropout, optimizer and loss
   as gnnrun's `model=gcn`, the thread count of `single`, and this script's
   allocator environment (LD_PRELOAD, THP_MEM_ALLOC_ENABLE, as gnnrun's runs
   inherit it); median epoch after `--warmup`, one process, like `single`.
   Without the option the DGL row is skipped, with the reason printed.
2. Peak memory per rank of `spmm1d` with its buffer plan against the same
   algorithm with fresh tensors (`algorithm.buffers=fresh`): the training
   epoch's resident growth (`train_rss_growth_mb`), the whole rank's peak
   (`peak_rss_mb`), and with the plan the dense buffers it counted alive at
   once and their MiB.

The machine: CPU model, cores, memory, and the STREAM copy bandwidth measured
here (bench_kernels.stream_copy_gbs). With 2 cores, 2 ranks get one core each
and 4 ranks share them; the threads column says how many threads each has.

    .venv/bin/python scripts/bench_spmm1d.py                  # synthetic-medium, model=gcn
    .venv/bin/python scripts/bench_spmm1d.py --quick          # synthetic-tiny, 3 epochs: a smoke test
    .venv/bin/python scripts/bench_spmm1d.py --json out.json
    .venv/bin/python scripts/bench_spmm1d.py --skip-memory --dgl-python DGL_VENV/bin/python

Prepared datasets and partitions are kept under `--data-root` (default ./data)
and reused; run directories and checkpoints go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gnnrun.memory import allocator_in_use, reexec_with_allocator

reexec_with_allocator()  # as `gnnrun` does, before torch is imported

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fullbatch import available_gib, load, table, threads_note  # noqa: E402
from bench_kernels import stream_copy_gbs  # noqa: E402
from dgl_side import check_dgl_python, run_worker  # noqa: E402
from train_runs import GNNRUN, REPO, epoch_figures, variant_run  # noqa: E402

from gnnrun.launch.rank import rank_cpus  # noqa: E402

PHASES = ("fwd", "bwd", "comm", "ared", "opt")
SPMM_PHASES = ("spmm1d_compute", "spmm1d_bcast", "spmm1d_wait")
# label -> (algorithm, its overrides)
VARIANTS = {
    "spmm1d": ("spmm1d", ("algorithm.overlap=true", "algorithm.buffers=plan")),
    "spmm1d no overlap": ("spmm1d", ("algorithm.overlap=false", "algorithm.buffers=plan")),
    "spmm1d fresh": ("spmm1d", ("algorithm.overlap=true", "algorithm.buffers=fresh")),
    "single": ("single", ("algorithm.mode=full",)),
    "cd0": ("cd0", ()),
    "sar": ("sar", ()),
}
SPEED_VARIANTS = ("spmm1d", "spmm1d no overlap", "cd0", "sar")
DGL_LABEL = "DGL GraphConv"
DGL_WORKER = "dgl_fullbatch.py"
MEMORY_VARIANTS = ("spmm1d", "spmm1d fresh")


def machine() -> dict:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_gib, 1),
        "stream_copy_gbs": round(stream_copy_gbs(), 1),
    }


def train_run(args, tmp: Path, tag: str, dataset: str, label: str, ranks: int, epochs: int):
    algorithm, extra = VARIANTS[label]
    return variant_run(
        args,
        tmp,
        tag,
        dataset,
        label,
        ranks,
        epochs,
        ["model=gcn", *args.model_overrides],
        [f"algorithm={algorithm}", *extra],
    )


def gnnrun_config(args):
    """The config `gnnrun train` composes for this benchmark's dataset and model."""
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.schemas import register_schemas

    register_schemas()
    overrides = [
        f"dataset={args.dataset}",
        "model=gcn",
        *args.model_overrides,
        f"paths.data_root={args.data_root}",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_objects(compose("config", overrides=overrides))


def export_graph(cfg, path: Path) -> None:
    """The prepared dataset gnnrun trains on, as the .npz dgl_fullbatch.py reads."""
    import numpy as np

    from gnnrun.data import load_prepared

    dataset = load_prepared(cfg.dataset)
    np.savez(
        path,
        indptr=dataset.indptr,
        indices=dataset.indices,
        feat=dataset.feat,
        label=dataset.label,
        train_idx=dataset.train_idx,
        num_classes=dataset.num_classes,
    )


def dgl_worker_arguments(cfg, data: Path, epochs: int, warmup: int) -> list[str]:
    """dgl_fullbatch.py's arguments: `model=gcn`'s widths, dropout and optimizer from `cfg`."""
    model, optimizer = cfg.model, cfg.optimizer
    if model.activation != "relu" or optimizer.name != "adam":
        raise ValueError("the DGL worker runs model.activation=relu and optimizer=adam only")
    return [
        f"--data={data}",
        "--model=gcn",
        f"--layers={model.layers}",
        f"--hidden={model.hidden}",
        f"--dropout={model.dropout}",
        f"--input-dropout={model.input_dropout}",
        f"--lr={optimizer.lr}",
        f"--weight-decay={optimizer.weight_decay}",
        f"--epochs={epochs}",
        f"--warmup={warmup}",
        f"--seed={cfg.train.seed}",
    ]


def dgl_run(args, tmp: Path) -> dict:
    """DGL's full-batch GCN on the graph and model gnnrun trains, in DGL's own venv."""
    result: dict = {"label": DGL_LABEL, "ranks": 1}
    if not args.dgl_python:
        result["skipped"] = "no --dgl-python (the python of a venv with DGL 2.1)"
        return result
    cfg = gnnrun_config(args)
    data = tmp / "dgl-graph.npz"
    export_graph(cfg, data)
    _, threads = rank_cpus(0, 1, cfg.cluster.threads_per_rank, cfg.cluster.comm_cores)
    start = time.perf_counter()
    try:
        worker = run_worker(
            args.dgl_python,
            DGL_WORKER,
            dgl_worker_arguments(cfg, data, args.epochs, args.warmup),
            threads,
            args.timeout,
        )
    finally:
        data.unlink(missing_ok=True)
    result["command"] = worker.pop("command")
    if "error" in worker:
        result["error"] = worker["error"]
    else:
        result["dgl"] = worker
    result["run_s"] = time.perf_counter() - start
    result["gnnrun_allocator"] = allocator_in_use()
    return result


def speed(args, tmp: Path) -> list[dict]:
    print(
        f"\n## Epoch time: {args.dataset}, model=gcn {' '.join(args.model_overrides)}, "
        f"{args.epochs} epochs, medians after {args.warmup}; load {load()}"
    )
    plan = [("single", 1)] + [(label, r) for r in args.ranks for label in SPEED_VARIANTS]
    plan = [(label, r) for label, r in plan if not (r == 1 and label in ("cd0", "sar"))]
    runs = []
    for label, ranks in plan:
        run = train_run(args, tmp, "epochs", args.dataset, label, ranks, args.epochs)
        if "records" in run:
            run["epochs"] = epoch_figures(run, args.warmup, PHASES + SPMM_PHASES)
            run.pop("records")
            print(f"  {label} x{ranks}: {run['epochs']['epoch_s']:.3f} s/epoch", flush=True)
        runs.append(run)
        if label == "single":  # DGL's one process right after gnnrun's
            dgl = dgl_run(args, tmp)
            if "dgl" in dgl:
                d = dgl["dgl"]
                dgl["epochs"] = {"epoch_s": d["epoch_s"], "phases": d["phases"], "mb": {}}
                print(
                    f"  {DGL_LABEL} (DGL {d['dgl']}, torch {d['torch']}, {d['threads']} threads, "
                    f"allocator {d['allocator']}; gnnrun's: {dgl['gnnrun_allocator']}): "
                    f"{d['epoch_s']:.3f} s/epoch",
                    flush=True,
                )
            elif "skipped" in dgl:
                print(f"  {DGL_LABEL}: skipped: {dgl['skipped']}")
            if "skipped" not in dgl:
                runs.append(dgl)
    ok = {(r["label"], r["ranks"]): r["epochs"] for r in runs if "epochs" in r}

    def ratio(seconds: float, to: tuple[str, int]) -> str:
        return f"{seconds / ok[to]['epoch_s']:.2f}" if to in ok else ""

    def seconds(phases: dict, key: str) -> str:
        return f"{phases[key]:.3f}" if key in phases else ""

    rows = []
    for r in runs:
        if "epochs" not in r:
            rows.append([r["ranks"], r["label"], "failed", *[""] * 14])
            continue
        e = r["epochs"]
        dgl = r["label"] == DGL_LABEL
        rows.append(
            [
                r["ranks"],
                r["label"],
                f"{r['dgl']['threads']} thr" if dgl else threads_note(r["ranks"]),
                f"{e['epoch_s']:.3f}",
                *(seconds(e["phases"], k) for k in PHASES + SPMM_PHASES),
                " ".join(f"{p}={mb:.1f}" for p, mb in e["mb"].items()),
                ratio(e["epoch_s"], ("single", 1)),
                ratio(e["epoch_s"], ("cd0", r["ranks"])),
                ratio(e["epoch_s"], ("sar", r["ranks"])),
                ratio(e["epoch_s"], (DGL_LABEL, 1)),
            ]
        )
    print(
        "epoch = slowest rank's epoch_s; phases are rank means; comm = blocked on other ranks; "
        "compute/bcast/wait: spmm1d's tile products, broadcasts from issue to arrival, "
        "time blocked on broadcasts (part of comm); DGL: one process, fwd = zero_grad + "
        "forward + loss, as gnnrun's"
    )
    table(
        [
            "ranks",
            "algorithm",
            "threads",
            "epoch s",
            *PHASES,
            "compute",
            "bcast",
            "wait",
            "MB per epoch",
            "/single",
            "/cd0",
            "/sar",
            "/DGL",
        ],
        rows,
    )
    return runs


def memory(args, tmp: Path) -> list[dict]:
    dataset = args.memory_dataset
    print(f"\n## Peak memory per rank: {dataset}, model=gcn, 2 epochs; load {load()}")
    runs, rows = [], []
    for ranks in args.ranks:
        for label in MEMORY_VARIANTS:
            free = available_gib()
            if free < args.memory_min_free_gib:
                rows.append([ranks, label, f"skipped: {free:.1f} GiB available", "", "", ""])
                continue
            run = train_run(args, tmp, "memory", dataset, label, ranks, 2)
            if "records" in run:
                records = run.pop("records")
                per_rank = [records[r] for r in sorted(records)]
                run["memory"] = {
                    "train_mib": [
                        max(rec.get("train_rss_growth_mb") or 0 for rec in recs)
                        for recs in per_rank
                    ],
                    "peak_mib": [max(rec["peak_rss_mb"] for rec in recs) for recs in per_rank],
                    "buffers": [recs[-1].get("dense_buffers_peak") for recs in per_rank],
                    "buffer_mib": [recs[-1].get("dense_buffer_mb_peak") for recs in per_rank],
                }
                m = run["memory"]
                rows.append(
                    [
                        ranks,
                        label,
                        " ".join(f"{v:.0f}" for v in m["train_mib"]),
                        f"{max(m['peak_mib']):.0f}",
                        " / ".join("" if b is None else str(b) for b in m["buffers"]),
                        " / ".join("" if b is None else f"{b:.0f}" for b in m["buffer_mib"]),
                    ]
                )
                print(f"  {label} x{ranks}: training {max(m['train_mib']):.0f} MiB", flush=True)
            else:
                rows.append([ranks, label, "failed", "", "", ""])
            runs.append(run)
    print(
        "training: the epoch's peak resident memory above what the rank held when it began "
        "(train_rss_growth_mb), per rank; process: the whole rank's peak (peak_rss_mb), max "
        "over ranks; buffers: the dense row-block tensors the plan counted alive at once, "
        "and their MiB, per rank"
    )
    table(
        ["ranks", "buffers", "training MiB per rank", "process MiB", "dense buffers", "their MiB"],
        rows,
    )
    for ranks in args.ranks:
        peak = {
            r["label"]: max(r["memory"]["train_mib"])
            for r in runs
            if r["ranks"] == ranks and "memory" in r
        }
        if peak.get("spmm1d") and "spmm1d fresh" in peak:
            print(
                f"{ranks} ranks: fresh / plan training peak per rank = "
                f"{peak['spmm1d fresh'] / peak['spmm1d']:.2f}x"
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
        "--model-overrides",
        type=lambda s: re.split(r",(?![^\[]*\])", s),  # not inside [..]
        default=["model.hidden=64"],
        help="comma-separated model settings (default model.hidden=64)",
    )
    parser.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2, help="epochs left out of the medians")
    parser.add_argument("--memory-min-free-gib", type=float, default=6.0)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per gnnrun run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument(
        "--dgl-python",
        help="the python of a venv with DGL 2.1: also time DGL's full-batch GCN on the same "
        "graph (scripts/dgl_fullbatch.py); without it the DGL row is skipped",
    )
    parser.add_argument("--json", type=Path, help="also write all figures to this file")
    args = parser.parse_args()
    check_dgl_python(args.dgl_python)
    # SIGTERM unwinds like Ctrl-C, so that a running gnnrun child is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.quick:
        args.dataset = args.memory_dataset = "synthetic-tiny"
        args.epochs, args.warmup, args.memory_min_free_gib = 3, 1, 1.0
    args.data_root = args.data_root.resolve()
    results: dict = {
        "machine": machine(),
        "load_before": load(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    m = results["machine"]
    print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
        f"STREAM copy (torch, 1 GiB float32) {m['stream_copy_gbs']} GB/s"
    )
    print(f"load average before (1/5/15 min): {results['load_before']}")
    for dataset in {args.dataset, args.memory_dataset}:
        subprocess.run(
            [*GNNRUN, "data", "prepare", f"dataset={dataset}", f"paths.data_root={args.data_root}"],
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    with tempfile.TemporaryDirectory(prefix="bench-spmm1d-") as tmp_name:
        tmp = Path(tmp_name)
        if not args.skip_speed:
            results["speed"] = speed(args, tmp)
        if not args.skip_memory:
            results["memory"] = memory(args, tmp)
    results["load_after"] = load()
    print(f"\nload average after (1/5/15 min): {results['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
