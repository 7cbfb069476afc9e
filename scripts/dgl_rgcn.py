#!/usr/bin/env python
"""DGL's minibatch RGCN (entity classification) on a heterogeneous graph exported by a
gnnrun benchmark: its epochs and its accuracy beside gnnrun's RGCN.

Run with the python of a venv that has DGL 2.1 (it does not import on gnnrun's
torch), so this file imports nothing of gnnrun's. The graph is an .npz of
scripts/hetero_npz.py (`node_types` with the target first, `num_nodes`,
`relations` and their `src_{r}`/`dst_{r}` edge lists in ids within their types,
the target's `feat`, `label` and splits); the settings are one JSON object,
given inline or as a file (`--settings '{"hidden": 64, ...}'` or
`--settings run.json`): `hidden`, `layers`, `num_bases`, `fanouts` (one per
layer, seeds first: gnnrun's order), `batch_size`, `lr`, `epochs`, `dropout`,
`seed`, `threads`, and optionally `weight_decay` (dense Adam's, default 0)
and `init` (below).

The model is DGL's rgcn-hetero example's: each layer a `RelGraphConvLayer`,
`HeteroGraphConv({relation: GraphConv(norm="right", weight=False, bias=False)},
aggregate="sum")` with every relation's weight from one `WeightBasis` passed in
through `mod_kwargs`, plus a self-loop weight on the destination rows and a
bias; ReLU and dropout after every layer but the last. For destination v that
is gnnrun's RGCN (gnnrun/models/rgcn.py):

    h'_v = W_0 h_v + b + sum_r mean_{u in N_r(v)} h_u W_r,   W_r = sum_b a_rb V_b

(`norm="right"` divides by the sampled in-degree: the mean; a vertex without
neighbours by r gets nothing from r). As gnnrun does, and unlike the example's
input layer (`weight=False`), every layer has relation weights, and the bases
are capped at the relation count instead of falling back to full weights. A
type that no relation reaches still gets W_0 h_v + b (HeteroGraphConv leaves
it out of its output). The input: the target's features through a
`Linear(F, hidden)`; every other type (and a featureless target) a
`torch.nn.Embedding(count, hidden, sparse=True)` updated by `SparseAdam` at
the same learning rate, the rest by Adam. The bases and coefficients start
as in both (xavier uniform, ReLU gain); the self-loop weight, bias and
embeddings as the setting `init` says: `"dgl"` (the default, DGL's
examples': xavier uniform self-loop weight and embeddings, zero bias) or
`"gnnrun"` (gnnrun's: the self loop an `nn.Linear`'s weight and bias,
embeddings normal with std hidden^-1/2). DGL's start gives far larger logits:
on gnnrun's synthetic MAG of 2000 papers (hidden 64, batches of 128, 10
epochs) a first epoch's mean loss of ~21 against ~3.7 and a test accuracy of
~0.84 against ~0.92 at the end; with `"gnnrun"` this side's losses and
accuracy are gnnrun's, so that the two libraries' accuracy is compared on
the same start.

Sampling: `NeighborSampler` with a `{relation: fanout}` dict per layer (the
same fanout for every relation, input layer first: the reverse of the
settings' list), `sample_blocks` on the heterograph for minibatches of
`batch_size` training vertices of the target type, shuffled every epoch by a
generator seeded with `seed` (DGL's sampling seeded by `dgl.seed`). An epoch's
time (`epoch_s`) is its steps' sampling, feature gather and embedding lookup,
forward and cross entropy, backward and both optimizers' steps; evaluation
(after the last epoch, on the validation and test vertices, with the same
sampler and batch size, without dropout) is timed apart (`eval_s`).
Threads and allocator come from the caller: `--threads` (which wins over the
settings') and the environment (LD_PRELOAD, THP_MEM_ALLOC_ENABLE,
OMP_NUM_THREADS) it inherits. Prints one JSON object: `epoch_s` (every
epoch's seconds), `epoch_s_median`, `train_s_total`, `steps_per_epoch`,
`loss` (every epoch's mean), `val_acc`, `test_acc`, `eval_s`, and the graph
as DGL built it (`num_nodes`, `num_edges`, `num_relations`), the bases, the
classes, `init` and the fanouts as DGL ran them (`dgl_fanouts`, input first).

    PYTHON_WITH_DGL scripts/dgl_rgcn.py --data graph.npz --settings '{"hidden": 64, \\
        "layers": 2, "num_bases": 2, "fanouts": [25, 20], "batch_size": 1024, \\
        "lr": 0.01, "epochs": 3, "dropout": 0.5, "seed": 0, "threads": 2}'
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
from dgl_side import print_result

REQUIRED = (
    "hidden",
    "layers",
    "num_bases",
    "fanouts",
    "batch_size",
    "lr",
    "epochs",
    "dropout",
    "seed",
)


def read_settings(text: str) -> dict:
    """The settings object: `text` itself when it is JSON, else the file it names."""
    settings = json.loads(text if text.lstrip().startswith("{") else Path(text).read_text())
    missing = [k for k in REQUIRED if k not in settings]
    if missing:
        raise SystemExit(f"settings lack {missing}")
    if settings.get("init", "dgl") not in ("dgl", "gnnrun"):
        raise SystemExit(f"settings: init {settings['init']!r} is neither 'dgl' nor 'gnnrun'")
    if len(settings["fanouts"]) != settings["layers"]:
        raise SystemExit(f"fanouts {settings['fanouts']} need one entry per layer")
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="a JSON object, or a file holding one")
    parser.add_argument("--threads", type=int, default=None, help="default: the settings'")
    args = parser.parse_args()
    s = read_settings(args.settings)
    threads = args.threads or int(s.get("threads", 2))
    init = s.get("init", "dgl")

    import dgl
    import dgl.nn as dglnn
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(s["seed"])
    dgl.seed(s["seed"])

    # ------------------------------------------------------------- graph
    data = np.load(args.data)
    node_types = [str(t) for t in data["node_types"]]
    target = str(data["target"])
    counts = dict(zip(node_types, data["num_nodes"].tolist(), strict=True))
    relations = [tuple(str(x) for x in r) for r in data["relations"]]
    names = [name for _, name, _ in relations]
    if len(set(names)) < len(names):  # mod_kwargs and fanouts key by name: make them unique
        names = [f"{src}:{name}:{dst}" for src, name, dst in relations]
    edges = {
        (src, name, dst): (
            torch.from_numpy(data[f"src_{r}"].astype(np.int64)),
            torch.from_numpy(data[f"dst_{r}"].astype(np.int64)),
        )
        for r, ((src, _, dst), name) in enumerate(zip(relations, names, strict=True))
    }
    graph = dgl.heterograph(edges, num_nodes_dict=counts)
    graph.create_formats_()
    feat = torch.from_numpy(data["feat"].astype(np.float32))
    label = torch.from_numpy(data["label"].astype(np.int64))
    split = {
        k: torch.from_numpy(data[f"{k}_idx"].astype(np.int64)) for k in ("train", "val", "test")
    }
    num_classes = int(data["num_classes"]) if "num_classes" in data else int(label.max()) + 1

    # ------------------------------------------------------------- model
    gain = nn.init.calculate_gain("relu")

    class RelGraphConvLayer(nn.Module):
        """DGL's rgcn-hetero layer, with relation weights (module docstring)."""

        def __init__(self, in_dim: int, out_dim: int, activation, dropout: float) -> None:
            super().__init__()
            self.conv = dglnn.HeteroGraphConv(
                {
                    name: dglnn.GraphConv(in_dim, out_dim, norm="right", weight=False, bias=False)
                    for name in names
                },
                aggregate="sum",
            )
            self.basis = dglnn.WeightBasis(
                (in_dim, out_dim), min(s["num_bases"], len(names)), len(names)
            )
            if init == "dgl":
                self.loop_weight = nn.Parameter(torch.empty(in_dim, out_dim))
                nn.init.xavier_uniform_(self.loop_weight, gain=gain)
                self.h_bias = nn.Parameter(torch.zeros(out_dim))
            else:  # gnnrun's self loop is an nn.Linear: its weight [out, in] and bias
                linear = nn.Linear(in_dim, out_dim)
                self.loop_weight = nn.Parameter(linear.weight.detach().t().contiguous())
                self.h_bias = nn.Parameter(linear.bias.detach().clone())
            self.activation, self.dropout = activation, nn.Dropout(dropout)

        def forward(self, block, inputs: dict) -> dict:
            weights = {name: {"weight": w} for name, w in zip(names, self.basis(), strict=True)}
            hs = self.conv(block, inputs, mod_kwargs=weights)
            out = {}
            for ntype in block.dsttypes:
                h_dst = inputs[ntype][: block.num_dst_nodes(ntype)]
                h = h_dst @ self.loop_weight + self.h_bias
                if ntype in hs:
                    h = hs[ntype] + h
                if self.activation is not None:
                    h = self.activation(h)
                out[ntype] = self.dropout(h)
            return out

    class EntityClassify(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            hidden, layers = s["hidden"], s["layers"]
            self.project = nn.Linear(feat.shape[1], hidden) if feat.shape[1] else None
            self.embeds = nn.ModuleDict(
                {
                    t: nn.Embedding(counts[t], hidden, sparse=True)
                    for t in node_types
                    if t != target or self.project is None
                }
            )
            for embed in self.embeds.values():
                if init == "dgl":
                    nn.init.xavier_uniform_(embed.weight)
                else:
                    nn.init.normal_(embed.weight, std=hidden**-0.5)
            dims = [hidden] * layers + [num_classes]
            self.layers = nn.ModuleList(
                RelGraphConvLayer(
                    dims[i],
                    dims[i + 1],
                    F.relu if i < layers - 1 else None,
                    s["dropout"] if i < layers - 1 else 0.0,
                )
                for i in range(layers)
            )

        def forward(self, input_nodes: dict, blocks: list) -> torch.Tensor:
            h = {
                t: self.embeds[t](ids) if t in self.embeds else self.project(feat[ids])
                for t, ids in input_nodes.items()
            }
            for layer, block in zip(self.layers, blocks, strict=True):
                h = layer(block, h)
            return h[target]

    model = EntityClassify()
    sparse = [e.weight for e in model.embeds.values()]
    dense = [p for p in model.parameters() if all(p is not q for q in sparse)]
    adam = torch.optim.Adam(dense, lr=s["lr"], weight_decay=s.get("weight_decay", 0.0))
    sparse_adam = torch.optim.SparseAdam(sparse, lr=s["lr"]) if sparse else None

    # ------------------------------------------------------------- training
    sampler = dgl.dataloading.NeighborSampler(
        [dict.fromkeys(names, int(f)) for f in reversed(s["fanouts"])]
    )
    batch_size = s["batch_size"]
    train = split["train"]
    steps = math.ceil(train.numel() / batch_size)
    order_rng = torch.Generator().manual_seed(s["seed"])

    epochs = []
    for _ in range(s["epochs"]):
        model.train()
        order = train[torch.randperm(train.numel(), generator=order_rng)]
        losses = []
        start = time.perf_counter()
        for step in range(steps):
            seeds = order[step * batch_size : (step + 1) * batch_size]
            input_nodes, output_nodes, blocks = sampler.sample_blocks(graph, {target: seeds})
            logits = model(input_nodes, blocks)
            loss = F.cross_entropy(logits, label[output_nodes[target]])
            adam.zero_grad(set_to_none=False)
            if sparse_adam is not None:
                sparse_adam.zero_grad(set_to_none=True)
            loss.backward()
            adam.step()
            if sparse_adam is not None:
                sparse_adam.step()
            losses.append(loss.item())
        epochs.append({"s": time.perf_counter() - start, "loss": statistics.mean(losses)})

    # ------------------------------------------------------------- evaluation
    @torch.no_grad()
    def accuracy(ids: torch.Tensor) -> float:
        correct = 0
        for lo in range(0, ids.numel(), batch_size):
            input_nodes, output_nodes, blocks = sampler.sample_blocks(
                graph, {target: ids[lo : lo + batch_size]}
            )
            predicted = model(input_nodes, blocks).argmax(1)
            correct += int((predicted == label[output_nodes[target]]).sum())
        return correct / max(1, ids.numel())

    model.eval()
    start = time.perf_counter()
    val_acc, test_acc = accuracy(split["val"]), accuracy(split["test"])
    eval_s = time.perf_counter() - start

    epoch_s = [e["s"] for e in epochs]
    print_result(
        epoch_s=epoch_s,
        epoch_s_median=statistics.median(epoch_s) if epoch_s else None,
        steps_per_epoch=steps,
        loss=[e["loss"] for e in epochs],
        val_acc=val_acc,
        test_acc=test_acc,
        eval_s=eval_s,
        train_s_total=sum(epoch_s),
        num_nodes=graph.num_nodes(),
        num_edges=graph.num_edges(),
        num_relations=len(names),
        num_bases=min(s["num_bases"], len(names)),
        num_classes=num_classes,
        init=init,
        dgl_fanouts=[int(f) for f in reversed(s["fanouts"])],
    )


if __name__ == "__main__":
    main()
