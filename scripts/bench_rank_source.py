#!/usr/bin/env python
"""A one-rank run's graph source against the whole graph in the process, per minibatch.

`minibatch` and `pipeline` on one rank read the graph through their rank's
partition (`PartitionGraphSource` over a one-part partition); `algorithm=single`
reads the dataset itself (`LocalGraphSource`). Both sample the same blocks and
gather the same input rows; this times, per minibatch of `--batch-size` random
seeds and fanouts 15/10/5 (median over `--batches`, after two warm-up batches):

- sample: `sample_minibatch`, every hop;
- gather: the input rows into a reused buffer, as the pipeline's fetch stage
  does (`gather_rows`; the rows then in the blocks' order where they are not);
- features: the input rows as a new tensor, as `minibatch` does (`features`);

and prints the partition source's time against the local source's, measured in
the same run: `--rounds` rounds, each source measured in turn, the best round's
median kept (a first touch of the memory-mapped arrays, or pages the system
took back, costs a round hundreds of milliseconds). It checks that both give
the same blocks and rows.

    .venv/bin/gnnrun partition dataset=synthetic-large partitioner.num_parts=1 paths.data_root=data
    .venv/bin/python scripts/bench_rank_source.py --dataset synthetic-large --data-root data --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from gnnrun.algorithms import LocalGraphSource, sample_minibatch
from gnnrun.algorithms.minibatch.sources import PartitionGraphSource
from gnnrun.comm import Communicator
from gnnrun.data.dataset import GraphDataset
from gnnrun.partition.book import open_partition

FANOUTS, KEY = [15, 10, 5], 7
FIGURES = ("sample", "gather", "features")


def median_ms(work, inputs) -> tuple[list, float]:
    """Each input's result, and the median time per input after the first two."""
    results, seconds = [], []
    for x in inputs:
        start = time.perf_counter()
        results.append(work(x))
        seconds.append(time.perf_counter() - start)
    return results, 1e3 * statistics.median(seconds[2:])


def measure(source, seeds: list[torch.Tensor], feat_dim: int) -> dict:
    blocks, sample = median_ms(lambda s: sample_minibatch(source, s, FANOUTS, KEY, None), seeds)
    inputs = [b[0].src_ids for b in blocks]
    buffer = torch.empty((max(i.numel() for i in inputs), feat_dim))

    def gather(ids):
        if not hasattr(source, "gather_rows"):  # the local source gathers in order
            return source.features(ids)
        rows, position = source.gather_rows(ids, into=lambda n, shape, dtype: buffer[:n])
        return rows if position is None else rows[position]

    _, gathered = median_ms(gather, inputs)
    rows, features = median_ms(source.features, inputs)
    return {"blocks": blocks, "rows": rows[-2:], "sample": sample, "gather": gathered,
            "features": features, "inputs": inputs[0].numel()}  # fmt: skip


def same_blocks(a: list, b: list) -> bool:
    return all(
        torch.equal(x.indptr, y.indptr)
        and torch.equal(x.indices, y.indices)
        and torch.equal(x.src_ids, y.src_ids)
        for one, other in zip(a, b, strict=True)
        for x, y in zip(one, other, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-large")
    parser.add_argument("--data-root", type=Path, default=Path("data"))
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.batches < 3:
        parser.error(f"--batches {args.batches}: give 3 or more (the first two warm up)")
    if args.rounds < 1 or args.batch_size < 1:
        parser.error("--rounds and --batch-size: give 1 or more")
    parts = args.data_root / "partitions" / args.dataset / "metis-1"
    if not parts.exists():
        raise SystemExit(
            f"no one-part partition at {parts}: run `gnnrun partition dataset={args.dataset} "
            f"partitioner.num_parts=1 paths.data_root={args.data_root}` first"
        )
    dataset = GraphDataset.load(args.data_root / "prepared" / args.dataset)
    local = LocalGraphSource(dataset)
    partition = PartitionGraphSource(open_partition(parts, world_size=1, kind="edge_cut"),
                                     Communicator())  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    seeds = [
        torch.randperm(dataset.num_nodes, generator=generator)[: args.batch_size].sort().values
        for _ in range(args.batches)
    ]
    print(f"# {args.dataset}, batch {args.batch_size}, fanouts {FANOUTS}, median of "
          f"{args.batches - 2} minibatches")  # fmt: skip
    print(
        "| threads | input rows | figure | local source ms | partition source ms | partition / local |"
    )
    print("|---|---|---|---|---|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        rounds = []
        for _ in range(args.rounds):
            pair = (
                measure(partition, seeds, dataset.feat_dim),
                measure(local, seeds, dataset.feat_dim),
            )
            if rounds:  # the first round's blocks and rows are compared
                for figures in pair:
                    del figures["blocks"], figures["rows"]
            rounds.append(pair)
        mine, base = rounds[0]
        for figure in FIGURES:
            mine[figure] = min(m[figure] for m, _ in rounds)
            base[figure] = min(b[figure] for _, b in rounds)
        if not same_blocks(mine["blocks"], base["blocks"]):
            raise SystemExit("the two sources sampled different blocks")
        if not all(torch.equal(a, b) for a, b in zip(mine["rows"], base["rows"], strict=True)):
            raise SystemExit("the two sources gathered different rows")
        for figure in FIGURES:
            print(f"| {threads} | {mine['inputs']:,} | {figure} | {base[figure]:.1f} | "
                  f"{mine[figure]:.1f} | {mine[figure] / base[figure]:.2f}x |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
