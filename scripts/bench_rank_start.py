#!/usr/bin/env python
"""How long ranks take to start: forked from a server that has imported torch, or spawned.

gnnrun.launch.forkserver forks each rank from a server process that has imported
torch and gnnrun; GNNRUN_START_METHOD=spawn starts each afresh, importing them
itself. Three measurements, each run with both, in turn, round after round, so
that a drift of the machine's speed hits them alike:

- launches: one process launches `--launches` groups of N ranks in a row, each
  rank joining its gloo group and all-reducing one number; the first launch
  (which starts the server) and the median of the later ones;
- one command: `gnnrun train dataset=synthetic-tiny train.epochs=1`, the wall
  time of the whole command (2 ranks; the dataset prepared first);
- a sweep: `gnnrun train -m ... train.seed=0,1,2`, three points in one process.

    .venv/bin/python scripts/bench_rank_start.py --rounds 3
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

METHODS = ("spawn", "forkserver")
LAUNCHES = """
import json, sys, time
from gnnrun.testing import run_on_ranks
from gnnrun_bench_ranks import sum_of_ranks
if __name__ == "__main__":
    nprocs, launches = int(sys.argv[1]), int(sys.argv[2])
    seconds = []
    for _ in range(launches):
        start = time.perf_counter()
        assert run_on_ranks(sum_of_ranks, nprocs) == [nprocs * (nprocs - 1) // 2] * nprocs
        seconds.append(time.perf_counter() - start)
    print(json.dumps(seconds))
"""
RANK_FUNCTION = """
import torch
import torch.distributed as dist

def sum_of_ranks(rank, world):
    value = torch.tensor([rank])
    dist.all_reduce(value)
    return int(value)
"""


def environment(method: str, folder: Path) -> dict[str, str]:
    paths = [str(folder), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "GNNRUN_START_METHOD": method,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
    }


def launches(method: str, nprocs: int, count: int, folder: Path) -> list[float]:
    script = folder / "launches.py"
    done = subprocess.run(
        [sys.executable, str(script), str(nprocs), str(count)],
        env=environment(method, folder), cwd=folder, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def command_seconds(method: str, args: list[str], folder: Path) -> float:
    gnnrun = str(Path(sys.executable).with_name("gnnrun"))
    start = time.perf_counter()
    subprocess.run(
        [gnnrun, "train", *args], env=environment(method, folder), cwd=folder, check=True,
        capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--launches", type=int, default=5)
    args = parser.parse_args()

    import torch

    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    one = ["dataset=synthetic-tiny", "train.epochs=1"]
    sweep = ["-m", *one, "train.seed=0,1,2"]
    first: dict[tuple, list[float]] = {}
    later: dict[tuple, list[float]] = {}
    whole: dict[tuple, list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        folder = Path(workdir)
        (folder / "launches.py").write_text(LAUNCHES)
        (folder / "gnnrun_bench_ranks.py").write_text(RANK_FUNCTION)
        command_seconds("spawn", one, folder)  # prepares the dataset and partition
        for _ in range(args.rounds):
            for method in METHODS:
                for nprocs in (2, 4):
                    seconds = launches(method, nprocs, args.launches, folder)
                    first.setdefault((method, nprocs), []).append(seconds[0])
                    later.setdefault((method, nprocs), []).extend(seconds[1:])
                whole.setdefault((method, "one"), []).append(command_seconds(method, one, folder))
                whole.setdefault((method, "sweep"), []).append(
                    command_seconds(method, sweep, folder)
                )

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(f"\n{args.rounds} rounds; seconds, median (min-max)\n")
    print("| what | spawn | forkserver | spawn / forkserver |")
    print("|---|---|---|---|")
    rows = []
    for nprocs in (2, 4):
        rows.append((f"first launch of {nprocs} ranks", first, nprocs))
        rows.append((f"later launches of {nprocs} ranks", later, nprocs))
    rows.append(("`gnnrun train " + " ".join(one) + "` (2 ranks)", whole, "one"))
    rows.append(("`gnnrun train " + " ".join(sweep) + "` (3 points)", whole, "sweep"))
    for label, table, key in rows:
        spawn, forked = table[("spawn", key)], table[("forkserver", key)]
        ratio = statistics.median(spawn) / statistics.median(forked)
        print(f"| {label} | {cell(spawn)} | {cell(forked)} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
