#!/usr/bin/env python
"""DistDGLv2's pipeline: `algorithm=pipeline` against the synchronous `minibatch`, one run.

Every run is a fresh `gnnrun train` subprocess (scripts/train_runs.py) on the
same prepared dataset and partition, without evaluation (sampled evaluation of
every vertex would take longer than the training). Figures, medians over the
epochs after the first (the pipeline fills during the first):

- epoch s: the slowest rank's epoch; "baseline / run": the row's baseline
  (`minibatch` with the same ranks, threads, device and partitions) against
  this run; "fastest minibatch / run" (CPU): the fastest `minibatch` row with
  the same ranks and partitioner, whatever its threads;
- device busy: the share of the epoch the rank's device spent on the steps
  (`device_busy_s`: CUDA events on a GPU), wait: the trainer's wait for a
  finished minibatch (`pipeline_wait`) as a share of the epoch;
- the trainer's phases (mean over ranks): mbc (for `pipeline`, its wait),
  fwd + bwd, comm (blocked in the trainer's collectives), ared;
- per stage of rank 0: busy / blocked (buffer full) / starved (input empty)
  seconds, and the next epoch's minibatches already built at the epoch's end;
- MB/epoch: training bytes sent per rank; feature MB: input rows gathered (what
  a GPU rank copies to its GPU), and the feature cache's hit rate.

On CPU ranks (`--device cpu`, `model=sage_products`: 3 x 256, fanouts 15/10/5,
batch 1000): on 1 rank, `minibatch` and `pipeline` with the rank's compute
threads and with one (`cluster.threads_per_rank=1`, a core left to the stages);
on `--ranks` ranks, both; on `--two-level-ranks` ranks, both on
`partitioner=two_level` with `--machines` machines, in its two layouts (a part
per machine shared by its trainers, and a part per trainer).

On a GPU (`--device cuda`, one rank on the GPU, for each of `--models`: SAGE 3 x
256 and GAT 3 x 128 x 4 heads, batch 1000): `minibatch` (DistDGL-GPU: sample,
copy, compute in turn), `pipeline`, and `pipeline` with `--cache-rows` rows of
input features on the GPU; then the CPU's own best on the same machine,
`minibatch` and `pipeline` on each of `--cpu-ranks` ranks sharing its cores.

    .venv/bin/python scripts/bench_pipeline.py                       # about 15 minutes here
    .venv/bin/python scripts/bench_pipeline.py --dataset synthetic-small --epochs 2   # a smoke test
    python3 scripts/bench_pipeline.py --device cuda --dataset synthetic-large --json gpu.json
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
    of `ranks` parts (a part per trainer), with ranks m * T .. m * T + T - 1 on machine m (as
    `gnnrun train` places them on `--machines` hosts): the rank's own part, another rank of
    its machine (local too where the machine's trainers share its part: the machines
    layout), another machine. One epoch of every rank's training vertices in batches of 1000, sampled with
    sage_products' fanouts by the sampler training uses (its distributed form builds the
    same blocks), from the partitions the training runs used."""
    import numpy as np
    import torch

    from gnnrun.algorithms import LocalGraphSource, sample_minibatch, step_key
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
    folders = {
        "metis": f"metis-{ranks}",
        "two_level": f"two_level-{ranks}-{args.machines}m-trainers",
    }
    for name, folder in folders.items():
        path = args.data_root / "partitions" / args.dataset / folder
        if not path.is_dir():
            extra = (
                f" partitioner.num_machines={args.machines} partitioner.layout=trainers"
                if name == "two_level"
                else ""
            )
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
    out["busy_share"] = statistics.median(
        first[e].get("device_busy_s", 0.0) / first[e]["epoch_s"] for e in epochs
    )
    if "feature_bytes" in first[0]:
        out["feature_mb"] = statistics.median(first[e]["feature_bytes"] / 1e6 for e in epochs)
    if "feature_cache" in first[0]:
        out["hit_rate"] = statistics.median(first[e]["feature_cache"]["hit_rate"] for e in epochs)
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


SAGE = ["model=sage_products"]
GAT = ["model=gat_products", "model.hidden=512"]  # 3 x 128 x 4 heads, concatenated
MODELS = {"sage": SAGE, "gat": GAT}


