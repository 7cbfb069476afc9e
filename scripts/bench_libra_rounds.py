#!/usr/bin/env python
"""What Libra's rounds of parallel streams cost in replication and balance, against the
sequential greedy (one stream, one round) measured in the same run.

For each dataset and part count: the replication factor (clones per vertex, as the
partition manifest's `replication_factor`), its ratio to the sequential greedy's, and the
largest part's edges over the mean, for the sequential greedy and for
`partitioner.streams` x `partitioner.rounds` variants (default: the shipped 64 x 256).
Every variant uses the same seed, rule (`lower_degree`) and 5% balance rule.

    .venv/bin/python scripts/bench_libra_rounds.py
    GNNRUN_RAW_ROOT=/data/raw .venv/bin/python scripts/bench_libra_rounds.py --datasets cora \\
        --variants 1x1 64x256 64x1024
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR
from gnnrun.config import to_objects
from gnnrun.data import prepare_dataset
from gnnrun.data.graph import edges_from_csr
from gnnrun.errors import GnnrunError
from gnnrun.partition.libra import ROUNDS, STREAMS, LibraPartitionerConfig, libra_partition
from gnnrun.schemas import register_schemas


def load(name: str):
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=[f"dataset={name}"]))
    return prepare_dataset(cfg.dataset)


def figures(dataset, edge_part: np.ndarray, parts: int) -> tuple[float, float]:
    """(replication factor, max / mean edges) of an edge assignment."""
    n = dataset.num_nodes
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    held = np.zeros(n * parts, dtype=bool)
    held[src * parts + edge_part] = True
    held[dst * parts + edge_part] = True
    clones = np.maximum(held.reshape(n, parts).sum(axis=1), 1)
    loads = np.bincount(edge_part, minlength=parts)
    return float(clones.sum() / n), float(loads.max() / max(loads.mean(), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "facebook", "synthetic-small"])
    parser.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--variants", nargs="+", default=[f"{STREAMS}x{ROUNDS}"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    variants = ["1x1", *(v for v in args.variants if v != "1x1")]
    for name in args.datasets:
        try:
            dataset = load(name)
        except GnnrunError as exc:
            print(f"\n## {name}: skipped ({exc})")
            continue
        print(f"\n## {name}: {dataset.num_nodes:,} vertices, {dataset.num_edges:,} edges\n")
        header = ["parts", *(f"{v} (streams x rounds)" for v in variants)]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for parts in args.parts:
            cells, base = [], None
            for variant in variants:
                streams, rounds = (int(x) for x in variant.split("x"))
                cfg = LibraPartitionerConfig(
                    num_parts=parts, seed=args.seed, streams=streams, rounds=rounds
                )
                start = time.perf_counter()
                rf, balance = figures(dataset, libra_partition(dataset, cfg).parts, parts)
                seconds = time.perf_counter() - start
                base = base or rf
                cells.append(
                    f"{rf:.3f} ({rf / base:.3f}x, {balance:.3f} max/mean, {seconds:.2f} s)"
                )
            print(f"| {parts} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
