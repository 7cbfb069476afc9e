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

`--repeats N` runs every configuration N times, in rounds (each round runs every
configuration once, so a change in the machine's load falls on all alike): a
configuration's row gives the median epoch and its range, and the median and
range of its ratio to its baseline's run of the same round.

On CPU ranks (`--device cpu`, `model=sage_products`: 3 x 256, fanouts 15/10/5,
batch 1000): on 1 rank, `minibatch` and `pipeline` with the rank's compute
threads and with one (`cluster.threads_per_rank=1`, a core left to the stages);
on `--ranks` ranks, both; on `--two-level-ranks` ranks, both on
`partitioner=two_level` with `--machines` machines, in its `--layouts` (a part
per machine shared by its trainers, and a part per trainer). `--other-priority`
adds each pipeline with its stage threads at the CPU priority its default does not
choose (`algorithm.stage_nice=0` for one rank, whose default is the lowest, 19;
`algorithm.stage_nice=19` for several ranks on the machine, whose default is 0).

On a GPU (`--device cuda`, one rank on the GPU, for each of `--models`: SAGE 3 x
256 and GAT 3 x 128 x 4 heads, batch 1000): `minibatch` (DistDGL-GPU: sample,
copy, compute in turn), `pipeline`, with `--sample-workers` its sample stage's
workers (algorithm.sample_workers) set to each count given, and `pipeline` with
a feature cache of each of `--cache-rows` rows on the GPU (as many as the graph's
vertices: all its features there, none copied per minibatch); then the CPU's own
best on the same machine, `minibatch` and `pipeline` on each of `--cpu-ranks` ranks sharing its cores
(`--cpu-epochs` of them). A last table sets the issue's goals beside the
figures: the pipeline on the GPU at least 2x `minibatch` there and 3x the
fastest CPU run, the trainer waiting under 10% of its epoch.
`--train-fraction` trains on that share of the vertices (shorter epochs on a
large graph); `--dry-run` prints the runs.

    .venv/bin/python scripts/bench_pipeline.py                       # about 15 minutes here
    .venv/bin/python scripts/bench_pipeline.py --dataset synthetic-small --epochs 2   # a smoke test
    .venv/bin/python scripts/bench_pipeline.py --dataset synthetic-small --repeats 3 --ranks 1 2 4 --other-priority
    python3 scripts/bench_pipeline.py --device cuda --dataset synthetic-large --json gpu.json
    bash scripts/gpu_check.sh OUT pipeline    # the GPU's tests and figures, about 11 minutes
    .venv/bin/python scripts/bench_pipeline.py --dataset facebook --locality-only   # partitioned first
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
from dataclasses import dataclass
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


@dataclass
class Planned:
    label: str
    ranks: int
    overrides: list[str]
    baseline: str | None = None  # the label of the run it is compared with
    epochs: int | None = None  # None: --epochs


def plan(args) -> list[Planned]:
    """Every run, baselines first."""
    runs = gpu_plan(args) if args.device == "cuda" else cpu_plan(args)
    if args.train_fraction:  # shorter epochs: fewer training vertices (the same graph)
        for run in runs:
            run.overrides.append(f"dataset.split.train={args.train_fraction}")
    return runs


def pipelines(label: str, ranks: int, overrides: list[str], baseline: str, args) -> list[Planned]:
    """`pipeline` as configured, and with --other-priority its stage threads at the priority
    the default does not choose (every rank of these runs shares this machine)."""
    runs = [Planned(label, ranks, [*overrides, "algorithm=pipeline"], baseline)]
    if args.other_priority:
        other = 0 if ranks == 1 else 19  # the default: 19 for a rank alone on its machine
        changed = [*overrides, "algorithm=pipeline", f"algorithm.stage_nice={other}"]
        runs.append(Planned(f"{label} nice {other}", ranks, changed, baseline))
    return runs


def cpu_plan(args) -> list[Planned]:
    runs: list[Planned] = []
    for ranks in args.ranks:
        for threads in ("", " 1 thread") if ranks == 1 else ("",):
            one = ["cluster.threads_per_rank=1"] if threads else []
            runs.append(Planned(f"minibatch{threads}", ranks, [*SAGE, "algorithm=minibatch", *one]))
            runs += pipelines(
                f"pipeline{threads}", ranks, [*SAGE, *one], f"minibatch{threads}", args
            )
    for ranks in args.two_level_ranks:
        if ranks not in args.ranks:  # METIS at the same ranks, to compare with
            runs.append(Planned("minibatch", ranks, [*SAGE, "algorithm=minibatch"]))
            runs += pipelines("pipeline", ranks, SAGE, "minibatch", args)
        for layout in args.layouts:
            two_level = [
                "partitioner=two_level",
                f"partitioner.num_machines={args.machines}",
                f"partitioner.layout={layout}",
            ]
            label = f"two_level {layout}"
            runs.append(
                Planned(f"minibatch {label}", ranks, [*SAGE, "algorithm=minibatch", *two_level])
            )
            runs += pipelines(
                f"pipeline {label}", ranks, [*SAGE, *two_level], f"minibatch {label}", args
            )
    return runs


def gpu_plan(args) -> list[Planned]:
    """Per model: minibatch on the GPU (DistDGL-GPU: sample, copy, compute in turn), the
    pipeline there without and with a GPU feature cache, then the CPU's own runs on the
    same machine (`--cpu-ranks`, `--cpu-epochs`), the most telling first."""
    runs: list[Planned] = []
    for name in args.models:
        model, gpu = MODELS[name], ["cluster.device=cuda"]
        base = f"{name} minibatch gpu"
        runs += [
            Planned(base, 1, [*model, *gpu, "algorithm=minibatch"]),
            Planned(f"{name} pipeline gpu", 1, [*model, *gpu, "algorithm=pipeline"], base),
            *(
                Planned(
                    f"{name} pipeline gpu {w} sampler{'s' if w > 1 else ''}",
                    1,
                    [*model, *gpu, "algorithm=pipeline", f"algorithm.sample_workers={w}"],
                    base,
                )
                for w in args.sample_workers
            ),
            *(
                Planned(
                    f"{name} pipeline gpu cache {rows}",
                    1,
                    [*model, *gpu, "algorithm=pipeline", f"algorithm.gpu_cache_rows={rows}"],
                    base,
                )
                for rows in args.cache_rows
            ),
        ]
        for ranks in args.cpu_ranks:  # the CPU's own best, against the GPU's pipeline
            for algorithm in ("minibatch", "pipeline"):
                runs.append(
                    Planned(
                        f"{name} {algorithm} cpu",
                        ranks,
                        [*model, f"algorithm={algorithm}"],
                        epochs=args.cpu_epochs,
                    )
                )
    return runs


def configurations(rows: list[dict]) -> list[dict]:
    """One row per configuration (label, ranks) over its repeats: the median epoch and its
    range, each repeat's ratio to its baseline's run of the same round (median and range),
    and the other figures of the repeat whose epoch is the median."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["label"], row["ranks"]), []).append(row)
    out = []
    for (_, ranks), runs in groups.items():
        done = [r for r in runs if "epoch_s" in r]
        if not done:
            out.append(runs[0])
            continue
        done.sort(key=lambda r: r["epoch_s"])
        middle = dict(done[(len(done) - 1) // 2])
        middle["epochs_s"] = [r["epoch_s"] for r in sorted(done, key=lambda r: r["repeat"])]
        middle["failed_repeats"] = len(runs) - len(done)
        baseline = middle.get("baseline")
        if baseline:
            base = {r["repeat"]: r for r in groups.get((baseline, ranks), []) if "epoch_s" in r}
            ratios = [
                base[r["repeat"]]["epoch_s"] / r["epoch_s"] for r in done if r["repeat"] in base
            ]
            if ratios:
                middle["ratios"] = sorted(ratios)
        out.append(middle)
    by_key = {(r["label"], r["ranks"]): r for r in out}
    for row in out:  # CPU: against the fastest minibatch of the same ranks and partitioner
        if row["label"].startswith("pipeline") and "epochs_s" in row:
            same_split = [
                statistics.median(r["epochs_s"])
                for (label, ranks), r in by_key.items()
                if ranks == row["ranks"]
                and label.startswith("minibatch")
                and ("two_level" in label) == ("two_level" in row["label"])
                and "epochs_s" in r
            ]
            if same_split:
                row["fastest_minibatch_s"] = min(same_split)
    return out


def spread(values: list[float], fmt: str, unit: str = "") -> str:
    """The median, and the range when there are several values."""
    middle = format(statistics.median(values), fmt) + unit
    if len(values) < 2:
        return middle
    return f"{middle} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def print_table(configs: list[dict]) -> None:
    headers = [
        "run", "ranks", "epoch s (range)", "baseline / run (range)", "fastest minibatch / run",
        "device busy", "wait", "mbc (wait)", "fwd+bwd", "comm", "ared",
        "sample busy/blocked/starved", "fetch busy/blocked/starved", "next epoch ready",
        "MB/epoch", "feature MB", "cache hits",
    ]  # fmt: skip
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in configs:
        if "epochs_s" not in row:
            print(f"| {row['label']} | {row['ranks']} | failed: exit {row.get('returncode')} |")
            continue
        p = row["phases"]
        stages = row.get("stages", {})
        median_epoch = statistics.median(row["epochs_s"])

        def split(stage: str, stages=stages) -> str:
            s = stages.get(stage)
            return f"{s['busy_s']:.1f} / {s['blocked_s']:.1f} / {s['starved_s']:.1f}" if s else "-"

        cells = [
            row["label"] + (f" ({row['failed_repeats']} failed)" if row["failed_repeats"] else ""),
            row["ranks"],
            spread(row["epochs_s"], ".2f"),
            spread(row["ratios"], ".2f", "x") if "ratios" in row else "-",
            f"{row['fastest_minibatch_s'] / median_epoch:.2f}x"
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


# What the pipeline is asked for on a GPU: (figure, goal, met?).
GPU_GOALS = {
    "pipeline gpu / minibatch gpu": (2.0, "at least"),
    "pipeline gpu / best cpu": (3.0, "at least"),
    "trainer's wait in pipeline gpu": (0.10, "under"),
}


def gpu_goals(configs: list[dict], models: list[str]) -> list[dict]:
    """Per model: the pipeline on the GPU against minibatch there and against the fastest
    CPU run on the same machine, and the trainer's wait share, each beside its goal."""
    by_label = {r["label"]: r for r in configs if "epochs_s" in r}
    out = []
    for name in models:
        pipeline = by_label.get(f"{name} pipeline gpu")
        if pipeline is None:
            continue
        epoch = statistics.median(pipeline["epochs_s"])
        figures: dict[str, float] = {}
        minibatch = by_label.get(f"{name} minibatch gpu")
        if minibatch is not None:
            figures["pipeline gpu / minibatch gpu"] = (
                statistics.median(minibatch["epochs_s"]) / epoch
            )
        cpu = [
            (statistics.median(r["epochs_s"]), f"{r['label']} on {r['ranks']} ranks")
            for label, r in by_label.items()
            if label.startswith(f"{name} ") and label.endswith(" cpu")
        ]
        best_cpu = min(cpu) if cpu else None
        if best_cpu is not None:
            figures["pipeline gpu / best cpu"] = best_cpu[0] / epoch
        figures["trainer's wait in pipeline gpu"] = (
            pipeline["phases"]["pipeline_wait"] / pipeline["epoch_s"]
        )
        for figure, value in figures.items():
            goal, sense = GPU_GOALS[figure]
            met = value >= goal if sense == "at least" else value < goal
            out.append(
                {"model": name, "figure": figure, "value": value, "goal": f"{sense} {goal}",
                 "met": met, "best_cpu": best_cpu[1] if best_cpu else None}
            )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="synthetic-medium")
    parser.add_argument("--epochs", type=int, default=3, help="the first is not measured")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each configuration, in rounds"
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--two-level-ranks", type=int, nargs="*", default=[4])
    parser.add_argument("--machines", type=int, default=2, help="two_level's first-level parts")
    parser.add_argument(
        "--layouts", nargs="+", default=["machines", "trainers"], choices=("machines", "trainers")
    )
    parser.add_argument(
        "--other-priority",
        action="store_true",
        help="also each pipeline with its stage threads at the priority its default does "
        "not choose (algorithm.stage_nice=0 on one rank, 19 on several)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["sage", "gat"])
    parser.add_argument(
        "--cpu-ranks", type=int, nargs="+", default=[1, 4], help="with --device cuda"
    )
    parser.add_argument(
        "--cpu-epochs",
        type=int,
        help="epochs of the CPU runs with --device cuda (default --epochs)",
    )
    parser.add_argument(
        "--cache-rows",
        type=int,
        nargs="*",
        default=[250_000],
        help="with --device cuda: the GPU pipeline with a feature cache of each of these numbers "
        "of rows (the number of vertices caches every row: no feature is copied per minibatch)",
    )
    parser.add_argument(
        "--sample-workers",
        type=int,
        nargs="*",
        default=[],
        help="with --device cuda: also the GPU pipeline with each of these numbers of sample "
        "workers (algorithm.sample_workers; its default is 4 there)",
    )
    parser.add_argument(
        "--train-fraction",
        type=float,
        help="dataset.split.train for every run: fewer steps per epoch on a large graph",
    )
    parser.add_argument("--data-root", type=Path, default=Path("data").resolve())
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", type=Path, help="also write the rows here (after every run)")
    parser.add_argument(
        "--locality-only", action="store_true", help="no training runs: the input rows' places"
    )
    parser.add_argument(
        "--skip-locality", action="store_true", help="no count of where the input rows live"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the runs, run nothing")
    args = parser.parse_args()
    runs = [] if args.locality_only else plan(args)
    if args.dry_run:
        for run in runs:
            epochs = run.epochs or args.epochs
            print(f"{run.label} | {run.ranks} ranks | {epochs} epochs | {' '.join(run.overrides)}")
        return
    print(
        f"# bench_pipeline: {args.dataset}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, "
        f"{args.epochs} epochs per run, {args.repeats} repeats",
        flush=True,
    )
    rows: list[dict] = []

    def write_json(places=()) -> None:
        if args.json:
            configs = configurations(rows)
            out = {"runs": rows, "configurations": configs, "locality": list(places)}
            if args.device == "cuda":
                out["goals"] = gpu_goals(configs, args.models)
            args.json.write_text(json.dumps(out, indent=2) + "\n")

    # A `timeout` around the script (scripts/gpu_check.sh) sends SIGTERM: stop the run in
    # progress (its ranks too) and report the runs done so far.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as scratch:
            # Rounds: every configuration once per round, so that a change in the machine's load
            # falls on all of them alike.
            for repeat in range(args.repeats):
                for index, planned in enumerate(runs):
                    run = variant_run(
                        args, Path(scratch), f"r{index}-{repeat}", args.dataset, planned.label,
                        planned.ranks, planned.epochs or args.epochs, [], planned.overrides,
                        evaluate=False,
                    )  # fmt: skip
                    row = {k: v for k, v in run.items() if k != "records"}
                    row.update(repeat=repeat, baseline=planned.baseline, load=os.getloadavg()[0])
                    if "records" in run:
                        row.update(figures(run))
                        print(
                            f"# {planned.label} on {planned.ranks} ranks (round {repeat + 1}): epoch "
                            f"{row['epoch_s']:.2f} s, {row['mb_per_epoch']:.1f} MB/epoch "
                            f"({row['run_s']:.0f} s, load {row['load']:.2f})",
                            flush=True,
                        )
                    rows.append(row)
                    write_json()
    except SystemExit:
        print("# stopped (SIGTERM): the figures below are the runs done so far", flush=True)
    configs = configurations(rows)
    if configs:
        print_table(configs)
    if args.device == "cuda":
        print("\n| model | figure | value | goal | met |\n|---|---|---|---|---|")
        for goal in gpu_goals(configs, args.models):
            value = f"{goal['value']:.0%}" if "wait" in goal["figure"] else f"{goal['value']:.2f}x"
            print(
                f"| {goal['model']} | {goal['figure']} | {value} | {goal['goal']} | {goal['met']} |"
            )
    places = []
    if args.device == "cpu" and "trainers" in args.layouts and not args.skip_locality:
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
    write_json(places)


if __name__ == "__main__":
    main()