def plan(args) -> list[tuple[str, int, list[str], str | None]]:
    """(label, ranks, overrides, the label of its baseline) of every run, baselines first."""
    if args.device == "cuda":
        return gpu_plan(args)
    runs: list[tuple[str, int, list[str], str | None]] = []
    for ranks in args.ranks:
        for threads in ("", " 1 thread") if ranks == 1 else ("",):
            one = ["cluster.threads_per_rank=1"] if threads else []
            runs.append((f"minibatch{threads}", ranks, [*SAGE, "algorithm=minibatch", *one], None))
            runs.append(
                (
                    f"pipeline{threads}",
                    ranks,
                    [*SAGE, "algorithm=pipeline", *one],
                    f"minibatch{threads}",
                )
            )
    for ranks in args.two_level_ranks:
        if ranks not in args.ranks:  # METIS at the same ranks, to compare with
            runs.append(("minibatch", ranks, [*SAGE, "algorithm=minibatch"], None))
            runs.append(("pipeline", ranks, [*SAGE, "algorithm=pipeline"], "minibatch"))
        for layout in ("machines", "trainers"):
            two_level = [
                "partitioner=two_level",
                f"partitioner.num_machines={args.machines}",
                f"partitioner.layout={layout}",
            ]
            label = f"two_level {layout}"
            runs.append(
                (f"minibatch {label}", ranks, [*SAGE, "algorithm=minibatch", *two_level], None)
            )
            runs.append(
                (
                    f"pipeline {label}",
                    ranks,
                    [*SAGE, "algorithm=pipeline", *two_level],
                    f"minibatch {label}",
                )
            )
    return runs


def gpu_plan(args) -> list[tuple[str, int, list[str], str | None]]:
    runs: list[tuple[str, int, list[str], str | None]] = []
    for name in args.models:
        model, gpu = MODELS[name], ["cluster.device=cuda"]
        runs += [
            (f"{name} minibatch gpu", 1, [*model, *gpu, "algorithm=minibatch"], None),
            (
                f"{name} pipeline gpu",
                1,
                [*model, *gpu, "algorithm=pipeline"],
                f"{name} minibatch gpu",
            ),
            (
                f"{name} pipeline gpu cache",
                1,
                [*model, *gpu, "algorithm=pipeline", f"algorithm.gpu_cache_rows={args.cache_rows}"],
                f"{name} minibatch gpu",
            ),
        ]
        for ranks in args.cpu_ranks:  # the CPU's own best, against the GPU's pipeline
            for algorithm in ("minibatch", "pipeline"):
                runs.append(
                    (f"{name} {algorithm} cpu", ranks, [*model, f"algorithm={algorithm}"], None)
                )
    return runs


def print_table(rows: list[dict]) -> None:
    headers = [
        "run", "ranks", "epoch s", "baseline / run", "fastest minibatch / run", "device busy", "wait",
        "mbc (wait)", "fwd+bwd", "comm", "ared", "sample busy/blocked/starved",
        "fetch busy/blocked/starved", "next epoch ready", "MB/epoch", "feature MB", "cache hits",
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
            f"{row['busy_share']:.0%}",
            f"{p['pipeline_wait'] / row['epoch_s']:.0%}" if stages else "-",
            f"{p['mbc']:.2f}" + (f" ({p['pipeline_wait']:.2f})" if stages else ""),
            f"{p['fwd'] + p['bwd']:.2f}",
            f"{p['comm']:.2f}",
            f"{p['ared']:.2f}",
            split("sample"),
            split("fetch"),
            row.get("next_epoch_ready", "-"),
            f"{row['mb_per_epoch']:.1f}",
            f"{row['feature_mb']:.0f}" if "feature_mb" in row else "-",
            f"{row['hit_rate']:.0%}" if "hit_rate" in row else "-",
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
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["sage", "gat"])
    parser.add_argument(
        "--cpu-ranks", type=int, nargs="+", default=[1, 4], help="with --device cuda"
    )
    parser.add_argument(
        "--cache-rows", type=int, default=250_000, help="GPU feature cache rows, with --device cuda"
    )
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
        runs = [] if args.locality_only else plan(args)
        for index, (label, ranks, overrides, baseline) in enumerate(runs):
            run = variant_run(
                args, Path(scratch), f"r{index}", args.dataset, label, ranks, args.epochs,
                [], overrides, evaluate=False,
            )  # fmt: skip
            row = {k: v for k, v in run.items() if k != "records"}
            if "records" in run:
                row.update(figures(run))
                base = next(
                    (r for r in rows if (r["label"], r["ranks"]) == (baseline, ranks)), None
                )
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
                if label.startswith("pipeline") and same_split and args.device == "cpu":
                    row["fastest_minibatch_s"] = min(same_split)
                print(
                    f"# {label} on {ranks} ranks: epoch {row['epoch_s']:.2f} s, "
                    f"{row['mb_per_epoch']:.1f} MB/epoch ({row['run_s']:.0f} s)",
                    flush=True,
                )
            rows.append(row)
    if rows:
        print_table(rows)
    places = []
    if args.device == "cpu":
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
