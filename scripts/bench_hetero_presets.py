#!/usr/bin/env python
"""Time per step of the heterophilous-benchmark presets on Tolokers, against the former
form of the same presets, in one invocation.

For each model (gcn, sage, gat), two `gnnrun train` runs of `--steps` full-batch steps,
each step evaluated (`train.eval_every=1`, as Platonov et al.'s recipe):

- `preset`: `model=hetero_bench_<model>` (Platonov et al.'s pre-normalised residual
  block with a feed-forward network, `model.block=pre_norm_ffn`);
- `former` (the baseline): the same preset with the stack the presets had until
  2026-11-27: `model.block=post_norm model.residual=true model.input_mlp=true
  model.output_mlp=true` (a layer, then layer normalisation, GELU and dropout, plus
  the skip; the input and output linear layers).

Figures: the median training step (`epoch_s`, over the steps after the first), the
median evaluation (the `eval` phase: one forward pass over every vertex), their sum,
what 1000 steps would take at that pace, and `preset / former` of the step. The machine
and its load are printed with them.

    .venv/bin/python scripts/bench_hetero_presets.py --steps 10 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_runs import read_records, run_train  # noqa: E402

FORMER = [
    "model.block=post_norm",
    "model.residual=true",
    "model.input_mlp=true",
    "model.output_mlp=true",
]


def timed(model: str, variant: str, args, tmp: Path) -> dict:
    name = f"{model}-{variant}"
    run_dir = tmp / name
    overrides = [
        "dataset=tolokers",
        f"model=hetero_bench_{model}",
        *(FORMER if variant == "former" else []),
        "algorithm=single",
        "algorithm.mode=full",
        f"train.epochs={args.steps}",
        "train.eval_every=1",
        f"train.checkpoint_every={args.steps + 1}",
        f"cluster.threads_per_rank={args.threads}",
        f"hydra.run.dir={run_dir}",
        f"train.checkpoint_dir={tmp / ('ckpt-' + name)}",
        *args.override,
    ]
    code = run_train(overrides, tmp / f"{name}.log", args.timeout)
    if code != 0:
        tail = (tmp / f"{name}.log").read_text()[-2000:]
        raise SystemExit(f"{name}: gnnrun train failed ({code}):\n{tail}")
    records = read_records(run_dir)[0][1:]  # the first step warms up
    step = statistics.median(r["epoch_s"] for r in records)
    evaluation = statistics.median(r["time"]["eval"] for r in records)
    return {"step": step, "eval": evaluation, "command": "gnnrun train " + " ".join(overrides)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="cluster.threads_per_rank")
    parser.add_argument("--models", nargs="*", default=["gcn", "sage", "gat"])
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--override", nargs="*", default=[], help="more overrides for every run")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            (model, variant): timed(model, variant, args, Path(tmp))
            for model in args.models
            for variant in ("former", "preset")
        }
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"{'model':<6}{'variant':<8}{'step s':>9}{'eval s':>9}{'step+eval':>11}"
        f"{'1000 steps':>12}{'preset/former':>15}"
    )
    for (model, variant), row in rows.items():
        both = row["step"] + row["eval"]
        ratio = row["step"] / rows[(model, "former")]["step"]
        print(
            f"{model:<6}{variant:<8}{row['step']:>9.3f}{row['eval']:>9.3f}{both:>11.3f}"
            f"{1000 * both / 60:>10.1f} m{ratio:>14.2f}x"
        )
    for (model, variant), row in rows.items():
        print(f"{model} {variant}: {row['command']}")


if __name__ == "__main__":
    main()
