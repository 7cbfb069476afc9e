#!/usr/bin/env python
"""Faults, restarts and the cost of a second host, measured on this machine (root: it
builds hosts out of network namespaces, tests/launch/netns.py).

1. Fault to exit: two hosts (one rank each) train `minibatch` on synthetic-tiny with
   cluster.timeout_s=T; after rank 1's fifth epoch the script kills host 1, cuts its
   link, or rank 1 stops itself (GNNRUN_FAULT=stop); figure: seconds from the fault
   to each surviving host's exit, and what they exceed T by.
2. Restart: `minibatch`, 2 local ranks, cluster.max_restarts=1, checkpoints every 2
   epochs; rank 1 is killed (GNNRUN_FAULT=kill) after a step of epoch 5; figure:
   seconds from the fault (rank 0's metrics file holds 5 epochs) until it holds 5
   again after the restart, against the run's median epoch.
3. A second host: the same `minibatch` run of synthetic-small on two namespace hosts
   (gloo over a veth pair and a bridge) and on one host (loopback); figures: median
   epoch and training bytes per epoch of rank 0, and their ratios.

    sudo .venv/bin/python scripts/bench_faults.py
    .venv/bin/python scripts/bench_faults.py --timeout 15 --json faults.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "launch"))
import netns  # noqa: E402

GNNRUN = str(Path(sys.executable).with_name("gnnrun"))
PORT = 29611


def epochs_done(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def wait_until(condition, seconds: float, step: float = 0.01) -> float:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(step)
    raise TimeoutError("the run never got there")


def fault_to_exit(work: Path, fault: str, timeout_s: int) -> dict:
    bed = netns.TestBed(2)
    run_dir = work / f"fault-{fault}"
    env = dict(os.environ)
    if fault == "stop_rank":
        env["GNNRUN_FAULT"] = "stop:rank=1:epoch=5"
    overrides = [
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "train.epochs=100000",
        f"cluster.timeout_s={timeout_s}",
        f"train.checkpoint_dir={run_dir}/checkpoints",
    ]
    procs = [
        bed.popen(
            h,
            bed.train_command(h, PORT, run_dir, overrides),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for h in range(2)
    ]
    try:
        wait_until(lambda: epochs_done(run_dir / "host1" / "metrics.rank1.jsonl") >= 5, 300)
        ended = bed.strike(fault, 1, procs, timeout_s + 120)
    finally:
        bed.close()
    return {"fault": fault, "timeout_s": timeout_s, "exit_s": ended}


def train_local(run_dir: Path, overrides: list[str], env=None) -> subprocess.Popen:
    command = [GNNRUN, "train", f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def restart(work: Path) -> dict:
    run_dir = work / "restart"
    overrides = [
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "cluster.nprocs=2",
        "train.epochs=10",
        "train.checkpoint_every=2",
        "cluster.max_restarts=1",
        f"train.checkpoint_dir={run_dir}/checkpoints",
    ]
    env = dict(os.environ, GNNRUN_FAULT="kill:rank=1:epoch=5")
    proc = train_local(run_dir, overrides, env)
    metrics = run_dir / "metrics.rank0.jsonl"
    fault = wait_until(lambda: epochs_done(metrics) >= 5, 300)
    wait_until(lambda: epochs_done(metrics) < 5, 120)  # trimmed back to the checkpoint
    back = wait_until(lambda: epochs_done(metrics) >= 5, 300)
    proc.wait(timeout=300)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "restart_to_fault_epoch_s": back - fault,
        "epoch_s_median": summary["epoch_s_median"],
        "restarts": summary["restarts"],
        "resumed_from_epoch": 4,
    }


def second_host(work: Path, epochs: int) -> dict:
    overrides = ["dataset=synthetic-small", "algorithm=minibatch", f"train.epochs={epochs}"]
    # Prepared once, so that neither timed run prepares or partitions.
    subprocess.run(
        [GNNRUN, "partition", "dataset=synthetic-small", "partitioner.num_parts=2"],
        check=True,
        capture_output=True,
    )
    local = work / "loopback"
    train_local(local, [*overrides, "cluster.nprocs=2"]).wait(timeout=900)
    bed = netns.TestBed(2)
    try:
        procs = [
            bed.popen(
                h,
                bed.train_command(h, PORT, work / "veth", overrides),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for h in range(2)
        ]
        for proc in procs:
            proc.wait(timeout=900)
    finally:
        bed.close()
    figures = {}
    for name, summary_path in (("loopback", local), ("veth", work / "veth" / "host0")):
        summary = json.loads((summary_path / "summary.json").read_text())
        figures[name] = {
            "epoch_s_median": summary["epoch_s_median"],
            "bytes_per_epoch_rank0": summary["bytes_per_epoch_rank0"],
        }
    figures["ratio_epoch"] = (
        figures["veth"]["epoch_s_median"] / figures["loopback"]["epoch_s_median"]
    )
    figures["ratio_bytes"] = (
        figures["veth"]["bytes_per_epoch_rank0"] / figures["loopback"]["bytes_per_epoch_rank0"]
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--timeout", type=int, default=15, help="cluster.timeout_s of the fault runs"
    )
    parser.add_argument("--epochs", type=int, default=20, help="epochs of the veth/loopback runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason is not None:
        sys.exit(f"needs network namespaces: {reason}")
    with tempfile.TemporaryDirectory(prefix="gnnrun-faults-") as tmp:
        work = Path(tmp)
        os.environ["GNNRUN_DATA_ROOT"] = str(work / "data")
        results = {"faults": [], "restart": None, "second_host": None}
        print(f"fault to exit, cluster.timeout_s={args.timeout}, 2 hosts of 1 rank:")
        for fault in ("kill_host", "cut_link", "stop_rank"):
            figure = fault_to_exit(work, fault, args.timeout)
            results["faults"].append(figure)
            over = "" if fault == "kill_host" else " (timeout +{:.1f})"  # no timeout involved
            exits = ", ".join(
                f"host {h} {s:.1f} s" + over.format(s - args.timeout)
                for h, s in figure["exit_s"].items()
            )
            print(f"  {fault:10s} {exits}")
        figure = results["restart"] = restart(work)
        print(
            f"restart: {figure['restart_to_fault_epoch_s']:.1f} s from the fault to the same "
            f"epoch again (median epoch {figure['epoch_s_median']:.2f} s; 1 restart, resumed "
            "after epoch 4)"
        )
        print(f"a second host: synthetic-small, minibatch, 2 ranks, {args.epochs} epochs:")
        figure = results["second_host"] = second_host(work, args.epochs)
        for name in ("loopback", "veth"):
            f = figure[name]
            print(
                f"  {name:8s} epoch {f['epoch_s_median']:.3f} s, "
                f"{f['bytes_per_epoch_rank0'] / 1e6:.2f} MB/epoch (rank 0)"
            )
        print(
            f"  veth / loopback: epoch {figure['ratio_epoch']:.2f}x, bytes {figure['ratio_bytes']:.2f}x"
        )
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
