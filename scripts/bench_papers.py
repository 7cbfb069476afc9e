#!/usr/bin/env python
"""DistGNN's and DistGNN-MB's tables at this machine's scale, from `gnnrun train -m` sweeps.

Every figure comes from the summary.json of a run made here; each table is one
or more sweeps (`gnnrun train -m`), so `gnnrun report <sweep dir>` shows the
same runs. Tables (choose with --table, default all):

- `bytes` (DistGNN Table 4's companion): per dataset and rank count, the
  share of rank 0's clones that are split and the training bytes per epoch of
  cd0, cdr (delay 5, the defaults) and zero_comm, `model=sage_gcn`, 8 epochs
  (replication factors per part count: scripts/bench_replication.py);
- `accuracy` (DistGNN Table 5's form): per cell (dataset, ranks), test
  accuracy at the best-validation epoch, mean and standard error over seeds,
  for cd0, cdr (fresh and released semantics) and zero_comm, 200 epochs;
  untuned (the preset's lr 0.01) and tuned (per cell and algorithm, the lr of
  the best mean validation accuracy), the search being `+sweep=lr_tune` with
  the learning rates and seeds given here; and per seed at lr 0.01, the
  epochs to within 1% of the run's best validation accuracy;
- `hec` (DistGNN-MB's): minibatch against hec (usable and the paper's limit
  budget) on 2, 4 and 8 ranks, then push limit and lifespan at 2 ranks under
  the paper's budget: test accuracy, epochs to the minibatch run's best
  validation accuracy, bytes per epoch and hit rate per layer.

    .venv/bin/python scripts/bench_papers.py --table bytes
    .venv/bin/python scripts/bench_papers.py --table accuracy --cells facebook:4 cora:4 --lrs 0.01,0.03 --seeds 0,1
    .venv/bin/python scripts/bench_papers.py --table hec
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GNNRUN = str(Path(sys.executable).parent / "gnnrun")


def sweep(out: Path, name: str, overrides: list[str]) -> list[dict]:
    """`gnnrun train -m` into out/name; each point's summary with its overrides."""
    directory = out / name
    if not (directory / "done").exists():
        command = [GNNRUN, "train", "-m", *overrides, f"hydra.sweep.dir={directory}"]
        print("$", " ".join(command[1:]), flush=True)
        with open(out / f"{name}.log", "w") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, check=True)
        (directory / "done").touch()
    points = []
    for summary in sorted(directory.glob("*/summary.json"), key=lambda p: int(p.parent.name)):
        overrides_file = summary.parent / ".hydra" / "overrides.yaml"
        given = [
            line[2:] for line in overrides_file.read_text().splitlines() if line.startswith("- ")
        ]
        points.append(
            {"overrides": dict(o.split("=", 1) for o in given), **json.loads(summary.read_text())}
        )
    return points


def mean_se(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.4f}"
    return f"{mean:.4f} ± {statistics.stdev(values) / math.sqrt(len(values)):.4f}"


