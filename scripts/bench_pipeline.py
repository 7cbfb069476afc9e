#!/usr/bin/env python
"""DistDGLv2's pipeline: `algorithm=pipeline` against the synchronous `minibatch`, one run.

Every run is a fresh `gnnrun train` subprocess (scripts/train_runs.py) on the
same prepared dataset and partition, `model=sage_products` (3 x 256, fanouts
15/10/5, batch 1000), without evaluation (sampled evaluation of every vertex
would take longer than the training). Figures, medians over the epochs after
the first (the pipeline fills during the first):

- epoch s: the slowest rank's epoch; "twin / run": `minibatch` with the same
  ranks, threads and partitioner against this run; "fastest minibatch / run":
  the fastest `minibatch` row with the same ranks and partitioner, whatever its
  threads, against this run (the comparison that counts on a given machine);
- the trainer's phases (mean over ranks): mbc (for `pipeline`, its wait for a
  finished minibatch, `pipeline_wait`), fwd + bwd, comm (blocked in the
  trainer's collectives), ared;
- per stage of rank 0: busy / blocked (buffer full) / starved (input empty)
  seconds, and the next epoch's minibatches already built at the epoch's end;
- MB/epoch: training bytes sent per rank.

Rows: on 1 rank, `minibatch` and `pipeline` with the rank's compute threads
(all the cores) and with one compute thread (`cluster.threads_per_rank=1`,
leaving a core to the stages: sampling and compute on different cores); on
`--ranks` ranks, both; and on `--two-level-ranks` ranks, both on METIS and on
`partitioner=two_level` with `--machines` first-level parts.

    .venv/bin/python scripts/bench_pipeline.py                       # about 15 minutes here
    .venv/bin/python scripts/bench_pipeline.py --dataset synthetic-small --epochs 2   # a smoke test
    .venv/bin/python scripts/bench_pipeline.py --json pipeline.json
    .venv/bin/python scripts/bench_pipeline.py --dataset facebook --locality-only   # partitioned first
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_runs import variant_run  # noqa: E402

TRAINER_PHASES = ("mbc", "pipeline_wait", "fwd", "bwd", "comm", "ared")
FANOUTS, BATCH = [15, 10, 5], 1000  # sage_products


def locality(args, ranks: int) -> list[dict]:
    """Where the input rows of each rank's minibatches live, on METIS and on two_level parts
    of `ranks` parts, with ranks m * T .. m * T + T - 1 on machine m (as `gnnrun train` places
    them on `--machines` hosts): the rank's own part, another rank of its machine, another
    machine. One epoch of every rank's training vertices in batches of 1000, sampled with
    sage_products' fanouts by the sampler training uses (its distributed form builds the
    same blocks), from the partitions the training runs used."""
    import numpy as np
    import torch

    from gnnrun.algorithms.minibatch import step_key
    from gnnrun.algorithms.sources import LocalGraphSource, sample_minibatch
    from gnnrun.data.dataset import GraphDataset
    from gnnrun.errors import GnnrunError

    try:
        dataset = GraphDataset.load(args.data_root / "prepared" / args.dataset)
    except GnnrunError as error:
        sys.exit(str(error))
    source = LocalGraphSource(dataset)
    train = np.asarray(dataset.train_idx)
    row_bytes = dataset.feat_dim * 4
    out = []
    for name in ("metis", "two_level"):
        path = args.data_root / "partitions" / args.dataset / f"{name}-{ranks}"
        if not path.is_dir():
            extra = f" partitioner.num_machines={args.machines}" if name == "two_level" else ""
            sys.exit(
                f"no {path}: make it with `gnnrun partition dataset={args.dataset} "
                f"partitioner={name} partitioner.num_parts={ranks}{extra}`"
            )
        owner = torch.from_numpy(np.load(path / "node_owner.npy").astype(np.int64))
        machine = owner // (ranks // args.machines)
        rows = {"own": 0, "same machine": 0, "other machine": 0}
        for rank in range(ranks):
            seeds = torch.from_numpy(train[owner.numpy()[train] == rank])
            seeds = seeds[
                torch.randperm(seeds.numel(), generator=torch.Generator().manual_seed(rank))
            ]
            for step, batch in enumerate(seeds.split(BATCH)):
                inputs = sample_minibatch(source, batch, FANOUTS, step_key(0, 0, step))[0].src_ids
                mine = owner[inputs] == rank
                local_machine = machine[inputs] == rank // (ranks // args.machines)
                rows["own"] += int(mine.sum())
                rows["same machine"] += int((local_machine & ~mine).sum())
                rows["other machine"] += int((~local_machine).sum())
        out.append(
            {"partitioner": name, "ranks": ranks, "machines": args.machines, "rows": rows,
             "mb": {k: v * row_bytes / 1e6 for k, v in rows.items()}}
        )  # fmt: skip
    return out


def figures(run: dict) -> dict:
    """Medians over the epochs after the first; see the module docstring."""
    records = run["records"]
    epochs = range(1, len(records[0])) if len(records[0]) > 1 else range(len(records[0]))

    def phase(name: str) -> float:
        return statistics.mean(
            statistics.median(r[e]["time"].get(name, 0.0) for e in epochs) for r in records.values()
        )

    out = {
        "epoch_s": statistics.median(
            max(r[e]["epoch_s"] for r in records.values()) for e in epochs
        ),
        "phases": {p: phase(p) for p in TRAINER_PHASES},
        "mb_per_epoch": statistics.mean(
            sum(r[e]["bytes"].values()) / 1e6 for r in records.values() for e in epochs
        ),
    }
    first = records[0]
    if "pipeline" in first[0]:
        out["stages"] = {
            stage: {
                key: statistics.median(first[e]["pipeline"][stage][key] for e in epochs)
                for key in ("busy_s", "blocked_s", "starved_s", "mean_held")
            }
            for stage in first[0]["pipeline"]
        }
        out["next_epoch_ready"] = min(first[e]["next_epoch_ready"] for e in epochs[:-1] or epochs)
    return out


def plan(args) -> list[tuple[str, int, list[str]]]:
    """(label, ranks, overrides) of every run, baseline first in each group."""
    runs = []
    for ranks in args.ranks:
        for algorithm in ("minibatch", "pipeline"):
            runs.append((algorithm, ranks, [f"algorithm={algorithm}"]))
            if ranks == 1:
                runs.append(
                    (
                        f"{algorithm} 1 thread",
                        1,
                        [f"algorithm={algorithm}", "cluster.threads_per_rank=1"],
                    )
                )
    for ranks in args.two_level_ranks:
        for algorithm in ("minibatch", "pipeline"):
            runs.append(
                (
                    f"{algorithm} two_level",
                    ranks,
                    [
                        f"algorithm={algorithm}",
                        "partitioner=two_level",
                        f"partitioner.num_machines={args.machines}",
                    ],
                )
            )
            if ranks not in args.ranks:
                runs.append((algorithm, ranks, [f"algorithm={algorithm}"]))
    return runs


def print_table(rows: list[dict]) -> None:
    headers = [
        "run", "ranks", "epoch s", "twin / run", "fastest minibatch / run", "mbc (wait)", "fwd+bwd", "comm", "ared",
        "sample busy/blocked/starved", "fetch busy/blocked/starved", "next epoch ready", "MB/epoch",
    ]  # fmt: skip
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        if "error" in row:
            print(f"| {row['label']} | {row['ranks']} | failed: exit {row['returncode']} |")
            continue
        base = row.get("baseline_epoch_s")
        p = row["phases"]
        stages = row.get("stages", {})

        def split(stage: str, stages=stages) -> str:
            s = stages.get(stage)
            return f"{s['busy_s']:.1f} / {s['blocked_s']:.1f} / {s['starved_s']:.1f}" if s else "-"

        cells = [
            row["label"],
            row["ranks"],
            f"{row['epoch_s']:.2f}",
            f"{base / row['epoch_s']:.2f}x" if base else "-",
            f"{row['fastest_minibatch_s'] / row['epoch_s']:.2f}x"
            if "fastest_minibatch_s" in row
            else "-",
            f"{p['mbc']:.2f}" + (f" ({p['pipeline_wait']:.2f})" if stages else ""),
            f"{p['fwd'] + p['bwd']:.2f}",
            f"{p['comm']:.2f}",
            f"{p['ared']:.2f}",
            split("sample"),
            split("fetch"),
            row.get("next_epoch_ready", "-"),
            f"{row['mb_per_epoch']:.1f}",
        ]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="synthetic-medium")
    parser.add_argument("--epochs", type=int, default=3, help="the first is not measured")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--two-level-ranks", type=int, nargs="*", default=[4])
    parser.add_argument("--machines", type=int, default=2, help="two_level's first-level parts")
    parser.add_argument("--data-root", type=Path, default=Path("data").resolve())
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--locality-only", action="store_true", help="no training runs: the input rows' places"
    )
    args = parser.parse_args()
    print(
        f"# bench_pipeline: {args.dataset}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, "
        f"{args.epochs} epochs per run",
        flush=True,
    )
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as scratch:
        for index, (label, ranks, overrides) in enumerate([] if args.locality_only else plan(args)):
            run = variant_run(
                args, Path(scratch), f"r{index}", args.dataset, label, ranks, args.epochs,
                ["model=sage_products"], overrides, evaluate=False,
            )  # fmt: skip
            row = {k: v for k, v in run.items() if k != "records"}
            if "records" in run:
                row.update(figures(run))
                # The baseline: minibatch with the same ranks, threads and partitioner.
                twin = label.replace("pipeline", "minibatch")
                base = next((r for r in rows if (r["label"], r["ranks"]) == (twin, ranks)), None)
                if base is not None and "epoch_s" in base:
                    row["baseline_epoch_s"] = base["epoch_s"]
                same_split = [
                    r["epoch_s"]
                    for r in rows
                    if r["ranks"] == ranks
                    and r["label"].startswith("minibatch")
                    and ("two_level" in r["label"]) == ("two_level" in label)
                    and "epoch_s" in r
                ]
                if label.startswith("pipeline") and same_split:
                    row["fastest_minibatch_s"] = min(same_split)
                print(
                    f"# {label} on {ranks} ranks: epoch {row['epoch_s']:.2f} s, "
                    f"{row['mb_per_epoch']:.1f} MB/epoch ({row['run_s']:.0f} s)",
                    flush=True,
                )
            rows.append(row)
    if rows:
        print_table(rows)
    places = [p for ranks in args.two_level_ranks for p in locality(args, ranks)]
    if places:
        print("\n| parts | ranks / machines | input rows own / same machine / other machine | "
              "feature MB per epoch from other machines |")  # fmt: skip
        print("|---|---|---|---|")
        for p in places:
            r = p["rows"]
            print(
                f"| {p['partitioner']} | {p['ranks']} / {p['machines']} | {r['own']:,} / "
                f"{r['same machine']:,} / {r['other machine']:,} | {p['mb']['other machine']:.1f} |"
            )
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "locality": places}, indent=2) + "\n")


if __name__ == "__main__":
    main()
