"""Partitioning and preparing chunked input on the ranks (gnnrun.partition.distributed,
gnnrun.data.prepare_ranks): edges per second per rank on 1 and 2 ranks, against one
process that prepares the dataset from the same chunks and partitions it with
partitioner=random, measured in the same run.

    python scripts/bench_distributed_partition.py [--dataset synthetic-small] [--parts 2]

Every run is a fresh `gnnrun` process (as a user runs it); the chunks are written once
first (`gnnrun data chunk`, not timed). Per rank: its edges read divided by its seconds
(the whole rank job: vertex maps, exchange, parts), its exchange's own rate, its peak
resident memory (VmHWM). The baseline's peak is its one process's.
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

BASELINE = """
import json, resource, sys, time
from pathlib import Path
from gnnrun.data import prepare_dataset
from gnnrun.data.chunked import ChunkedDatasetConfig
from gnnrun.partition import partition_dataset
from gnnrun.partition.registry import PartitionerConfig
metadata, out, parts = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
cfg = ChunkedDatasetConfig(name="bench", path=metadata, prepared_dir=str(out / "prepared"))
dataset = prepare_dataset(cfg)
prepared = time.perf_counter() - start
partition_dataset(dataset, PartitionerConfig(name="random", num_parts=parts), out / "one")
peak = [int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({"seconds": time.perf_counter() - start, "prepare_s": prepared,
                  "edges": dataset.num_edges, "peak_mb": peak}))
"""


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
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--work", type=Path, default=None, help="folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-dist-partition-"))
    work.mkdir(parents=True, exist_ok=True)
    chunk_s = gnnrun(work, "data", "chunk", f"dataset={args.dataset}", "--output", "chunks")
    metadata = str(work / "chunks" / "metadata.json")
    print(f"chunks of {args.dataset} written in {chunk_s:.1f} s to {work / 'chunks'}")

    env = os.environ | {"PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", BASELINE, metadata, str(work / "baseline"), str(args.parts)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    base = json.loads(run.stdout.strip().splitlines()[-1])
    base["command_s"] = time.perf_counter() - start
    print(
        f"\none process (prepare from the chunks, then partitioner=random, {args.parts} parts): "
        f"{base['seconds']:.2f} s of work ({base['prepare_s']:.2f} s preparing), "
        f"{base['command_s']:.2f} s with the process's start, {base['edges']:,} edges stored, "
        f"peak {base['peak_mb']:.0f} MiB"
    )
    print(
        "\nranks | command s (vs one process) | rank | edges read | rank s (vs one process's "
        "work) | maps / exchange / parts s | edges/s per rank (vs 1 rank) | peak MiB"
    )
    first = None
    for ranks in [int(r) for r in args.ranks.split(",")]:
        out = work / f"dist-{ranks}"
        seconds = gnnrun(
            work, "partition", "dataset=chunked", "dataset.name=bench", f"dataset.path={metadata}",
            "partitioner=random", f"partitioner.num_parts={args.parts}",
            f"cluster.nprocs={ranks}", f"partitioner.output_dir={out}",
        )  # fmt: skip
        manifest = json.loads((out / "manifest.json").read_text())
        for r in manifest["distributed"]["ranks"]:
            total = r["seconds"]["total_s"]
            rate = r["edges_read"] / total
            first = first or rate
            stages = " / ".join(
                f"{r['seconds'][k]:.2f}" for k in ("vertex_maps_s", "exchange_s", "parts_s")
            )
            print(
                f"{ranks} | {seconds:.2f} ({base['command_s'] / seconds:.2f}x) | {r['rank']} | "
                f"{r['edges_read']:,} | {total:.2f} ({base['seconds'] / total:.2f}x) | {stages} | "
                f"{rate:,.0f} ({rate / first:.2f}x) | {r['peak_rss_mb']:.0f}"
            )

    print(
        "\nprepare on the ranks (gnnrun data prepare):\nranks | command s | rank | edges read | "
        "rank s (vs one process's prepare) | exchange / csr / rows / hash s | edges/s per rank "
        "(vs 1 rank) | peak MiB"
    )
    first = None
    for ranks in [int(r) for r in args.ranks.split(",")]:
        name = f"bench-prepared-{ranks}"
        seconds = gnnrun(
            work, "data", "prepare", "dataset=chunked", f"dataset.name={name}",
            f"dataset.path={metadata}", f"cluster.nprocs={ranks}",
        )  # fmt: skip
        meta = json.loads((work / "data" / "prepared" / name / "meta.json").read_text())
        for r in meta["distributed"]["ranks"]:
            total = r["seconds"]["total_s"]
            rate = r["edges_read"] / total
            first = first or rate
            stages = " / ".join(
                f"{r['seconds'][k]:.2f}" for k in ("exchange_s", "csr_s", "rows_s", "hash_s")
            )
            print(
                f"{ranks} | {seconds:.2f} | {r['rank']} | {r['edges_read']:,} | {total:.2f} "
                f"({base['prepare_s'] / total:.2f}x) | {stages} | {rate:,.0f} "
                f"({rate / first:.2f}x) | {r['peak_rss_mb']:.0f}"
            )
    print(f"\n(work folder: {work})")


if __name__ == "__main__":
    main()
