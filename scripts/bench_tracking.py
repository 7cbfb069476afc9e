#!/usr/bin/env python
"""Experiment trackers' cost: epoch time with each logger against none, in one run.

Every row is a fresh `gnnrun train` subprocess of the same config (synthetic-small,
the default minibatch algorithm on 2 ranks, 12 epochs); the epoch time is rank 0's
`epoch_s` (its training steps: what a tracker could slow), median over the epochs
after the first, from metrics.rank0.jsonl. The runs go round-robin (none, tensorboard,
mlflow, wandb, then again) so that a machine that slows down part-way shows in every
row alike; each row's ratio is its median against the median of the `none` runs. MLflow
writes to a sqlite store in the benchmark's folder, W&B offline. `wall s` is the whole
command, start and end included (importing a tracker and closing its run are there,
not in the epochs).

Epoch times on a shared machine vary by more than the 1% a tracker may cost, so the
script also measures each tracker's own work directly, in its own process: the
trainer's call per epoch (which only queues) and the tracker thread's time and CPU to
send one epoch of a real run's figures (200 epochs, mean), against none's median epoch,
twice: each epoch sent alone (the thread keeps up: it had a core to itself) and the 200
queued at once (the thread waited for a core, as it does at its lowest priority while
training keeps every core busy: the epochs queued meanwhile go out together).

    .venv/bin/python scripts/bench_tracking.py              # about 10 minutes here
    .venv/bin/python scripts/bench_tracking.py --rounds 1 --epochs 4   # a smoke test

It needs every tracker: `.venv/bin/pip install -e '.[tracking]'` (`make bench-tracking`
installs them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gnnrun.tracking.backends import BACKENDS

LOGGERS = ("none", "tensorboard", "mlflow", "wandb")


def run(logger: str, args, root: Path, index: int) -> tuple[list[float], float]:
    run_dir = root / f"{logger}-{index}"
    command = [
        sys.executable,
        "-m",
        "gnnrun.cli",
        "train",
        f"dataset={args.dataset}",
        f"train.epochs={args.epochs}",
        f"train.checkpoint_dir={root / 'checkpoints' / str(index)}",
        f"logger={logger}",
        f"hydra.run.dir={run_dir}",
    ]
    env = {
        **os.environ,
        "GNNRUN_DATA_ROOT": str(args.data_root),
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
        "WANDB_MODE": "offline",
    }
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    if "logger" in done.stderr and "failed" in done.stderr:
        sys.exit(f"logger={logger} failed:\n{done.stderr[-2000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.rank0.jsonl").open()]
    return [r["epoch_s"] for r in records[1:]], wall


def direct(logger: str, args, root: Path, records: list[dict]) -> tuple[float, float, float, float]:
    """A tracker's own cost per epoch, in this process: the trainer's call (`epoch_done`,
    which queues), the tracker thread's wall time and CPU sending epochs one at a time,
    and its CPU sending them all queued at once; means over `args.direct_epochs` epochs
    of a real run's records. The thread's CPU is what the ranks' epochs could lose."""
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.schemas import register_schemas
    from gnnrun.tracking import make_tracker

    os.environ["MLFLOW_TRACKING_URI"] = args.mlflow_uri or f"sqlite:///{root / 'mlflow.db'}"
    os.environ["WANDB_MODE"] = "offline"
    register_schemas()
    run_dir = root / f"direct-{logger}"
    run_dir.mkdir()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(
            compose(
                "config",
                overrides=[
                    f"dataset={args.dataset}",
                    f"logger={logger}",
                    f"train.checkpoint_dir={run_dir / 'checkpoints'}",
                ],
            )
        )
    # MLflow puts a sqlite store's artifacts under ./mlruns: keep them in the benchmark's folder.
    with contextlib.chdir(root):
        tracker = make_tracker(cfg, run_dir, 0, 2)
        tracker.started(0, 0, None)
        tracker.drain()
        n = args.direct_epochs
        calls = work = 0.0
        cpu_before = tracker.thread_cpu_s
        for epoch in range(n):  # alone: each epoch sent before the next comes
            record = {**records[epoch % len(records)], "epoch": epoch}
            before = time.perf_counter()
            tracker.epoch_done(record)
            queued = time.perf_counter()
            tracker.drain()
            calls += queued - before
            work += time.perf_counter() - queued
        cpu_alone = tracker.thread_cpu_s - cpu_before
        held = threading.Event()
        tracker._put(held.wait)  # queued: the thread waits while the epochs come
        for epoch in range(n, 2 * n):
            tracker.epoch_done({**records[epoch % len(records)], "epoch": epoch})
        cpu_before = tracker.thread_cpu_s
        held.set()
        tracker.drain()
        cpu_queued = tracker.thread_cpu_s - cpu_before
        tracker.close()
    return calls / n, work / n, cpu_alone / n, cpu_queued / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-small")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-root", type=Path, default=Path("data"))
    parser.add_argument("--direct-epochs", type=int, default=200)
    parser.add_argument(
        "--direct-only", action="store_true", help="only each tracker's own work, no epoch runs"
    )
    parser.add_argument(
        "--mlflow-uri", help="the direct measure's MLflow store (default: a sqlite file)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    missing = [n for n in LOGGERS[1:] if importlib.util.find_spec(BACKENDS.get(n).module) is None]
    if missing:  # before minutes of runs: every tracker is measured
        sys.exit(
            f"{', '.join(missing)} not installed: the script measures every tracker; "
            "install them with .venv/bin/pip install -e '.[tracking]'"
        )
    epochs: dict[str, list[float]] = {name: [] for name in LOGGERS}
    walls: dict[str, list[float]] = {name: [] for name in LOGGERS}
    costs: dict[str, tuple[float, float, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        root = Path(tmp)
        run("none", args, root, -1)  # prepares the dataset and the partition: not timed
        records = [json.loads(line) for line in (root / "none--1" / "metrics.rank0.jsonl").open()]
        for logger in LOGGERS[1:]:
            costs[logger] = direct(logger, args, root, records)
        if args.direct_only:
            records_none = [r["epoch_s"] for r in records[1:]]
            args.rounds = 0
            epochs["none"] = records_none
        for round_ in range(args.rounds):
            for logger in LOGGERS:
                times, wall = run(logger, args, root, round_)
                epochs[logger] += times
                walls[logger].append(wall)
                print(
                    f"round {round_ + 1} {logger}: median epoch {statistics.median(times):.4f} s",
                    flush=True,
                )
    base = statistics.median(epochs["none"])
    print(
        f"\n{'logger':12} {'epochs':>6} {'epoch s':>9} {'vs none':>8} {'wall s':>7} "
        f"{'call us':>8} {'thread ms':>9} {'cpu ms':>7} {'cpu/epoch':>9} "
        f"{'queued cpu ms':>13} {'queued cpu/epoch':>16}"
    )
    rows = {}
    for logger in LOGGERS:
        call, work, cpu, cpu_queued = costs.get(logger, (0.0, 0.0, 0.0, 0.0))
        row = {
            "call_s_per_epoch": call,
            "thread_s_per_epoch": work,
            "thread_cpu_s_per_epoch": cpu,
            "thread_cpu_share_of_epoch": cpu / base,
            "queued_cpu_s_per_epoch": cpu_queued,
            "queued_cpu_share_of_epoch": cpu_queued / base,
        }
        timed = bool(epochs[logger]) and not args.direct_only
        if timed:
            median = statistics.median(epochs[logger])
            wall = statistics.median(walls[logger]) if walls[logger] else float("nan")
            row |= {
                "epochs": len(epochs[logger]),
                "epoch_s_median": median,
                "ratio": median / base,
                "wall_s_median": wall,
            }
            runs = f"{len(epochs[logger]):6d} {median:9.4f} {median / base:8.3f} {wall:7.1f}"
        else:
            runs = f"{'-':>6} {'-':>9} {'-':>8} {'-':>7}"
        rows[logger] = row
        print(
            f"{logger:12} {runs} {call * 1e6:8.1f} {work * 1e3:9.3f} {cpu * 1e3:7.3f} "
            f"{cpu / base:9.2%} {cpu_queued * 1e3:13.3f} {cpu_queued / base:16.2%}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
