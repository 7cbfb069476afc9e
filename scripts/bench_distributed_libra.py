"""Libra on the ranks from chunked input (gnnrun.partition.distributed_libra): edges per
second per rank on 1 and 2 ranks, against one process that prepares the dataset from the
same chunks and partitions it with partitioner=libra, measured in the same run, and a
check that all of them wrote the same files.

    python scripts/bench_distributed_libra.py [--dataset synthetic-small] [--parts 4] [--rounds 1024]

Every run is a fresh process (the ranks as `gnnrun partition` starts them); the chunks are
written once first (`gnnrun data chunk`, not timed). Per rank: its edges read divided by
its seconds (the whole rank job), the seconds of each step (read and route the pairs;
sort them and run the rounds; the clone table; the edges to the parts' writers; the
parts), and its peak resident memory (VmHWM). The baseline's peak is its one process's.
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

REPO = Path(__file__).resolve().parent.parent
ROUNDS = 1024  # gnnrun.partition.libra.ROUNDS (not imported: the script runs gnnrun in children)

BASELINE = """
import json, sys, time
from pathlib import Path
from gnnrun.data import prepare_dataset
from gnnrun.data.chunked import ChunkedDatasetConfig
from gnnrun.partition import partition_dataset
from gnnrun.partition.libra import LibraPartitionerConfig
metadata, out, parts, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
start = time.perf_counter()
cfg = ChunkedDatasetConfig(name="bench", path=metadata, prepared_dir=str(out / "prepared"))
dataset = prepare_dataset(cfg)
prepared = time.perf_counter() - start
book = partition_dataset(dataset, LibraPartitionerConfig(num_parts=parts, rounds=rounds), out / "one")
peak = [int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({"seconds": time.perf_counter() - start, "prepare_s": prepared,
                  "assign_s": book.manifest["timings"]["assign_s"],
                  "edges": dataset.num_edges, "peak_mb": peak}))
"""

STEPS = ("exchange_s", "libra_s", "clone_table_s", "part_edges_s", "parts_s")


def gnnrun(work: Path, *args: str) -> float:
    env = os.environ | {"GNNRUN_DATA_ROOT": str(work / "data"), "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "gnnrun.cli", *args], cwd=work, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    if run.returncode:
        sys.exit(f"gnnrun {' '.join(args)} failed:\n{run.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synthetic-small")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="partitioner.rounds")
    parser.add_argument("--work", type=Path, default=None, help="folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-dist-libra-"))
    work.mkdir(parents=True, exist_ok=True)
    chunk_s = gnnrun(work, "data", "chunk", f"dataset={args.dataset}", "--output", "chunks")
    metadata = str(work / "chunks" / "metadata.json")
    print(f"chunks of {args.dataset} written in {chunk_s:.1f} s to {work / 'chunks'}")

    env = os.environ | {"PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", BASELINE, metadata, str(work / "baseline"), str(args.parts),
         str(args.rounds)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    base = json.loads(run.stdout.strip().splitlines()[-1])
    base["command_s"] = time.perf_counter() - start
    one = json.loads((work / "baseline" / "one" / "manifest.json").read_text())
    print(
        f"\none process (prepare from the chunks, then partitioner=libra, {args.parts} parts, "
        f"{args.rounds} rounds): "
        f"{base['seconds']:.2f} s of work ({base['prepare_s']:.2f} s preparing, "
        f"{base['assign_s']:.2f} s assigning), {base['command_s']:.2f} s with the process's "
        f"start, {base['edges']:,} edges stored, peak {base['peak_mb']:.0f} MiB, replication "
        f"{one['summary']['replication_factor']:.3f}"
    )
    print(
        "\nranks | command s (vs one process) | rank | edges read | rank s (vs one process's "
        f"work) | {' / '.join(s[:-2] for s in STEPS)} s | edges/s per rank (vs 1 rank) | "
        "peak MiB | same files as one process"
    )
    first = None
    for ranks in [int(r) for r in args.ranks.split(",")]:
        out = work / f"dist-{ranks}"
        seconds = gnnrun(
            work, "partition", "dataset=chunked", "dataset.name=bench", f"dataset.path={metadata}",
            "partitioner=libra", f"partitioner.num_parts={args.parts}",
            f"partitioner.rounds={args.rounds}",
            f"cluster.nprocs={ranks}", f"partitioner.output_dir={out}",
        )  # fmt: skip
        manifest = json.loads((out / "manifest.json").read_text())
        same = "yes" if manifest["files"] == one["files"] else "NO"
        for r in manifest["distributed"]["ranks"]:
            total = r["seconds"]["total_s"]
            rate = r["edges_read"] / total
            first = first or rate
            stages = " / ".join(f"{r['seconds'][k]:.2f}" for k in STEPS)
            print(
                f"{ranks} | {seconds:.2f} ({base['command_s'] / seconds:.2f}x) | {r['rank']} | "
                f"{r['edges_read']:,} | {total:.2f} ({base['seconds'] / total:.2f}x) | {stages} | "
                f"{rate:,.0f} ({rate / first:.2f}x) | {r['peak_rss_mb']:.0f} | {same}"
            )
    print(f"\n(work folder: {work})")


if __name__ == "__main__":
    main()
