#!/usr/bin/env python
"""Minibatch GraphSAGE training step: gnnrun against the same model in plain PyTorch.

Graph: the seeded Chung-Lu power-law graph of scripts/bench_kernels.py (default
1M vertices, 25M directed edges), 128-d random float32 features, 47 random
classes. Model and sampling: the `sage_products` preset (configs/model/
sage_products.yaml: 3 SAGE-mean layers, 256 hidden, dropout 0.5, batch 1000,
fanouts seeds-first [15, 10, 5], Adam lr 0.003), built with
`gnnrun.models.build_model` and sampled with `gnnrun.algorithms.minibatch.sources`
(`LocalGraphSource` + `make_minibatch`) as `algorithm=single
algorithm.mode=minibatch` trains, with its step keys.

Every step samples one minibatch (MBC: neighbour sampling, compaction, input
feature gather, labels) and trains both models on it:

- gnnrun: `build_model` on the preset (native aggregation, kernels/aggregate.cpp);
- plain: the same model written with plain PyTorch ops (mean aggregation by
  `index_select` + `index_add_` over the same blocks, `nn.Linear`, the same
  project-first order for the narrow last layer), starting from the same weights;

each timed in FWD (model + cross entropy), BWD (backward) and OPT (zero_grad +
Adam step). MBC is shared, and counted in both totals. After `--warmup` steps,
`--steps` steps are timed: the table gives the median and p10/p90 per phase,
the ratio plain/gnnrun, and the time of an "epoch" of `--steps` steps (the
sum of the step totals). With `--dgl-python PATH` (the python of a venv with
DGL 2.1, which does not import on gnnrun's torch), DGL's GraphSAGE step on the
same graph, features, labels, batches, widths, dropout, optimizer and threads
(scripts/dgl_minibatch.py: NeighborSampler, SAGEConv mean) and the ratio of
DGL's step to gnnrun's, in the same run. `--threads` threads (torch.set_num_threads, also the OpenMP
kernels'). `--profile` adds a torch.profiler table of 5 more gnnrun steps.
Other processes on the machine slow every phase (2-thread OpenMP regions wait
for a descheduled thread): the run reports the cores they kept busy.

Fanout convention: gnnrun lists fanouts from the seeds outwards (PyG's order);
DGL's `NeighborSampler([15, 10, 5])` gives the seeds 5, i.e. gnnrun's
`--fanouts 5 10 15`. The table says which one ran.

    .venv/bin/python scripts/bench_train.py
    .venv/bin/python scripts/bench_train.py --threads 2 --steps 10 --json train.json
    .venv/bin/python scripts/bench_train.py --fanouts 5 10 15 --profile
    .venv/bin/python scripts/bench_train.py --dgl-python DGL_VENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# ruff: noqa: E402  (the memory settings must come before torch is imported)
from gnnrun.memory import allocator_in_use, reexec_with_allocator

reexec_with_allocator()  # as `gnnrun` does: huge pages and tcmalloc (when installed), before torch is imported

import numpy as np
import torch
from bench_kernels import chung_lu  # scripts/ is on sys.path when this file runs
from dgl_side import check_dgl_python, run_worker

from gnnrun.algorithms import LocalGraphSource, SampledConfig, make_minibatch, step_key
from gnnrun.models import ACTIVATIONS, build_model
from gnnrun.models.registry import ModelConfig
from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op
from gnnrun.ops.precision import autocast
from gnnrun.train.optimizer import OptimizerConfig

PRESET = "sage_products"
GOAL = 1.8  # DGL's step over gnnrun's
PHASES = ("mbc", "fwd", "bwd", "opt", "total", "cpu")


# ----------------------------------------------------------------------- setup


def preset_config(
    fanouts: list[int] | None,
) -> tuple[ModelConfig, OptimizerConfig, SampledConfig]:
    """The model, optimizer and sampling that `gnnrun train model=sage_products` composes."""
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.schemas import register_schemas

    register_schemas()
    overrides = [f"model={PRESET}"]
    if fanouts is not None:
        overrides.append(f"algorithm.fanouts=[{','.join(map(str, fanouts))}]")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=overrides))
    return cfg.model, cfg.optimizer, cfg.algorithm


class Graph:
    """What LocalGraphSource reads from a GraphDataset: indptr, indices, feat."""

    def __init__(self, block: Block, feat: np.ndarray) -> None:
        self.indptr = block.indptr.numpy()
        self.indices = block.indices.numpy()
        self.feat = feat


class TimedSource(LocalGraphSource):
    """LocalGraphSource that also accumulates the time of its feature gathers."""

    feature_seconds = 0.0

    def features(self, nodes):
        start = time.perf_counter()
        out = super().features(nodes)
        self.feature_seconds += time.perf_counter() - start
        return out


# -------------------------------------------------------------- plain PyTorch


def scatter_mean(block: Block, dst: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean over in-neighbours with index_select + index_add_ (autograd does the backward)."""
    messages = x.index_select(0, block.indices)
    total = x.new_zeros((block.num_dst, x.shape[1])).index_add_(0, dst, messages)
    return total / block.in_degrees().clamp(min=1).to(x.dtype)[:, None]


