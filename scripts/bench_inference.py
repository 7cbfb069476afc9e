#!/usr/bin/env python
"""`gnnrun predict` against the full-graph forward pass and against sampled inference.

One model is trained first (`algorithm=single algorithm.mode=minibatch`, sampled
with the model's fanouts, `--epochs` epochs) unless `--run` names a run directory
to reuse. Then, each in a fresh process, on the same prepared dataset:

- `gnnrun predict` on each of `--ranks` (the partition made beforehand, not timed):
  vertices per second (all vertices over the slowest rank's layers and writing),
  the whole command's wall time (start-up, loading, launch included), the peak
  resident memory of each rank (VmHWM: it counts the pages of the memory-mapped
  dataset and layer files the rank touched) and its anonymous memory (heap and
  tensors, sampled after every chunk);
- the full-graph forward pass in one process (`model([graph] * L, x)`, all rows in
  memory): vertices per second and peak resident memory;
- sampled inference with the training fanouts, as the trainer evaluates a sampled
  model: every vertex in batches of `algorithm.batch_size`, its blocks sampled: vertices
  per second, and how many predictions differ from the exact ones.

Accuracies are on the dataset's validation and test vertices. On a heterogeneous
graph (`--model rgcn`) every figure counts the labelled type's vertices, the ones
`gnnrun predict` writes; the layers run over every type.

    .venv/bin/python scripts/bench_inference.py                                   # synthetic-medium
    .venv/bin/python scripts/bench_inference.py --dataset synthetic-small --epochs 1  # a smoke test
    .venv/bin/python scripts/bench_inference.py --dataset synthetic-large --run RUN_DIR --chunk 65536
    .venv/bin/python scripts/bench_inference.py --run RUN_DIR --profile    # where 1 rank's time goes
    .venv/bin/python scripts/bench_inference.py --dataset synthetic-hetero-medium --model rgcn --epochs 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GNNRUN = [sys.executable, "-m", "gnnrun.cli"]


def gnnrun(*args: str) -> float:
    """Run `gnnrun ARGS`, failing loudly; return its wall seconds."""
    start = time.perf_counter()
    done = subprocess.run([*GNNRUN, *args], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"gnnrun {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def measure(kind: str, run: Path, dataset: str, exact: Path | None = None) -> dict:
    """`kind` (full | sampled) in a fresh process, for a clean peak memory."""
    args = [sys.executable, __file__, "--measure", kind, "--run", str(run), "--dataset", dataset]
    if exact is not None:
        args += ["--exact", str(exact)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------ in the measuring process


def _loaded(run: Path, dataset_name: str):
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR, inference_overrides
    from gnnrun.config import to_objects
    from gnnrun.data import load_prepared
    from gnnrun.infer.run import load_trained_model
    from gnnrun.models import GNN
    from gnnrun.schemas import register_schemas

    register_schemas()
    overrides = inference_overrides(run, [f"dataset={dataset_name}"])
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=overrides))
    checkpoint = Path(cfg.train.checkpoint_dir) / "checkpoint.pt"
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    in_dim, classes = GNN.dims_of(state["model"], cfg.model.layers)
    dataset = load_prepared(cfg.dataset)
    return cfg, dataset, load_trained_model(cfg, checkpoint, in_dim, classes, dataset.hetero)


def _written(dataset) -> slice:
    """The vertices `gnnrun predict` writes: all of them, or a heterogeneous graph's
    labelled type."""
    schema = dataset.hetero
    if schema is None:
        return slice(0, dataset.num_nodes)
    first = int(schema.offsets[schema.target_type])
    return slice(first, first + schema.type_counts[schema.target_type])


def _accuracy(dataset, predicted: np.ndarray) -> dict:
    label = np.asarray(dataset.label)
    return {
        f"{split}_acc": float(np.mean(predicted[ids] == label[ids]))
        for split in ("val", "test")
        if (ids := np.asarray(getattr(dataset, f"{split}_idx"))).size
    }


def _peak_mb() -> float:
    from gnnrun.memory import PeakMemory

    return PeakMemory().run_peak_mb()


def full_forward(run: Path, dataset_name: str) -> dict:
    import torch

    from gnnrun.algorithms import LocalGraphSource
    from gnnrun.ops.block import Block

    cfg, dataset, model = _loaded(run, dataset_name)
    graph = Block.from_csr(dataset.indptr, dataset.indices, symmetric=not dataset.directed)
    if dataset.hetero is None:
        x = torch.from_numpy(np.array(dataset.feat, dtype=np.float32))
    else:  # the relations, the types and every vertex's typed input, as `single` builds them
        every = torch.arange(dataset.num_nodes)
        graph.etypes = torch.from_numpy(dataset.edge_type.astype(np.int64))
        graph.node_types = torch.from_numpy(dataset.hetero.type_of(every.numpy()))
        x = LocalGraphSource(dataset).features(every)
    start = time.perf_counter()
    with torch.no_grad():
        logits = model([graph] * len(model.layers), x)
    seconds = time.perf_counter() - start
    predicted = logits.argmax(1).numpy()
    written = _written(dataset)
    return {
        "vertices_per_s": (written.stop - written.start) / seconds,
        "seconds": seconds,
        "peak_rss_mb": _peak_mb(),
        **_accuracy(dataset, predicted),
    }


def sampled(run: Path, dataset_name: str, exact: Path) -> dict:
    import torch

    from gnnrun.algorithms import EVAL_STREAM, LocalGraphSource, make_minibatch, step_key
    from gnnrun.algorithms.minibatch.sources import hop_fanouts
    from gnnrun.infer import read_output

    cfg, dataset, model = _loaded(run, dataset_name)
    source = LocalGraphSource(dataset)
    fanouts = hop_fanouts(cfg.algorithm, dataset.hetero)
    size = cfg.algorithm.batch_size
    written = _written(dataset)  # the vertices sampled as seeds: those predict writes
    predicted = np.full(dataset.num_nodes, -1, dtype=np.int64)
    start = time.perf_counter()
    with torch.no_grad():
        for step, first in enumerate(range(written.start, written.stop, size)):
            seeds = torch.arange(first, min(first + size, written.stop))
            key = step_key(EVAL_STREAM, 0, step)
            blocks, x = make_minibatch(source, seeds, fanouts, key)
            predicted[first : first + seeds.numel()] = model(blocks, x).argmax(1).numpy()
    seconds = time.perf_counter() - start
    exact_classes = read_output(exact)["class"]  # sorted by id: the source's (or the type's)
    if dataset.hetero is None:
        order = np.argsort(dataset.source_ids(np.arange(dataset.num_nodes)))
        differ = float(np.mean(predicted[order] != exact_classes))
    else:
        differ = float(np.mean(predicted[written] != exact_classes))
    return {
        "vertices_per_s": (written.stop - written.start) / seconds,
        "seconds": seconds,
        "peak_rss_mb": _peak_mb(),
        "fanouts": [list(f) if isinstance(f, list) else f for f in fanouts],
        "differ_from_exact": differ,
        **_accuracy(dataset, predicted),
    }


def profile(run: Path, dataset_name: str, chunk: int, workdir: Path) -> None:
    """cProfile of `gnnrun predict` on 1 rank, in this process: where its time goes."""
    import cProfile
    import pstats

    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR, inference_overrides
    from gnnrun.config import to_objects
    from gnnrun.data import prepare_dataset
    from gnnrun.infer.run import fit_dataset, infer_on_rank, plan_inference, prepare_work_dir
    from gnnrun.schemas import register_schemas

    register_schemas()
    given = [f"dataset={dataset_name}", "cluster.nprocs=1", f"predict.chunk_vertices={chunk}"]
    given += ["predict.parquet=false", f"predict.output_dir={workdir / 'profiled'}"]
    overrides = inference_overrides(run, given)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=overrides))
    plan = plan_inference(cfg, "predict", run)
    dataset = prepare_dataset(cfg.dataset)
    fit_dataset(cfg, plan, dataset)
    prepare_work_dir(cfg, plan, dataset)
    profiler = cProfile.Profile()
    profiler.enable()
    figures = infer_on_rank(cfg, plan)
    profiler.disable()
    total = sum(figures["layer_s"].values()) + figures["write_s"]
    print(f"\n1 rank, chunk {chunk:,}: layers and writing {total:.2f} s\n")
    print("| function | seconds (own) | share |\n|---|---|---|")
    stats = pstats.Stats(profiler).stats
    rows = sorted(
        ((v[2], f"{k[2]} ({Path(k[0]).name}:{k[1]})") for k, v in stats.items()), reverse=True
    )
    for seconds, name in rows[:12]:
        print(f"| `{name}` | {seconds:.2f} | {seconds / total:.0%} |")


# ------------------------------------------------------------------------- driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="synthetic-medium")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--chunk", type=int, default=65536, help="predict.chunk_vertices")
    parser.add_argument("--epochs", type=int, default=2, help="training epochs (without --run)")
    parser.add_argument("--model", help="the model trained (without --run), e.g. rgcn")
    parser.add_argument("--run", type=Path, help="a trained run's directory to reuse")
    parser.add_argument(
        "--workdir", type=Path, help="where runs and outputs go (default: a temp dir)"
    )
    parser.add_argument("--no-full", action="store_true", help="skip the full-graph forward pass")
    parser.add_argument(
        "--profile", action="store_true", help="only profile predict on 1 rank (needs --run)"
    )
    parser.add_argument("--measure", choices=("full", "sampled"), help=argparse.SUPPRESS)
    parser.add_argument("--exact", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure == "full":
        print(json.dumps(full_forward(args.run, args.dataset)))
        return
    if args.measure == "sampled":
        print(json.dumps(sampled(args.run, args.dataset, args.exact)))
        return

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-inference-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GNNRUN_DATA_ROOT", str(work / "data"))
    if args.profile:
        if args.run is None:
            sys.exit("--profile needs --run RUN_DIR (a trained run)")
        profile(args.run, args.dataset, args.chunk, work)
        return
    run = args.run
    if run is None:
        run = work / "run"
        model = [f"model={args.model}"] if args.model else []
        seconds = gnnrun(
            "train", f"dataset={args.dataset}", *model, "algorithm=single",
            "algorithm.mode=minibatch", "cluster.nprocs=1", f"train.epochs={args.epochs}",
            f"hydra.run.dir={run}",
        )  # fmt: skip
        print(f"trained {run} in {seconds:.0f} s", file=sys.stderr)
    summary = json.loads((run / "summary.json").read_text())
    rows = []
    exact = None
    for ranks in [int(r) for r in args.ranks.split(",")]:
        if ranks > 1:
            gnnrun("partition", f"dataset={args.dataset}", f"partitioner.num_parts={ranks}")
        output = work / f"predict-{ranks}"
        wall = gnnrun(
            "predict", f"run={run}", f"dataset={args.dataset}", f"cluster.nprocs={ranks}",
            f"predict.chunk_vertices={args.chunk}", f"predict.output_dir={output}",
            "predict.parquet=false",
        )  # fmt: skip
        manifest = json.loads((output / "manifest.json").read_text())
        exact = exact or output
        rows.append((f"gnnrun predict, {ranks} rank(s)", manifest, wall))
        print(f"predict on {ranks} rank(s): {manifest['vertices_per_s']:,.0f} vertices/s",
              file=sys.stderr)  # fmt: skip
    full = {"error": "skipped"} if args.no_full else measure("full", run, args.dataset)
    sample = measure("sampled", run, args.dataset, exact)

    print(f"\n{args.dataset}: {manifest['vertices']:,} vertices; model {summary['model']} "
          f"({summary['epochs']} epochs of sampled training, fanouts {sample.get('fanouts')}); "
          f"chunk {args.chunk:,} vertices\n")  # fmt: skip
    print("| inference | vertices/s | vs full forward | wall s | peak RSS MB per rank | "
          "anonymous MB per rank | val acc | test acc | differs from exact |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    reference = full.get("vertices_per_s")

    def versus(rate: float) -> str:
        return f"{rate / reference:.2f}x" if reference else "–"

    for name, m, wall in rows:
        rss = " / ".join(f"{r['peak_rss_mb']:,.0f}" for r in m["per_rank"])
        anonymous = " / ".join(f"{r['peak_anonymous_mb']:,.0f}" for r in m["per_rank"])
        print(
            f"| {name} | {m['vertices_per_s']:,.0f} | {versus(m['vertices_per_s'])} | {wall:.1f} | "
            f"{rss} | {anonymous} | "
            f"{m['metrics'].get('val_acc', float('nan')):.4f} | "
            f"{m['metrics'].get('test_acc', float('nan')):.4f} | 0 (exact) |"
        )
    for name, m in (("full-graph forward, 1 process", full), ("sampled, 1 process", sample)):
        if "error" in m:
            print(f"| {name} | {m['error']} | | | | | | | |")
            continue
        differ = f"{m['differ_from_exact']:.2%}" if "differ_from_exact" in m else "–"
        print(
            f"| {name} | {m['vertices_per_s']:,.0f} | {versus(m['vertices_per_s'])} | – | "
            f"{m['peak_rss_mb']:,.0f} | – | {m.get('val_acc', float('nan')):.4f} | "
            f"{m.get('test_acc', float('nan')):.4f} | {differ} |"
        )
    print(f"\ntraining's last (sampled) evaluation: val {summary['final'].get('val_acc', 0):.4f}, "
          f"test {summary['final'].get('test_acc', 0):.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
