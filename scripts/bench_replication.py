#!/usr/bin/env python
"""Vertex-cut replication against part count: Libra's two rules, with and without balancing, and
random (DistGNN Table 4's form).

For each dataset and part count, the replication factor (clones per vertex: the distinct
(vertex, part) pairs of the edges' endpoints, an isolated vertex counting once, as the
partition manifest's `replication_factor`), the share of split vertices (in more than one
part) and the largest part's edges over the average, for:

- `lower_degree`: Libra as DistGNN's released code assigns an edge whose endpoints share
  no part (to the parts of the endpoint with the lower degree), with gnnrun's 5% balance
  rule and without it (`null`, as the released code runs);
- `union`: the paper's text (the parts of either endpoint), with and without balancing;
- `random`: every vertex pair to a uniformly random part.

Datasets are prepared as `gnnrun data prepare` does (Cora, Facebook and Tolokers read
their raw files under `$GNNRUN_RAW_ROOT`; datasets whose files are missing are skipped
with the reason). Every rule streams the same seeded edge order.

    .venv/bin/python scripts/bench_replication.py
    GNNRUN_RAW_ROOT=/data/raw .venv/bin/python scripts/bench_replication.py --datasets cora facebook
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR
from gnnrun.config import to_objects
from gnnrun.data import prepare_dataset
from gnnrun.data.graph import edges_from_csr
from gnnrun.errors import GnnrunError
from gnnrun.partition.libra import BALANCE_SLACK, LibraPartitionerConfig, libra_partition
from gnnrun.schemas import register_schemas

VARIANTS = {
    "lower_degree, 5%": ("lower_degree", BALANCE_SLACK),
    "lower_degree, none": ("lower_degree", None),
    "union, 5%": ("union", BALANCE_SLACK),
    "union, none": ("union", None),
}


def load(name: str):
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=[f"dataset={name}"]))
    return prepare_dataset(cfg.dataset)


def figures(dataset, edge_part: np.ndarray, parts: int) -> dict:
    """Replication factor, split-vertex share and edge imbalance of an edge assignment."""
    n = dataset.num_nodes
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    held = np.zeros(n * parts, dtype=bool)
    held[src * parts + edge_part] = True
    held[dst * parts + edge_part] = True
    clones = held.reshape(n, parts).sum(axis=1)
    clones = np.maximum(clones, 1)  # an isolated vertex lives in one part
    loads = np.bincount(edge_part, minlength=parts)
    return {
        "replication_factor": float(clones.sum() / n),
        "split_share": float(np.mean(clones > 1)),
        "edge_imbalance": float(loads.max() / max(loads.mean(), 1)),
    }


def random_assignment(dataset, parts: int, seed: int) -> np.ndarray:
    """Each vertex pair (both directions of an undirected edge) to a uniformly random part."""
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    n = dataset.num_nodes
    pair = np.minimum(src, dst) * n + np.maximum(src, dst)
    if dataset.directed:
        pair = src * n + dst
    _, first = np.unique(pair, return_inverse=True)
    choice = np.random.default_rng(seed).integers(0, parts, int(first.max()) + 1)
    return choice[first].astype(np.int8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets", nargs="+", default=["cora", "facebook", "tolokers", "synthetic-small"]
    )
    parser.add_argument("--parts", nargs="+", type=int, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write all figures to this file")
    args = parser.parse_args()
    results = []
    for name in args.datasets:
        try:
            dataset = load(name)
        except GnnrunError as exc:
            print(f"\n## {name}: skipped ({exc})")
            continue
        print(
            f"\n## {name}: {dataset.num_nodes:,} vertices, {dataset.num_edges:,} directed edges\n"
        )
        header = ["parts", *VARIANTS, "random"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for parts in args.parts:
            row = {}
            for label, (rule, slack) in VARIANTS.items():
                cfg = LibraPartitionerConfig(
                    num_parts=parts, seed=args.seed, rule=rule, balance_slack=slack
                )
                row[label] = figures(dataset, libra_partition(dataset, cfg).parts, parts)
            row["random"] = figures(dataset, random_assignment(dataset, parts, args.seed), parts)
            cells = [
                f"{f['replication_factor']:.2f} ({f['split_share']:.0%} split, "
                f"{f['edge_imbalance']:.2f} max/mean)"
                for f in row.values()
            ]
            print(f"| {parts} | " + " | ".join(cells) + " |")
            results.append({"dataset": name, "parts": parts, **row})
        best = {
            label: math.fsum(
                r[label]["replication_factor"] for r in results if r["dataset"] == name
            )
            for label in VARIANTS
        }
        print(f"\nlowest mean replication over part counts: {min(best, key=best.get)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
