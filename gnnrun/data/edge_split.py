"""Held-out edges for link prediction: a seeded train / validation / test split of a graph's
edges, prepared once as a dataset of its own.

An undirected graph (both directions stored) is split by vertex pair: {u, v}
goes to one split whole, and a held-out pair leaves the message-passing graph
in both directions, so that no model aggregates over an edge it is asked to
predict. A directed graph is split edge by edge. The same graph, fractions and
seed give the same split.

Each validation and test edge (u, v) is ranked against fixed negatives (u, w),
w uniform over the vertices (OGB's ogbl-citation2 convention; a w may happen
to be a true neighbour): `held_out_negatives` draws them counter-based from
(split seed, split, edge, j) (gnnrun.ops.negatives), so every run, rank and
evaluation ranks an edge against the same vertices without storing them.

`prepare_link_dataset` writes the split beside the prepared dataset (`<dataset>-link`):
the message-passing graph as its CSR, the three edge sets as `link_train`,
`link_val`, `link_test` ([2, E] pairs; one direction per undirected pair), the
features and labels unchanged. Partitions of it partition the message-passing
graph. It is made again when the dataset or the split's settings change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges, edges_from_csr
from gnnrun.errors import GnnrunError
from gnnrun.io import writer_lock
from gnnrun.ops.negatives import sample_negatives

# Keys of the held-out negatives' draws, per split (the split seed is mixed in).
_NEGATIVE_STREAMS = {"val": 0x5A11D, "test": 0x7E57}


@dataclass
class EdgeSplit:
    indptr: np.ndarray  # the message-passing graph: the training edges only (in-CSR)
    indices: np.ndarray
    train: np.ndarray  # [2, E] (source, destination); one direction per undirected pair
    val: np.ndarray  # [2, E]
    test: np.ndarray  # [2, E]


def split_edges(
    indptr: np.ndarray,
    indices: np.ndarray,
    directed: bool,
    val_fraction: float,
    test_fraction: float,
    seed: int,
) -> EdgeSplit:
    """Split the in-CSR graph's edges (pairs, when undirected) as the module docstring says."""
    if min(val_fraction, test_fraction) < 0 or val_fraction + test_fraction >= 1:
        raise ValueError(
            f"held-out fractions {val_fraction} + {test_fraction} must be >= 0 and leave "
            "training edges"
        )
    n = indptr.shape[0] - 1
    src, dst = edges_from_csr(indptr, indices)
    if not directed:  # each pair once, as (smaller id, larger id)
        keep = src < dst
        src, dst = src[keep], dst[keep]
    rng = np.random.default_rng(seed)
    order = rng.permutation(src.size)
    num_val = int(round(val_fraction * src.size))
    num_test = int(round(test_fraction * src.size))
    parts = np.split(order, [num_val, num_val + num_test])
    val, test, train = (np.stack([src[np.sort(p)], dst[np.sort(p)]]) for p in parts)
    graph_indptr, graph_indices = csr_from_edges(train[0], train[1], n, symmetrize=not directed)
    return EdgeSplit(graph_indptr, graph_indices, train, val, test)


def held_out_negatives(
    edges: np.ndarray | torch.Tensor,
    edge_ids: torch.Tensor,
    num: int,
    num_nodes: int,
    split_seed: int,
    split: str,
) -> torch.Tensor:
    """[len(edge_ids), num] negative destinations of the `split` edges `edge_ids` (their
    positions in the split), whose pairs are `edges` [2, len(edge_ids)]."""
    key = split_seed * 0x100000001B3 + _NEGATIVE_STREAMS[split]
    pairs = torch.as_tensor(np.asarray(edges))
    negatives = sample_negatives("per_source", pairs, edge_ids, num, num_nodes, key)
    return negatives[1].view(-1, num)


def split_settings(task) -> dict[str, Any]:
    """What a link dataset records of the task's settings: the ones that decide the split."""
    return {k: getattr(task, k) for k in ("val_fraction", "test_fraction", "split_seed")}


def prepare_link_dataset(dataset: GraphDataset, task) -> GraphDataset:
    """Open `dataset`'s link-prediction copy at `task.prepared_dir`, writing it first when
    absent or made from another dataset or split (concurrent runs wait for each other)."""
    from gnnrun.progress import stage

    if dataset.hetero is not None:
        raise GnnrunError(
            f"task=link does not run on heterogeneous graphs yet ({dataset.name}): use a "
            "homogeneous dataset"
        )
    path = Path(task.prepared_dir)
    wanted = {"dataset": dataset.checksum, **split_settings(task)}
    with writer_lock(path):
        if (path / "meta.json").is_file():
            try:
                existing = GraphDataset.load(path)
            except GnnrunError:
                existing = None
            if existing is not None and existing.info.get("link_split") == wanted:
                return existing
        with stage(f"holding out edges of {dataset.name}"):
            split = split_edges(
                np.asarray(dataset.indptr),
                np.asarray(dataset.indices),
                dataset.directed,
                task.val_fraction,
                task.test_fraction,
                task.split_seed,
            )
            linked = dataclasses.replace(
                dataset,
                name=f"{dataset.name}-link",
                indptr=split.indptr,
                indices=split.indices,
                info={**dataset.info, "link_split": wanted},
                checksum=None,
                path=None,
                link_train=split.train,
                link_val=split.val,
                link_test=split.test,
            )
        with stage(f"writing {path}"):
            linked.save(path)
        return GraphDataset.load(path)


def load_link_dataset(dataset: GraphDataset, task) -> GraphDataset:
    """The link-prediction copy of `dataset` that ranks train on, refused when it was
    made from another dataset or split (`gnnrun train` makes it before ranks start)."""
    path = Path(task.prepared_dir)
    linked = GraphDataset.load(path)
    wanted = {"dataset": dataset.checksum, **split_settings(task)}
    if linked.info.get("link_split") != wanted or linked.link_train is None:
        raise GnnrunError(
            f"{path} holds another split of {dataset.name} than task=link now asks for; "
            f"run `gnnrun data prepare dataset={dataset.name} task=link` (or gnnrun train) again"
        )
    return linked
