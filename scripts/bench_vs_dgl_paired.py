#!/usr/bin/env python
"""gnnrun against DGL 2.1 in lockstep: each operation once on each side, alternating.

For a machine shared with other work, where a figure taken a minute after
another's is no ratio: DGL runs in a worker process of its own venv
(scripts/dgl_lockstep.py) that does one operation when asked and waits, and
this process times the same operation on gnnrun's side right before or after
it (the order alternates), so each pair of figures saw the same machine. For
each operation it prints both sides' median time, the median of the `--pairs`
pair ratios (DGL's time over gnnrun's: above 1 gnnrun is ahead) with their
range, and the same ratio in CPU time (process time, all threads), which
moves less with other processes on the cores than wall time does.

Operations (`--ops`, comma-separated): `agg:sum|mean:WIDTH` (gnnrun's public
`aggregate` on a `Block.from_csr`, DGL's `update_all`), `epoch:sage|gcn:DROPOUT`
(a full-batch epoch of `build_model`'s SAGE-mean or GCN 3 x 256, cross
entropy over the training vertices, Adam; DGL's SAGEConv / GraphConv with the
same dropout after each hidden layer, none on the input).

The graph: `--graph chung-lu` (default: scripts/bench_kernels.py's 200k-vertex,
5M-edge Chung-Lu, random features, 16 classes, every vertex trained) or an
.npz with `indptr` and `indices` (or the DGL peers' `src`), `feat`, `label`,
`train_idx` (and `num_classes` or the peers' `meta`), such as the peers'
small.npz. Same threads, allocator and huge pages on both sides.

    .venv/bin/python scripts/bench_vs_dgl_paired.py --dgl-python .dgl-venv/bin/python
    .venv/bin/python scripts/bench_vs_dgl_paired.py --dgl-python .dgl-venv/bin/python \\
        --graph ~/.cache/gnnrun-peers/graphs/small.npz --ops epoch:sage:0,epoch:sage:0.5 --pairs 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gnnrun.memory import allocator_in_use, reexec_with_allocator

sys.path.insert(0, str(Path(__file__).resolve().parent))

reexec_with_allocator()  # as `gnnrun` does: huge pages and tcmalloc (when installed), before torch is imported

# ruff: noqa: E402
import numpy as np
import torch
import torch.nn.functional as F
from bench_kernels import chung_lu
from dgl_side import SCRIPTS, check_dgl_python, features

from gnnrun.models import build_model
from gnnrun.models.registry import ModelConfig
from gnnrun.ops.aggregate import aggregate
from gnnrun.ops.block import Block

DEFAULT_OPS = "agg:sum:128,agg:mean:128,agg:sum:256,agg:mean:256,epoch:sage:0,epoch:gcn:0"


def graph_file(args: argparse.Namespace, tmp: Path) -> Path:
    """The graph as an .npz both sides read (indptr, indices, feat, label, train_idx,
    num_classes)."""
    if args.graph != "chung-lu":
        data = np.load(Path(args.graph).expanduser())
        indices = data["indices"] if "indices" in data.files else data["src"]
        if "num_classes" in data.files:
            classes = int(data["num_classes"])
        elif "meta" in data.files:
            classes = int(data["meta"][3])  # the DGL peers' layout: n, m, dim, classes, seed
        else:
            classes = int(data["label"].max()) + 1
        fields = {k: data[k] for k in ("indptr", "feat", "label", "train_idx")}
    else:
        block = chung_lu(args.nodes, args.edges, args.seed)
        generator = torch.Generator().manual_seed(args.seed)
        fields = {
            "indptr": block.indptr.numpy(),
            "feat": torch.randn(block.num_src, 128, generator=generator).numpy(),
            "label": torch.randint(0, 16, (block.num_src,), generator=generator).numpy(),
            "train_idx": np.arange(block.num_src),
        }
        indices, classes = block.indices.numpy(), 16
    path = tmp / "graph.npz"
    np.savez(path, indices=indices, num_classes=classes, **fields)
    return path


class Ours:
    """gnnrun's side: each operation as a library caller runs it."""

    def __init__(self, path: Path) -> None:
        data = np.load(path)
        self.block = Block.from_csr(data["indptr"], data["indices"])
        self.feat = torch.from_numpy(data["feat"].astype(np.float32))
        self.label = torch.from_numpy(data["label"].astype(np.int64))
        self.train = torch.from_numpy(data["train_idx"].astype(np.int64))
        self.classes = int(data["num_classes"])
        self.inputs: dict = {}
        self.epochs: dict = {}

    def operation(self, kind: str, what: str, size: str):
        if kind == "agg":
            width = int(size)
            if width not in self.inputs:
                self.inputs[width] = torch.from_numpy(features(self.block.num_src, width))
            return lambda: aggregate(self.block, self.inputs[width], what)
        key = (what, float(size))
        if key not in self.epochs:
            fields = {"aggregator": "mean"} if what == "sage" else {}
            cfg = ModelConfig(name=what, hidden=256, layers=3, dropout=key[1], **fields)
            torch.manual_seed(0)
            model = build_model(cfg, self.feat.shape[1], self.classes)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            blocks = [self.block] * cfg.layers

            def run():
                optimizer.zero_grad(set_to_none=True)
                out = model(blocks, self.feat)
                F.cross_entropy(out[self.train], self.label[self.train]).backward()
                optimizer.step()

            self.epochs[key] = run
        return self.epochs[key]

    def time(self, op: str) -> dict:
        run = self.operation(*op.split(":"))
        wall, cpu = time.perf_counter(), time.process_time()
        out = run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        del out
        return {"wall": wall, "cpu": cpu}