class PlainSAGEConv(torch.nn.Module):
    """gnnrun's SAGEConv (mean) in plain PyTorch: W_self x_v + W_neigh mean_u x_u."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.neigh = torch.nn.Linear(in_dim, out_dim, bias=False)
        self.self_loop = torch.nn.Linear(in_dim, out_dim)
        self.project_first = out_dim < in_dim

    def forward(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        dst = torch.repeat_interleave(torch.arange(block.num_dst), block.in_degrees())
        if self.project_first:
            neigh = scatter_mean(block, dst, self.neigh(x))
        else:
            neigh = self.neigh(scatter_mean(block, dst, x))
        return self.self_loop(x[: block.num_dst]) + neigh


class PlainSAGE(torch.nn.Module):
    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int) -> None:
        super().__init__()
        dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]
        self.layers = torch.nn.ModuleList(
            PlainSAGEConv(dims[i], dims[i + 1]) for i in range(cfg.layers)
        )
        self.activation = ACTIVATIONS[cfg.activation]
        self.dropout = torch.nn.Dropout(cfg.dropout)

    def forward(self, blocks: list[Block], x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, self.dropout(h))
            if i < len(self.layers) - 1:
                h = self.activation(h)
        return h


# --------------------------------------------------------------------- timing


def train_step(model, optimizer, blocks, x, y, precision: str = "fp32") -> dict[str, float]:
    """One step as gnnrun.train.trainer.train_epoch runs it; seconds per phase."""
    t0 = time.perf_counter()
    with autocast(precision, torch.device("cpu")):
        loss = torch.nn.functional.cross_entropy(model(blocks, x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    t3 = time.perf_counter()
    return {"fwd": t1 - t0, "bwd": t2 - t1, "opt": t3 - t2, "loss": float(loss.detach())}


def percentiles(values: list[float]) -> dict[str, float]:
    ms = np.asarray(values) * 1e3
    return {
        "median": float(np.median(ms)),
        "p10": float(np.percentile(ms, 10)),
        "p90": float(np.percentile(ms, 90)),
    }


def busy_cores() -> float:
    """CPU seconds the whole machine has been busy so far (to report other load)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def profile_steps(model, optimizer, source, seeds_of, labels, sampling, steps: int) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            seeds = seeds_of(10_000 + step)
            with record_function("MBC"):
                blocks, x = make_minibatch(source, seeds, sampling.fanouts, step_key(1, 1, step))
            with record_function("FWD"):
                loss = torch.nn.functional.cross_entropy(model(blocks, x), labels[seeds])
            with record_function("BWD"):
                loss.backward()
            with record_function("OPT"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
    print(f"\ntorch.profiler, gnnrun, {steps} steps (self CPU time, top 25):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


# ----------------------------------------------------------------------- main


def dgl_steps(args, cfg, sampling, optimizer_cfg, source: LocalGraphSource, labels, steps) -> dict:
    """DGL's training steps on the same graph, features, labels and batches (its own venv)."""
    if cfg.activation != "relu" or cfg.aggregator != "mean":
        sys.exit("the DGL side trains SAGE-mean with ReLU only")
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        data = Path(tmp) / "steps.npz"
        np.savez(
            data,
            indptr=np.asarray(source.indptr),
            indices=np.asarray(source.indices),
            feat=source.feat,
            label=labels.numpy(),
            seeds=np.stack(steps),
        )
        worker = run_worker(
            args.dgl_python,
            "dgl_minibatch.py",
            [
                f"--data={data}",
                "--fanouts",
                *map(str, sampling.fanouts),
                f"--classes={args.classes}",
                f"--hidden={cfg.hidden}",
                f"--dropout={cfg.dropout}",
                f"--lr={optimizer_cfg.lr}",
                f"--weight-decay={optimizer_cfg.weight_decay}",
                f"--warmup={args.warmup}",
                f"--seed={args.seed}",
            ],
            args.threads,
            timeout=3600,
        )
    if "error" in worker:
        sys.exit("the DGL side failed (above)")
    return worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=25_000_000)
    parser.add_argument("--feat-dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=47)
    parser.add_argument("--fanouts", type=int, nargs="+", help="seeds first; default: preset")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="timed steps (the 'epoch')")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="also profile 5 gnnrun steps")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="gnnrun's train.precision (the plain and DGL models train in fp32)",
    )
    parser.add_argument(
        "--dgl-python", help="the python of a venv with DGL 2.1: DGL's step, side by side"
    )
    args = parser.parse_args()
    check_dgl_python(args.dgl_python)
    torch.set_num_threads(args.threads)
    cfg, optimizer_cfg, sampling = preset_config(args.fanouts)
    for stem, op in (("aggregate", "csr_aggregate"), ("sampler", "sample_neighbors")):
        if native_op(op, stem) is None:
            raise SystemExit(f"kernels/{stem}.cpp cannot be built: this would time the fallback")

    start = time.perf_counter()
    graph_block = chung_lu(args.nodes, args.edges, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    feat = rng.standard_normal((args.nodes, args.feat_dim), dtype=np.float32)
    labels = torch.from_numpy(rng.integers(0, args.classes, args.nodes))
    source = TimedSource(Graph(graph_block, feat))
    del graph_block
    print(
        f"Chung-Lu graph: {args.nodes:,} vertices, {args.edges:,} edges, {args.feat_dim}-d "
        f"float32 features, {args.classes} classes; built in {time.perf_counter() - start:.1f} s"
    )

    torch.manual_seed(args.seed)
    model = build_model(cfg, args.feat_dim, args.classes)
    plain = PlainSAGE(cfg, args.feat_dim, args.classes)
    plain.load_state_dict(model.state_dict())
    optimizers = {
        name: torch.optim.Adam(
            m.parameters(), lr=optimizer_cfg.lr, weight_decay=optimizer_cfg.weight_decay
        )
        for name, m in (("gnnrun", model), ("plain", plain))
    }
    models = {"gnnrun": model, "plain": plain}
    order = torch.from_numpy(rng.permutation(args.nodes))
    batch = sampling.batch_size

    def seeds_of(step: int) -> torch.Tensor:
        lo = (step * batch) % (args.nodes - batch)
        return order[lo : lo + batch]

    # The two models compute the same function from the same weights.
    blocks, x = make_minibatch(source, seeds_of(0), sampling.fanouts, step_key(args.seed, 0, 0))
    model.eval(), plain.eval()
    with torch.no_grad():
        diff = float((model(blocks, x) - plain(blocks, x)).abs().max())
    model.train(), plain.train()
    sizes = ", ".join(f"{b.num_src:,}->{b.num_dst:,} ({b.num_edges:,} edges)" for b in blocks)
    print(
        f"preset {PRESET}: {cfg.layers} x {cfg.hidden} SAGE-{cfg.aggregator}, batch {batch}, "
        f"fanouts {sampling.fanouts} (seeds first; DGL order {sampling.fanouts[::-1]}), lr {optimizer_cfg.lr}, "
        f"dropout {cfg.dropout}; threads {args.threads}; allocator {allocator_in_use()}; "
        f"gnnrun in {args.precision}, plain PyTorch and DGL in fp32"
    )
    print(f"first minibatch blocks (input layer first): {sizes}; max |gnnrun - plain| {diff:.1e}")

    times: dict[str, dict[str, list[float]]] = {n: {p: [] for p in PHASES} for n in models}
    sampled_edges, input_nodes, feature_ms = [], [], []
    machine0, own0 = busy_cores(), time.process_time()
    wall0 = time.perf_counter()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            machine0, own0, wall0 = busy_cores(), time.process_time(), time.perf_counter()
        seeds = seeds_of(step + 1)
        source.feature_seconds = 0.0
        c0, t0 = time.process_time(), time.perf_counter()
        blocks, x = make_minibatch(
            source, seeds, sampling.fanouts, step_key(args.seed, 0, step + 1)
        )
        y = labels[seeds]
        mbc, mbc_cpu = time.perf_counter() - t0, time.process_time() - c0
        # Alternate which model goes first, so neither always finds the caches warm.
        names = ["gnnrun", "plain"] if step % 2 == 0 else ["plain", "gnnrun"]
        phases = {}
        for name in names:
            c0 = time.process_time()
            precision = args.precision if name == "gnnrun" else "fp32"
            phases[name] = train_step(models[name], optimizers[name], blocks, x, y, precision)
            phases[name]["cpu"] = mbc_cpu + time.process_time() - c0
        if step < args.warmup:
            continue
        sampled_edges.append(sum(b.num_edges for b in blocks))
        input_nodes.append(blocks[0].num_src)
        feature_ms.append(source.feature_seconds * 1e3)
        for name, p in phases.items():
            times[name]["mbc"].append(mbc)
            for phase in ("fwd", "bwd", "opt"):
                times[name][phase].append(p[phase])
            times[name]["total"].append(mbc + p["fwd"] + p["bwd"] + p["opt"])
            times[name]["cpu"].append(p["cpu"])
    wall = time.perf_counter() - wall0
    own = (time.process_time() - own0) / wall
    other = (busy_cores() - machine0) / wall - own

    stats = {n: {p: percentiles(times[n][p]) for p in PHASES} for n in models}
    print(
        f"\n{args.steps} timed steps after {args.warmup} warm-up; per step "
        f"{np.mean(sampled_edges):,.0f} sampled edges, {np.mean(input_nodes):,.0f} input vertices; "
        f"this process used {own:.2f} cores on average, other processes kept {other:.2f} of the "
        f"machine's {os.cpu_count()} cores busy meanwhile"
    )
    print(
        "ms per step: median [p10, p90]; MBC (sampling + compaction + feature gather) is shared; "
        "CPU: CPU time of this process per step (all threads, MBC included)"
    )
    print("| phase | gnnrun | plain PyTorch | plain / gnnrun |\n|---|---|---|---|")
    for phase in PHASES:
        g, p = stats["gnnrun"][phase], stats["plain"][phase]
        print(
            f"| {phase.upper()} | {g['median']:.1f} [{g['p10']:.1f}, {g['p90']:.1f}] "
            f"| {p['median']:.1f} [{p['p10']:.1f}, {p['p90']:.1f}] "
            f"| {p['median'] / g['median']:.2f}x |"
        )
    feature = float(np.median(feature_ms))
    mbc = stats["gnnrun"]["mbc"]["median"]
    print(
        f"MBC split: sampling + compaction {mbc - feature:.1f} ms, feature gather {feature:.1f} ms"
    )
    step_ms = stats["gnnrun"]["total"]["median"]
    dgl = None
    if args.dgl_python:
        steps = [seeds_of(step + 1).numpy() for step in range(args.warmup + args.steps)]
        dgl = dgl_steps(args, cfg, sampling, optimizer_cfg, source, labels, steps)
        ms = dgl["ms"]
        print(
            f"DGL {dgl['dgl']} (torch {dgl['torch']}, {dgl['threads']} threads, allocator "
            f"{dgl['allocator']}), the same batches, {dgl['mean_sampled_edges']:,.0f} sampled "
            f"edges per step: MBC {ms['mbc']:.1f}, FWD {ms['fwd']:.1f}, BWD {ms['bwd']:.1f}, "
            f"OPT {ms['opt']:.1f}, TOTAL {ms['total']:.1f} ms"
        )
        ratio = ms["total"] / step_ms
        print(
            f"gnnrun step {step_ms:.1f} ms against DGL's {ms['total']:.1f} ms: "
            f"DGL / gnnrun {ratio:.2f}x (goal >= {GOAL}x: {'met' if ratio >= GOAL else 'NOT met'})"
        )
    epoch = {n: float(np.sum(times[n]["total"])) for n in models}
    print(
        f"epoch of {args.steps} steps (sum of step totals): gnnrun {epoch['gnnrun']:.2f} s, "
        f"plain {epoch['plain']:.2f} s; at the median, an ogbn-products epoch "
        f"(197 steps of 1000) would take {197 * step_ms / 1e3:.0f} s with gnnrun"
    )

    if args.profile:
        profile_steps(model, optimizers["gnnrun"], source, seeds_of, labels, sampling, 5)
    if args.json:
        result = {
            "threads": args.threads,
            "torch": torch.__version__,
            "nodes": args.nodes,
            "edges": args.edges,
            "fanouts": sampling.fanouts,
            "precision": args.precision,
            "batch_size": batch,
            "steps": args.steps,
            "warmup": args.warmup,
            "mean_sampled_edges": float(np.mean(sampled_edges)),
            "mean_input_nodes": float(np.mean(input_nodes)),
            "feature_gather_ms": feature,
            "own_cores": own,
            "other_load_cores": other,
            "max_abs_diff": diff,
            "ms": stats,
            "epoch_s": epoch,
            "dgl": dgl,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
