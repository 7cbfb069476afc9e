#!/usr/bin/env python
"""Partitioner benchmark: time, peak memory and quality of every partitioner.

For each dataset (default synthetic-medium and synthetic-large) and part count
(default 4 and 8), every partitioner runs in a fresh process so that its peak
resident memory (ru_maxrss) is its own. Reported, with the baselines measured
in the same run:

- time split into assignment (the partitioning algorithm: METIS, Libra, ...)
  and gnnrun's own work (building inputs is inside `assign`; building and
  writing the parts is `write`), and for METIS the time inside pymetis alone;
- edge cut of METIS against the random edge cut;
- replication factor of Libra against a random vertex cut (each vertex pair to
  a uniformly random part);
- Libra's throughput in edges per second, assignment alone and end to end;
- peak memory as a multiple of the prepared dataset's size on disk, with and
  without the interpreter's own baseline (python + torch, measured before loading).

    .venv/bin/python scripts/bench_partition.py                       # medium and large, 4 and 8 parts
    .venv/bin/python scripts/bench_partition.py --datasets synthetic-medium --parts 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PARTITIONERS = ("random", "metis", "two_level", "libra")

CHILD = r"""
import json, resource, sys, time
from unittest import mock
import numpy as np
from hydra import compose, initialize_config_dir
from gnnrun.config import to_objects
from gnnrun.schemas import register_schemas
from gnnrun.data import load_prepared
from gnnrun.partition import partition_dataset
import gnnrun.partition.metis as metis_module

config_dir, dataset_name, method, parts, out_dir = sys.argv[1:6]
baseline_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # interpreter + torch
register_schemas()
overrides = [f"dataset={dataset_name}", f"partitioner={method}", f"partitioner.num_parts={parts}"]
if method == "two_level":
    overrides.append("partitioner.num_machines=2")
with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
    cfg = to_objects(compose("config", overrides=overrides))
dataset = load_prepared(cfg.dataset)

# Time spent inside METIS itself, to separate it from gnnrun's own overhead.
metis_seconds = [0.0]
real_run_metis = metis_module.run_metis
def timed_run_metis(*args, **kwargs):
    start = time.perf_counter()
    try:
        return real_run_metis(*args, **kwargs)
    finally:
        metis_seconds[0] += time.perf_counter() - start

with mock.patch.object(metis_module, "run_metis", timed_run_metis):
    start = time.perf_counter()
    book = partition_dataset(dataset, cfg.partitioner, out_dir)
    total = time.perf_counter() - start
print(json.dumps({
    "total_s": total,
    "metis_s": metis_seconds[0],
    "timings": book.manifest["timings"],
    "summary": book.manifest["summary"],
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "baseline_rss_bytes": baseline_rss,
}))
"""


def random_vertex_cut_replication(
    indptr: np.ndarray, indices: np.ndarray, parts: int, seed: int = 0
) -> float:
    """Replication factor when every vertex pair goes to a uniformly random part."""
    n = indptr.size - 1
    src = np.asarray(indices, dtype=np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    forward = src < dst
    part = np.random.default_rng(seed).integers(0, parts, int(forward.sum()))
    held = np.zeros(n * parts, dtype=bool)
    held[src[forward] * parts + part] = True
    held[dst[forward] * parts + part] = True
    held[np.flatnonzero(np.diff(indptr) == 0) * parts] = True  # isolated vertices: one clone
    return held.sum() / n


def prepared_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.suffix == ".npy")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", nargs="+", default=["synthetic-medium", "synthetic-large"])
    parser.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--methods", nargs="+", default=list(PARTITIONERS))
    parser.add_argument("--json", type=Path, help="also write all figures to this file")
    args = parser.parse_args()

    from gnnrun.data.dataset import GraphDataset

    env = dict(os.environ)
    env.setdefault("GNNRUN_DATA_ROOT", str(REPO / "data"))
    results = []
    for name in args.datasets:
        subprocess.run(
            [sys.executable, "-m", "gnnrun.cli", "data", "prepare", f"dataset={name}"],
            env=env,
            check=True,
        )
        prepared = Path(env["GNNRUN_DATA_ROOT"]) / "prepared" / name
        dataset = GraphDataset.load(prepared)
        size = prepared_bytes(prepared)
        print(
            f"\n## {name}: {dataset.num_nodes:,} vertices, {dataset.num_edges:,} directed edges, prepared {size / 2**30:.2f} GiB"
        )
        for parts in args.parts:
            random_rf = random_vertex_cut_replication(dataset.indptr, dataset.indices, parts)
            rows = {}
            for method in args.methods:
                with tempfile.TemporaryDirectory(dir=env["GNNRUN_DATA_ROOT"]) as tmp:
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            CHILD,
                            str(REPO / "configs"),
                            name,
                            method,
                            str(parts),
                            f"{tmp}/p",
                        ],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                if done.returncode != 0:
                    print(done.stderr[-3000:])
                    raise SystemExit(f"{method} failed on {name} with {parts} parts")
                rows[method] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"\n{parts} parts")
            print(
                f"{'method':<10} {'total s':>8} {'assign s':>9} {'write s':>8} {'metis s':>8} {'peak GiB':>9} {'peak/data':>9}  quality"
            )
            for method, r in rows.items():
                t, s = r["timings"], r["summary"]
                if "cut_edges" in s:
                    quality = f"edge cut {s['cut_fraction']:.1%}"
                    if method != "random":
                        quality += (
                            f" ({s['cut_edges'] / rows['random']['summary']['cut_edges']:.2f}x random)"
                            if "random" in rows
                            else ""
                        )
                else:
                    quality = f"replication {s['replication_factor']:.3f} (random vertex cut {random_rf:.3f}, ratio {s['replication_factor'] / random_rf:.2f})"
                print(
                    f"{method:<10} {r['total_s']:>8.2f} {t['assign_s']:>9.2f} {t['build_write_s']:>8.2f} "
                    f"{r['metis_s']:>8.2f} {r['peak_rss_bytes'] / 2**30:>9.2f} {r['peak_rss_bytes'] / size:>9.2f} "
                    f"{(r['peak_rss_bytes'] - r['baseline_rss_bytes']) / size:>9.2f}  {quality}"
                )
                results.append(
                    {
                        "dataset": name,
                        "parts": parts,
                        "method": method,
                        "random_vertex_cut_rf": random_rf,
                        "prepared_bytes": size,
                        **r,
                    }
                )
            if "libra" in rows:
                r = rows["libra"]
                print(
                    f"libra throughput: {dataset.num_edges / r['timings']['assign_s'] / 1e6:.1f} M edges/s assignment, "
                    f"{dataset.num_edges / r['total_s'] / 1e6:.1f} M edges/s end to end (target >= 3)"
                )
            for method in ("metis", "two_level"):
                if method in rows and rows[method]["metis_s"] > 0:
                    r = rows[method]
                    overhead = r["total_s"] - r["metis_s"]
                    print(
                        f"{method} overhead: gnnrun {overhead:.2f} s vs METIS {r['metis_s']:.2f} s = {overhead / r['metis_s']:.2f}x (target <= 0.5)"
                    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
