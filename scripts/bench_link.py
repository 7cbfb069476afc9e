#!/usr/bin/env python
"""Link prediction: `minibatch` and `pipeline` on 1 and 2 ranks, training edges per second
and the MRR after a fixed number of epochs, in one invocation.

Every run is a fresh `gnnrun train task=link` subprocess (scripts/train_runs.py) on the
same prepared dataset, its held-out edges and partitions, with `model=sage` and the
settings given per dataset below, and one evaluation after the last epoch (each
held-out edge ranked among `task.eval_negatives` fixed negatives). Figures per run: the
median epoch (the slowest rank's, over the epochs after the first; the only one
when a run trains one), training edges
per second (the positive edges the ranks' steps trained on, steps x batch x ranks,
over that epoch), rank 0's phases, training bytes sent per epoch by rank 0, peak
memory, validation and test MRR and Hits@10; ratios: `pipeline` against `minibatch`
with the same ranks, and each run against 1-rank `minibatch`.

    GNNRUN_RAW_ROOT=<raw files> .venv/bin/python scripts/bench_link.py                  # both datasets
    .venv/bin/python scripts/bench_link.py --datasets synthetic-medium --json link.json
    .venv/bin/python scripts/bench_link.py --datasets facebook --epochs 2                # a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_runs import epoch_figures, print_comparison, variant_run  # noqa: E402

# Per dataset: the settings of every run and the epochs it trains by default. Facebook
# (22k pages, 171k pairs) takes the sage preset; synthetic-medium (500k vertices, 5M
# pairs) narrower layers, smaller fanouts and larger batches, so that an epoch fits a
# laptop, and fewer held-out edges and negatives, so that evaluation does.
SETTINGS = {
    "facebook": (["model=sage"], 5),
    "synthetic-medium": (
        [
            "model=sage",
            "model.hidden=64",
            "algorithm.fanouts=[5,10]",
            "algorithm.batch_size=4096",
            "task.val_fraction=0.005",
            "task.test_fraction=0.005",
            "task.eval_negatives=100",
        ],
        1,
    ),
}


def summarize(run: dict, batch_size: int) -> dict:
    """The run's figures (module docstring) from its per-rank records."""
    figures = epoch_figures(run)
    if figures.get("failed"):
        return figures
    last = figures.pop("last")
    edges = last["steps"] * batch_size * run["ranks"]
    return {
        **figures,
        "edges_per_epoch": edges,
        "edges_per_s": edges / figures["epoch_s"],
        **{k: last.get(k) for k in ("val_mrr", "test_mrr", "val_hits@10", "test_hits@10")},
    }


def batch_size_of(overrides: list[str]) -> int:
    """algorithm.batch_size as the overrides set it (the sage preset's 1000 otherwise)."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("algorithm.batch_size=")]
    return int(given[-1]) if given else 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default="facebook,synthetic-medium")
    parser.add_argument("--epochs", type=int, help="epochs of every run (default: per dataset)")
    parser.add_argument("--ranks", default="1,2", help="comma-separated rank counts")
    parser.add_argument("--algorithms", default="minibatch,pipeline")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument(
        "--data-root",
        default=os.environ.get("GNNRUN_DATA_ROOT", "data"),
        help="where the prepared datasets and partitions are (GNNRUN_DATA_ROOT)",
    )
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-link-") as tmp:
        for dataset in args.datasets.split(","):
            settings, default_epochs = SETTINGS.get(dataset, (["model=sage"], 3))
            epochs = args.epochs or default_epochs
            rows = []
            for ranks in [int(r) for r in args.ranks.split(",")]:
                for algorithm in args.algorithms.split(","):
                    print(f"{dataset}: {algorithm} on {ranks} rank(s) ...", file=sys.stderr)
                    run = variant_run(
                        args, Path(tmp), "link", dataset, algorithm, ranks, epochs,
                        ["task=link", *settings], [f"algorithm={algorithm}"],
                    )  # fmt: skip
                    rows.append(summarize(run, batch_size_of(settings)))
            report(dataset, epochs, rows)
            results[dataset] = {"epochs": epochs, "settings": settings, "runs": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def report(dataset: str, epochs: int, rows: list[dict]) -> None:
    print(f"\nlink prediction on {dataset}, {epochs} epochs (median after the first)\n")
    columns = [("edges/s", "edges_per_s", ".0f"), ("val MRR", "val_mrr", ".4f")]
    columns += [("test MRR", "test_mrr", ".4f"), ("test H@10", "test_hits@10", ".4f")]
    print_comparison(rows, "edges_per_s", columns)


if __name__ == "__main__":
    main()