def share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def bytes_table(out: Path, datasets: list[str], ranks: list[int]) -> None:
    print(
        "\nMB/epoch: training bytes rank 0 sent, median over 8 epochs; hidden: the share of "
        "DRPA's time in flight that rank 0 did not wait for"
    )
    print(
        "\n| dataset | ranks | split clones (rank 0) | cd0 MB/epoch | cdr MB/epoch | zero_comm MB/epoch | cdr / cd0 | cdr hidden | cd0 hidden |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for dataset in datasets:
        for p in ranks:
            points = sweep(
                out,
                f"bytes-{dataset}-{p}",
                [
                    f"dataset={dataset}",
                    "model=sage_gcn",
                    "algorithm=cd0,cdr,zero_comm",
                    f"cluster.nprocs={p}",
                    "train.epochs=8",
                ],
            )
            by = {pt["algorithm"]: pt for pt in points}
            mb = {a: by[a]["bytes_per_epoch_rank0"] / 1e6 for a in by}
            hidden = {a: by[a].get("comm_hidden_rank0") for a in by}
            print(
                f"| {dataset} | {p} | {by['cd0']['split_fraction_rank0']:.1%} | {mb['cd0']:.2f} | "
                f"{mb['cdr']:.2f} | {mb['zero_comm']:.2f} | {mb['cdr'] / mb['cd0']:.2f} | "
                f"{share(hidden['cdr'])} | {share(hidden['cd0'])} |",
                flush=True,
            )


def accuracy_table(out: Path, cells: list[str], lrs: str, seeds: str, epochs: int) -> None:
    rows = {}
    for cell in cells:
        dataset, p = cell.split(":")
        common = [
            f"dataset={dataset}",
            "model=sage_gcn",
            f"cluster.nprocs={p}",
            f"train.epochs={epochs}",
            "+sweep=lr_tune",
            f"optimizer.lr={lrs}",
            f"train.seed={seeds}",
        ]
        points = sweep(out, f"acc-{dataset}-{p}", [*common, "algorithm=cd0,cdr,zero_comm"])
        for pt in sweep(
            out,
            f"acc-{dataset}-{p}-released",
            [*common, "algorithm=cdr", "algorithm.semantics=released"],
        ):
            pt["algorithm"] = "cdr released"
            points.append(pt)
        for algorithm in ("cd0", "cdr", "cdr released", "zero_comm"):
            by_lr: dict[str, list[dict]] = {}
            for pt in points:
                if pt["algorithm"] == algorithm:
                    by_lr.setdefault(pt["overrides"]["optimizer.lr"], []).append(pt)
            tuned = max(
                by_lr, key=lambda lr: statistics.fmean(r["best"]["val_acc"] for r in by_lr[lr])
            )
            rows[(cell, algorithm)] = {
                "untuned": [r["best"]["test_acc"] for r in by_lr.get("0.01", [])],
                "tuned": [r["best"]["test_acc"] for r in by_lr[tuned]],
                "lr": tuned,
                "to target": sorted(r["to_target"]["epochs"] for r in by_lr.get("0.01", [])),
                "best epoch": sorted(r["best"]["epoch"] + 1 for r in by_lr.get("0.01", [])),
            }
    for kind in ("untuned", "tuned"):
        print(
            f"\n{kind}: test accuracy at best validation, mean ± standard error over seeds {seeds}"
            + (
                " (lr 0.01)"
                if kind == "untuned"
                else " (lr chosen per cell and algorithm by mean validation accuracy)"
            )
        )
        print("| cell | cd0 | cdr (fresh) | cdr (released) | zero_comm |")
        print("|---|---|---|---|---|")
        for cell in cells:
            cd0 = statistics.fmean(rows[(cell, "cd0")][kind]) if rows[(cell, "cd0")][kind] else None
            cells_out = []
            for algorithm in ("cd0", "cdr", "cdr released", "zero_comm"):
                values = rows[(cell, algorithm)][kind]
                if not values:
                    cells_out.append("–")
                    continue
                text = mean_se(values)
                if algorithm != "cd0" and cd0 is not None:
                    text += f" ({100 * (statistics.fmean(values) - cd0):+.2f})"
                if kind == "tuned":
                    text += f", lr {rows[(cell, algorithm)]['lr']}"
                cells_out.append(text)
            print(f"| {cell} | " + " | ".join(cells_out) + " |", flush=True)
    print(
        "\nepochs to within 1% of each run's own best validation accuracy, and its best epoch (lr 0.01, per seed)"
    )
    print("| cell | cd0 | cdr (fresh) | cdr (released) | zero_comm |")
    print("|---|---|---|---|---|")
    for cell in cells:
        for what in ("to target", "best epoch"):
            per_algorithm = [
                ", ".join(str(e) for e in rows[(cell, a)][what])
                for a in ("cd0", "cdr", "cdr released", "zero_comm")
            ]
            print(f"| {cell}, {what} | " + " | ".join(per_algorithm) + " |")


def hec_table(out: Path, dataset: str, epochs: int) -> None:
    common = [
        f"dataset={dataset}",
        "model=sage",
        "algorithm.batch_size=256",
        f"train.epochs={epochs}",
    ]
    print(
        f"\n{dataset}, model=sage, batch 256 per rank, {epochs} epochs, seed 0; target: the minibatch run's best validation accuracy"
    )
    print(
        "| run | ranks | test acc | epochs to target | MB/epoch | bytes / minibatch's | hit rate per layer |"
    )
    print("|---|---|---|---|---|---|---|")
    for p in (2, 4, 8):
        base = sweep(
            out,
            f"hec-{dataset}-{p}-minibatch",
            [*common, "algorithm=minibatch", f"cluster.nprocs={p}"],
        )[0]
        target = f"train.target={base['best']['val_acc']}"
        variants = [("minibatch", base)]
        for budget in ("usable", "limit"):
            run = sweep(
                out,
                f"hec-{dataset}-{p}-{budget}",
                [
                    *common,
                    "algorithm=hec",
                    f"algorithm.push_budget={budget}",
                    f"cluster.nprocs={p}",
                    target,
                ],
            )[0]
            variants.append((f"hec, push_budget={budget}", run))
        if p == 2:
            grid = sweep(
                out,
                f"hec-{dataset}-{p}-grid",
                [
                    *common,
                    "algorithm=hec",
                    "algorithm.push_budget=limit",
                    f"cluster.nprocs={p}",
                    target,
                    "algorithm.push_limit=100,500,2000",
                    "algorithm.lifespan=0,2,8",
                ],
            )
            for run in grid:
                o = run["overrides"]
                variants.append(
                    (
                        f"hec limit, push_limit {o['algorithm.push_limit']}, lifespan {o['algorithm.lifespan']}",
                        run,
                    )
                )
        for label, run in variants:
            reached = run.get("to_target") or {}
            hits = "/".join(f"{h:.2f}" for h in run.get("hit_rate") or []) or "–"
            print(
                f"| {label} | {p} | {run['best']['test_acc']:.4f} | {reached.get('epochs') or 'not reached'} | "
                f"{run['bytes_per_epoch_rank0'] / 1e6:.2f} | {run['bytes_per_epoch_rank0'] / base['bytes_per_epoch_rank0']:.2f}x | {hits} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", choices=("bytes", "accuracy", "hec", "all"), default="all")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "outputs" / "bench_papers",
        help="sweep directories; a finished sweep found there is read, not rerun",
    )
    parser.add_argument("--datasets", nargs="+", default=["cora", "facebook", "tolokers"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument(
        "--cells", nargs="+", default=["cora:2", "cora:4", "facebook:2", "facebook:4"]
    )
    parser.add_argument("--lrs", default="0.003,0.01,0.03")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--hec-dataset", default="facebook")
    parser.add_argument("--hec-epochs", type=int, default=20)
    args = parser.parse_args()
    for cell in args.cells:
        dataset, _, ranks = cell.partition(":")
        if not dataset or not ranks.isdigit():
            parser.error(f"--cells {cell!r}: write DATASET:RANKS, for example facebook:4")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.table in ("bytes", "all"):
        bytes_table(args.out, args.datasets, args.ranks)
    if args.table in ("hec", "all"):
        hec_table(args.out, args.hec_dataset, args.hec_epochs)
    if args.table in ("accuracy", "all"):
        accuracy_table(args.out, args.cells, args.lrs, args.seeds, args.epochs)


if __name__ == "__main__":
    main()
