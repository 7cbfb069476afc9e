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

    .venv/bin/python scripts/bench_tracking.py              # about 10 minutes here
    .venv/bin/python scripts/bench_tracking.py --rounds 1 --epochs 4   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-small")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-root", type=Path, default=Path("data"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    epochs: dict[str, list[float]] = {name: [] for name in LOGGERS}
    walls: dict[str, list[float]] = {name: [] for name in LOGGERS}
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        root = Path(tmp)
        run("none", args, root, -1)  # prepares the dataset and the partition: not timed
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
    print(f"\n{'logger':12} {'epochs':>6} {'epoch s':>9} {'vs none':>8} {'wall s':>7}")
    rows = {}
    for logger in LOGGERS:
        median = statistics.median(epochs[logger])
        rows[logger] = {
            "epochs": len(epochs[logger]),
            "epoch_s_median": median,
            "ratio": median / base,
            "wall_s_median": statistics.median(walls[logger]),
        }
        print(
            f"{logger:12} {len(epochs[logger]):6d} {median:9.4f} {median / base:8.3f} "
            f"{rows[logger]['wall_s_median']:7.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