class Theirs:
    """DGL's side: the lockstep worker in DGL's venv."""

    def __init__(self, python: str, path: Path, threads: int) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        command = [python, str(SCRIPTS / "dgl_lockstep.py"), f"--data={path}"]
        self.worker = subprocess.Popen(
            [*command, f"--threads={threads}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        ready = self.worker.stdout.readline()
        if not ready:
            sys.exit(f"the DGL worker did not start: {' '.join(command)}")
        self.versions = json.loads(ready)

    def time(self, op: str) -> dict:
        self.worker.stdin.write(op.replace(":", " ") + "\n")
        self.worker.stdin.flush()
        answer = self.worker.stdout.readline()
        if not answer:
            sys.exit(f"the DGL worker stopped at {op} (its error is above)")
        return json.loads(answer)

    def close(self) -> None:
        self.worker.stdin.write("\n")
        self.worker.stdin.flush()
        self.worker.wait()


def check_ops(text: str) -> list[str]:
    ops = [op for op in text.split(",") if op]
    for op in ops:
        parts = op.split(":")
        ok = len(parts) == 3 and (
            (parts[0] == "agg" and parts[1] in ("sum", "mean") and parts[2].isdigit())
            or (parts[0] == "epoch" and parts[1] in ("sage", "gcn"))
        )
        if ok and parts[0] == "epoch":
            try:
                ok = 0 <= float(parts[2]) < 1
            except ValueError:
                ok = False
        if not ok:
            sys.exit(
                f"--ops: {op!r} is not an operation; give agg:sum|mean:WIDTH or "
                "epoch:sage|gcn:DROPOUT, e.g. agg:sum:128,epoch:gcn:0"
            )
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dgl-python", required=True, help="the python of a venv with DGL 2.1")
    parser.add_argument("--graph", default="chung-lu", help="chung-lu, or an .npz (see above)")
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", default=DEFAULT_OPS)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write every pair's figures here")
    args = parser.parse_args()
    ops = check_ops(args.ops)
    if args.graph != "chung-lu" and not Path(args.graph).expanduser().is_file():
        sys.exit(f"--graph {args.graph}: no such file; give chung-lu or an .npz")
    check_dgl_python(args.dgl_python)
    torch.set_num_threads(args.threads)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_vs_dgl_paired_") as tmp:
        path = graph_file(args, Path(tmp))
        ours = Ours(path)
        theirs = Theirs(args.dgl_python, path, args.threads)
        print(
            f"graph {args.graph}: {ours.block.num_src:,} vertices, {ours.block.num_edges:,} "
            f"edges; {args.threads} threads; allocator {allocator_in_use()}, "
            f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}; DGL "
            f"{theirs.versions['dgl']} (torch {theirs.versions['torch']}); "
            f"load {' '.join(f'{v:.1f}' for v in os.getloadavg())}",
            flush=True,
        )
        for op in ops:
            theirs.time(op), ours.time(op)  # warm-up: first calls, builds, caches
            pairs = []
            for i in range(args.pairs):
                if i % 2:
                    mine, dgl = ours.time(op), theirs.time(op)
                else:
                    dgl, mine = theirs.time(op), ours.time(op)
                pairs.append({"dgl": dgl, "gnnrun": mine})
            wall = [p["dgl"]["wall"] / p["gnnrun"]["wall"] for p in pairs]
            cpu = [p["dgl"]["cpu"] / p["gnnrun"]["cpu"] for p in pairs]
            dgl_ms = statistics.median(p["dgl"]["wall"] for p in pairs) * 1e3
            our_ms = statistics.median(p["gnnrun"]["wall"] for p in pairs) * 1e3
            load = os.getloadavg()[0]
            print(
                f"{op:16s} DGL {dgl_ms:8.1f} ms  gnnrun {our_ms:8.1f} ms  DGL / gnnrun: "
                f"{statistics.median(wall):.2f}x [{min(wall):.2f}-{max(wall):.2f}], "
                f"CPU time {statistics.median(cpu):.2f}x; load {load:.1f}",
                flush=True,
            )
            results.append({"op": op, "pairs": pairs, "load": load})
        theirs.close()
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": None}, "ops": results}))


if __name__ == "__main__":
    main()
