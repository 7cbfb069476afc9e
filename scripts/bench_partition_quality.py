"""Edge cut and balance of partitioner=multilevel against METIS, measured in the same run.

For each dataset and part count, all on the dataset's chunked copy (`gnnrun data chunk`;
a synthetic one is drawn file by file, another graph than `dataset=synthetic-*` in one
process): METIS (`partitioner=metis`, one process on the prepared copy), multilevel in
one process on the prepared copy, and multilevel on 1 and 2 ranks from the chunks
(`gnnrun partition dataset=chunked ... cluster.nprocs=R`), each a fresh process. Printed per run: the edge cut (undirected edges between parts) and its
ratio to METIS's, each balance constraint METIS is given (vertices, in-degree, train,
val, test: the heaviest part over the even share), seconds, and peak resident memory
(the process's, or each rank's VmHWM). A rank count's seconds are the whole command's
(the ranks' start included); the assignment's seconds are each rank's own.

    python scripts/bench_partition_quality.py                         # synthetic-medium, facebook, tolokers; 4 and 8 parts
    python scripts/bench_partition_quality.py --datasets facebook --parts 4 --ranks 1

Facebook and Tolokers are read from GNNRUN_RAW_ROOT (default: ../shared/datasets).
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

import numpy as np

REPO = Path(__file__).resolve().parents[1]

ONE_PROCESS = r"""
import json, sys, time
from hydra import compose, initialize_config_dir
from gnnrun.cli import CONFIG_DIR
from gnnrun.config import to_objects
from gnnrun.data import prepare_dataset
from gnnrun.partition import partition_dataset
from gnnrun.schemas import register_schemas
overrides, out = json.loads(sys.argv[1]), sys.argv[2]
register_schemas()
with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
    config = to_objects(compose("config", overrides=overrides))
dataset = prepare_dataset(config.dataset)
start = time.perf_counter()
partition_dataset(dataset, config.partitioner, out)
seconds = time.perf_counter() - start
peak = [int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({"seconds": seconds, "peak_mb": peak}))
"""


def run(work: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(args[:4])} ... failed:\n{done.stderr[-3000:]}")
    return done


def quality(out: Path, weights: np.ndarray, indptr: np.ndarray, indices: np.ndarray, k: int):
    """(cut, max/even per constraint) of the partition at `out`."""
    parts = np.load(out / "node_owner.npy")
    rows = np.repeat(np.arange(parts.size), np.diff(indptr))
    cut = int((parts[rows] != parts[indices]).sum()) // 2
    loads = np.zeros((k, weights.shape[1]))
    np.add.at(loads, parts, weights)
    return cut, loads.max(axis=0) / (weights.sum(axis=0) / k), parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="synthetic-medium,facebook,tolokers")
    parser.add_argument("--parts", default="4,8")
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--seeds", default="0", help="partitioner.seed of both, each compared")
    parser.add_argument("--work", type=Path, default=None, help="folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-partition-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    raw = os.environ.get("GNNRUN_RAW_ROOT", str(REPO.parent / "shared" / "datasets"))
    env = os.environ | {
        "PYTHONPATH": str(REPO),
        "GNNRUN_DATA_ROOT": str(work / "data"),
        "GNNRUN_RAW_ROOT": raw,
    }
    sys.path.insert(0, str(REPO))
    from gnnrun.data.dataset import GraphDataset
    from gnnrun.partition.metis import MetisPartitionerConfig, metis_adjacency, vertex_weights

    gnnrun = [sys.executable, "-m", "gnnrun.cli"]
    print(
        "dataset | parts | seed | partitioner | where | edge cut | vs METIS | max/even: vertices, "
        "in-degree, train, val, test | s (of which assigning parts; per rank) | peak MiB "
        "(per rank)"
    )
    for name in args.datasets.split(","):
        # Every run partitions the same graph: the chunked copy (a synthetic one is drawn
        # file by file, not the bytes `dataset=synthetic-*` prepares in one process).
        chunks = work / f"{name}-chunks"
        if not (chunks / "metadata.json").exists():
            run(work, [*gnnrun, "data", "chunk", f"dataset={name}", "--output", str(chunks)], env)
        chunked = [
            "dataset=chunked", f"dataset.name={name}-chunked",
            f"dataset.path={chunks / 'metadata.json'}",
        ]  # fmt: skip
        run(work, [*gnnrun, "data", "prepare", *chunked], env)
        dataset = GraphDataset.load(work / "data" / "prepared" / f"{name}-chunked")
        indptr, indices = metis_adjacency(dataset)
        weights = vertex_weights(dataset, MetisPartitionerConfig())
        for k, seed in [
            (int(p), int(s)) for p in args.parts.split(",") for s in args.seeds.split(",")
        ]:
            metis_cut = None
            one_parts = None
            runs = [("metis", "one process", None), ("multilevel", "one process", None)]
            ranks_ = [int(r) for r in args.ranks.split(",") if r]  # --ranks "": none
            runs += [("multilevel", f"{r} rank(s)", r) for r in ranks_]
            for method, where, ranks in runs:
                out = work / "parts" / f"{name}-{method}-{k}-{ranks or 0}-{seed}"
                overrides = [f"partitioner={method}", f"partitioner.num_parts={k}"]
                overrides += [f"partitioner.seed={seed}"]
                if ranks is None:
                    cmd = [sys.executable, "-c", ONE_PROCESS]
                    cmd += [json.dumps([*chunked, *overrides]), str(out)]
                    figures = json.loads(run(work, cmd, env).stdout.strip().splitlines()[-1])
                    seconds, peaks = figures["seconds"], [figures["peak_mb"]]
                    timings = json.loads((out / "manifest.json").read_text())["timings"]
                    assign = f" (assign {timings['assign_s']:.1f})"
                else:
                    start = time.perf_counter()
                    cmd = [*gnnrun, "partition", *chunked, *overrides, f"cluster.nprocs={ranks}"]
                    run(work, [*cmd, f"partitioner.output_dir={out}"], env)
                    seconds = time.perf_counter() - start
                    manifest = json.loads((out / "manifest.json").read_text())
                    ranks_ = manifest["distributed"]["ranks"]
                    peaks = [r["peak_rss_mb"] for r in ranks_]
                    assign = (
                        " (assign "
                        + ", ".join(f"{r['seconds']['assign_s']:.1f}" for r in ranks_)
                        + ")"
                    )
                cut, balance, parts = quality(out, weights, indptr, indices, k)
                metis_cut = metis_cut or cut
                same = ""
                if method == "multilevel":
                    if one_parts is None:
                        one_parts = parts
                    else:
                        same = (
                            " (= one process)" if np.array_equal(parts, one_parts) else " (DIFFERS)"
                        )
                print(
                    f"{name} | {k} | {seed} | {method} | {where}{same} | {cut:,} | {cut / metis_cut:.3f} | "
                    + ", ".join(f"{b:.3f}" for b in balance)
                    + f" | {seconds:.1f}{assign} | "
                    + ", ".join(f"{p:,.0f}" for p in peaks),
                    flush=True,
                )
    print(f"\n(work folder: {work})")


if __name__ == "__main__":
    main()
