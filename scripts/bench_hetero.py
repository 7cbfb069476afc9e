#!/usr/bin/env python
"""RGCN on a heterogeneous graph: `minibatch` and `pipeline` on 1 and 2 ranks, and DGL 2.1's
RGCN on the same graph, in one invocation.

Every gnnrun run is a fresh `gnnrun train` subprocess (scripts/train_runs.py) on the
same prepared `--dataset` (default synthetic-hetero-medium: 518k vertices of 4 types,
6.6M edges of 8 relations) with `model=rgcn` (2 layers of 64, 2 bases, fanouts 25 / 20
per relation, batches of 1,024 papers, sparse embeddings for the featureless types),
`--epochs` epochs and one sampled evaluation after the last. Figures per run: the
median epoch (the slowest rank's, over the epochs after the first), its phases on
rank 0, training bytes sent per epoch by rank 0, peak memory, the final validation
and test accuracy; ratios: `pipeline` against `minibatch` with the same ranks, and
each run against 1-rank `minibatch`.

With `--dgl-python PATH` (the python of a venv with DGL 2.1: `make dgl-venv`), DGL's
entity-classification RGCN (scripts/dgl_rgcn.py: HeteroGraphConv of GraphConv with
right normalisation and basis weights, a self loop, sparse embeddings with SparseAdam,
NeighborSampler with the same fanout per relation) trains the same graph, features,
labels, split, widths, batch size, learning rate, epochs and threads in one process,
from gnnrun's initial weight scales: its median epoch against 1-rank `minibatch` of the
same run. The graph goes to DGL as an .npz (scripts/hetero_npz.py).

    .venv/bin/python scripts/bench_hetero.py --dgl-python .dgl-venv/bin/python   # about 15 minutes here
    .venv/bin/python scripts/bench_hetero.py --dataset synthetic-hetero --epochs 2   # a smoke test
    .venv/bin/python scripts/bench_hetero.py --json hetero.json
    .venv/bin/python scripts/bench_hetero.py --ranks 1 --algorithms minibatch --precisions fp32,bf16
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


def summarize(run: dict) -> dict:
    """The run's figures (module docstring) from its per-rank records."""
    figures = epoch_figures(run)
    if figures.get("failed"):
        return figures
    last = figures.pop("last")
    return {**figures, "val_acc": last.get("val_acc"), "test_acc": last.get("test_acc")}


def composed(args):
    """The config `gnnrun train dataset=... model=...` composes (for the DGL side's settings)."""
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.schemas import register_schemas

    register_schemas()
    overrides = [
        f"dataset={args.dataset}",
        f"model={args.model}",
        f"paths.data_root={args.data_root}",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_objects(compose("config", overrides=overrides))


def dgl_run(args, tmp: Path) -> dict:
    """DGL's RGCN on the prepared dataset, in DGL's venv (module docstring)."""
    from dgl_side import run_worker
    from hetero_npz import write_hetero_npz

    from gnnrun.data import prepare_dataset

    cfg = composed(args)
    data = tmp / "hetero.npz"
    write_hetero_npz(prepare_dataset(cfg.dataset), data)
    model = cfg.model
    settings = {
        "hidden": model.hidden,
        "layers": model.layers,
        "num_bases": model.num_bases,
        "fanouts": list(cfg.algorithm.fanouts),
        "batch_size": cfg.algorithm.batch_size,
        "lr": cfg.optimizer.lr,
        "epochs": args.epochs,
        "dropout": model.dropout,
        "seed": cfg.train.seed,
        # gnnrun's initial scales (the same math; DGL's own example starts its self-loop
        # weights and embeddings far larger, and trails by 36 points after 5 epochs).
        "init": "gnnrun",
    }
    print("DGL's RGCN ...", file=sys.stderr, flush=True)
    worker = run_worker(
        args.dgl_python,
        "dgl_rgcn.py",
        [f"--data={data}", f"--settings={json.dumps(settings)}"],
        os.cpu_count() or 1,
        timeout=args.timeout,
    )
    if "error" in worker:
        sys.exit(f"the DGL side failed:\n{worker['error']}")
    return worker


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="synthetic-hetero-medium")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--ranks", default="1,2", help="comma-separated rank counts")
    parser.add_argument("--algorithms", default="minibatch,pipeline")
    parser.add_argument("--model", default="rgcn")
    parser.add_argument(
        "--precisions",
        default="fp32",
        help="comma-separated train.precision values; a run other than fp32 is labelled "
        "with its precision and compared with the 1-rank fp32 minibatch",
    )
    parser.add_argument("--dgl-python", help="the python of a venv with DGL 2.1")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument(
        "--data-root",
        default=os.environ.get("GNNRUN_DATA_ROOT", "data"),
        help="where the prepared dataset and partitions are (GNNRUN_DATA_ROOT)",
    )
    args = parser.parse_args()
    if args.dgl_python:
        from dgl_side import check_dgl_python

        check_dgl_python(args.dgl_python)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-hetero-") as tmp:
        for ranks in [int(r) for r in args.ranks.split(",")]:
            for algorithm in args.algorithms.split(","):
                for precision in args.precisions.split(","):
                    label = algorithm if precision == "fp32" else f"{algorithm} {precision}"
                    print(f"{label} on {ranks} rank(s) ...", file=sys.stderr, flush=True)
                    run = variant_run(
                        args, Path(tmp), "hetero", args.dataset, label, ranks, args.epochs,
                        [f"model={args.model}"],
                        [f"algorithm={algorithm}", f"train.precision={precision}"],
                    )  # fmt: skip
                    rows.append(summarize(run))
        dgl = dgl_run(args, Path(tmp)) if args.dgl_python else None
    report(rows, dgl, args)


def report(rows: list[dict], dgl: dict | None, args) -> None:
    print(f"\n{args.model} on {args.dataset}, {args.epochs} epochs (median after the first)\n")
    columns = [("val", "val_acc", ".4f"), ("test", "test_acc", ".4f")]
    base = print_comparison(rows, "epoch_s", columns)
    if dgl is not None:
        ratio = dgl["epoch_s_median"] / base["epoch_s"] if base else float("nan")
        print(
            f"\nDGL {dgl['dgl']} (torch {dgl['torch']}, {dgl['threads']} threads) RGCN, 1 process: "
            f"epoch {dgl['epoch_s_median']:.2f} s, val {dgl['val_acc']:.4f}, test "
            f"{dgl['test_acc']:.4f}; DGL / gnnrun 1-rank minibatch: {ratio:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "dgl": dgl}, indent=2) + "\n")


if __name__ == "__main__":
    main()
