#!/usr/bin/env python
"""What a process holding torch pays to exit, with and without gnnrun.memory.skip_exit_collection.

Every rank, and the gnnrun command itself, ends by exiting the interpreter, and
the launcher waits for every rank to exit. This measures that exit: a child
process imports what a rank holds (torch; with `dynamo`, also torch._dynamo,
which torch.optim imports on its first step), takes one Adam step, calls
`skip_exit_collection()` or not, prints the time and exits; the parent takes
the time the child's exit was seen. The two kinds of children run in turn,
round after round, so that a drift of the machine's speed hits them alike.
Then, for context, the wall time of whole launches of `gnnrun train
dataset=synthetic-tiny train.epochs=1` (2 ranks; the dataset prepared first).

    .venv/bin/python scripts/bench_exit.py --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys, time
import torch
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.Adam(model.parameters())
model(torch.ones(2, 8)).sum().backward()
optimizer.step()
if sys.argv[1] == "skip":
    from gnnrun.memory import skip_exit_collection
    skip_exit_collection()
print(time.time(), flush=True)
"""


def exit_seconds(mode: str) -> float:
    """Seconds from the child's last statement to its exit being seen."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)
    printed = float(child.stdout.readline())
    child.wait()
    return time.time() - printed


def launch_seconds(workdir: Path) -> float:
    gnnrun = str(Path(sys.executable).with_name("gnnrun"))
    start = time.perf_counter()
    subprocess.run(
        [gnnrun, "train", "dataset=synthetic-tiny", "train.epochs=1"],
        cwd=workdir, check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--launches", type=int, default=5)
    args = parser.parse_args()

    import torch

    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    times: dict[str, list[float]] = {"collect": [], "skip": []}
    for _ in range(args.rounds):
        for mode in times:
            times[mode].append(exit_seconds(mode))
    print("\n| exit of a process after an Adam step | median s | min s | max s |")
    print("|---|---|---|---|")
    for mode, label in (("collect", "the interpreter's collections"), ("skip", "skipped")):
        t = times[mode]
        print(f"| {label} | {statistics.median(t):.3f} | {min(t):.3f} | {max(t):.3f} |")
    saved = statistics.median(times["collect"]) - statistics.median(times["skip"])
    print(f"\nsaved per process: {saved:.3f} s (median against median, {args.rounds} rounds)")

    with tempfile.TemporaryDirectory() as workdir:
        launch_seconds(Path(workdir))  # prepares the dataset and partition
        launches = [launch_seconds(Path(workdir)) for _ in range(args.launches)]
    print(
        f"\n`gnnrun train dataset=synthetic-tiny train.epochs=1` (2 ranks): median "
        f"{statistics.median(launches):.2f} s over {args.launches} launches "
        f"(min {min(launches):.2f}, max {max(launches):.2f})"
    )


if __name__ == "__main__":
    main()
