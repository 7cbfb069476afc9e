#!/usr/bin/env python
"""Published figures against gnnrun's presets of the papers' recipes, run here.

Recipes (choose with --recipe, default all); each run is `gnnrun train` with the
command printed, its test figures read as the paper reads them (summary.json
"best", at the best-validation evaluation, or "final"), mean ± standard
deviation over the runs:

- `tolokers-gcn|sage|gat`: Platonov et al. (ICLR 2023), Table: Tolokers
  ROC-AUC, `model=hetero_bench_*`, 1000 full-batch steps evaluated at every
  step, one run per split (the dataset's 10 fixed splits, `dataset.split=S`);
  with `--layers 1 2 3 4 5`, their selection: every split at each number of
  layers, the one of the best mean validation figure reported;
- `gae-cora`: Kipf & Welling (2016), GAE on Cora: test ROC-AUC and AP after
  the last epoch, `task=gae model=gae`, 200 full-batch epochs: GAE's loss (the
  whole training adjacency matrix with its self-loops reconstructed, every
  other vertex pair a negative), each held-out edge against one uniform vertex
  pair; one run per seed (`train.seed=S task.split_seed=S`: a new initialisation and a new
  85/5/10 edge split each, as the paper's 10 runs).

    .venv/bin/python scripts/bench_published.py --recipe gae-cora --runs 10
    .venv/bin/python scripts/bench_published.py --recipe tolokers-gcn --runs 10
    .venv/bin/python scripts/bench_published.py --recipe tolokers-gcn --runs 10 --start 4   # splits 4-9 alone
    .venv/bin/python scripts/bench_published.py --recipe tolokers-gcn --runs 10 --layers 1 2 3 4 5
    python3 scripts/bench_published.py --recipe tolokers-gcn tolokers-sage tolokers-gat \
        --parallel 6 --override cluster.device=cuda cluster.threads_per_rank=2   # one GPU

`--parallel N` runs N of the runs at once (their own processes: on one GPU, or on
a machine with cores to spare); a run whose summary.json exists is not run again
and one stopped part-way resumes from its last checkpoint (`train.resume=true`, every
`train.checkpoint_every` steps), so a stopped benchmark continues where it stopped
(one stopped before its first checkpoint starts again, its files moved to
`<index>.unfinished`).

The published figures are the papers' own (mean ± std, in percent); nothing
here is tuned on test: the presets are the papers' settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The runs in progress, stopped with the benchmark (SIGTERM, as `timeout` sends): each is a
# `gnnrun train` process that would otherwise go on training without anyone reading it.
RUNNING: set[subprocess.Popen] = set()
RUNNING_LOCK = threading.Lock()
STOPPED = threading.Event()  # no run starts after it is set
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_runs import GNNRUN  # noqa: E402  (the console script, or python -m gnnrun.cli)

TOLOKERS = [
    "dataset=tolokers",
    "algorithm=single",
    "algorithm.mode=full",
    "train.epochs=1000",
    "train.eval_every=1",
]
# recipe -> (overrides, the keys set to the run's index, {metric: (paper mean, paper std)},
# the evaluation read: "best" (the best validation one, Platonov et al.'s) or "final"
# (after the last epoch, GAE's)).
RECIPES = {
    "tolokers-gcn": (
        [*TOLOKERS, "model=hetero_bench_gcn"],
        "dataset.split",
        {"test_auc": (83.64, 0.67)},
        "best",
    ),
    "tolokers-sage": (
        [*TOLOKERS, "model=hetero_bench_sage"],
        "dataset.split",
        {"test_auc": (82.43, 0.44)},
        "best",
    ),
    "tolokers-gat": (
        [*TOLOKERS, "model=hetero_bench_gat"],
        "dataset.split",
        {"test_auc": (83.70, 0.47)},
        "best",
    ),
    "gae-cora": (
        [
            "dataset=cora",
            "task=gae",
            "model=gae",
            "algorithm=single",
            "algorithm.mode=full",
            "train.epochs=200",
            "train.eval_every=200",
        ],
        "train.seed,task.split_seed",
        {"test_auc": (91.0, None), "test_ap": (92.0, None)},
        "final",
    ),
}


def run(recipe: str, index: int, out: Path, extra: list[str], layers: int | None) -> dict:
    overrides, varied, _, read = RECIPES[recipe]
    if layers is not None:
        extra = [*extra, f"model.layers={layers}"]
        out = out / f"layers{layers}"
        out.mkdir(parents=True, exist_ok=True)
    run_dir = out / recipe / str(index)
    summary = run_dir / "summary.json"
    if not summary.exists():
        each = [f"{key}={index}" for key in varied.split(",")]
        # Each run checkpoints in its own directory (runs side by side would replace each
        # other's shared file), and one stopped part-way continues from there (exactly).
        own = [f"hydra.run.dir={run_dir}", f"train.checkpoint_dir={run_dir / 'checkpoints'}"]
        resumed = ["train.resume=true"] if (run_dir / "checkpoint.pt").exists() else []
        if run_dir.exists() and not resumed:
            # Stopped before its first checkpoint: nothing of it to continue. It starts
            # afresh; the stopped one's files are kept beside it.
            aside = run_dir.with_name(f"{index}.unfinished")
            shutil.rmtree(aside, ignore_errors=True)
            run_dir.rename(aside)
        arguments = ["train", *overrides, *each, *extra, *resumed, *own]
        command = [*GNNRUN, *arguments]
        log_path = out / f"{recipe}-{index}.log"
        with RUNNING_LOCK:
            if STOPPED.is_set():
                raise SystemExit("stopped")
            # One write with its newline (print writes the end apart): parallel runs print at once.
            sys.stdout.write(" ".join(["$ gnnrun", *arguments]) + "\n")
            sys.stdout.flush()
            with open(log_path, "w") as log:
                child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
            RUNNING.add(child)
        code = child.wait()
        with RUNNING_LOCK:
            RUNNING.discard(child)
        if code != 0:
            tail = "\n".join(log_path.read_text().splitlines()[-15:])
            raise SystemExit(f"{recipe} run {index} failed (exit {code}), {log_path}:\n{tail}")
    return json.loads(summary.read_text())[read]


def stop_running(signum, frame) -> None:
    """SIGTERM: stop the runs in progress (their ranks stop with them), then exit."""
    with RUNNING_LOCK:
        STOPPED.set()
        for child in RUNNING:
            child.terminate()
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), nargs="+", default=sorted(RECIPES))
    parser.add_argument("--runs", type=int, default=10, help="splits or seeds 0 .. runs - 1")
    parser.add_argument(
        "--start",
        type=int,
        default=0,
        help="the first split or seed: runs start .. runs - 1 (the rest of a benchmark whose "
        "first runs were made elsewhere; the figures then cover these runs alone)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "bench_published")
    parser.add_argument(
        "--override",
        nargs="*",
        default=[],
        help="more overrides for every run, e.g. cluster.threads_per_rank=1 on a shared machine",
    )
    parser.add_argument(
        "--layers",
        type=int,
        nargs="*",
        default=[],
        help="numbers of layers to run each at (model.layers=L), reporting the one of the "
        "best mean validation figure (Platonov et al.'s selection); none: the preset's",
    )
    parser.add_argument(
        "--parallel", type=int, default=1, help="runs at once, each its own gnnrun process"
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give how many splits or seeds to run, 1 or more")
    if not 0 <= args.start < args.runs:
        parser.error(
            f"--start {args.start}: give a split or seed from 0 to --runs - 1 ({args.runs - 1})"
        )
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel}: give how many runs at once, 1 or more")
    args.out = args.out.absolute()  # the runs start in the repository, not here
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, stop_running)
    # Run index first: a benchmark stopped part-way has as many runs of every recipe.
    every = [
        (recipe, layers, i)
        for i in range(args.start, args.runs)
        for layers in (args.layers or [None])
        for recipe in args.recipe
    ]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        started = {
            key: pool.submit(run, key[0], key[2], args.out, args.override, key[1]) for key in every
        }
        results = {key: future.result() for key, future in started.items()}
    for recipe in args.recipe:
        _, varied, published, read = RECIPES[recipe]
        per_layers = {
            layers: [results[recipe, layers, i] for i in range(args.start, args.runs)]
            for layers in (args.layers or [None])
        }
        for metric, (mean, std) in published.items():
            chosen = None
            if args.layers:
                validation = metric.replace("test_", "val_", 1)
                means = {
                    layers: statistics.mean(b[validation] for b in bests)
                    for layers, bests in per_layers.items()
                }
                chosen = max(means, key=means.get)  # the first of the best, as theirs
                print(
                    f"{recipe} {validation} mean by model.layers: "
                    + ", ".join(f"{k}: {100 * v:.2f}" for k, v in means.items())
                    + f"; chosen model.layers={chosen}",
                    flush=True,
                )
            values = [100 * b[metric] for b in per_layers[chosen]]
            ours = statistics.mean(values)
            # One run has no standard deviation.
            spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
            paper = f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")
            print(
                f"{recipe} {read} {metric}: {ours:.2f}{spread} over {len(values)} "
                f"({varied} {args.start}..{args.runs - 1}; each {', '.join(f'{v:.2f}' for v in values)}); "
                f"paper {paper}; difference {ours - mean:+.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
