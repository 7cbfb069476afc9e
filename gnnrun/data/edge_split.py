"""Held-out edges for link prediction: a seeded train / validation / test split of a graph's
edges, prepared once as a dataset of its own.

An undirected graph (both directions stored) is split by vertex pair: {u, v}
goes to one split whole, and a held-out pair leaves the message-passing graph
in both directions, so that no model aggregates over an edge it is asked to
predict. A directed graph is split edge by edge. On a heterogeneous graph
(gnnrun.data.hetero) the edges of one relation, `task.relation`, are the
targets, split edge by edge; a held-out edge leaves the graph with its twin in
the reverse relation (`rev_<name>`), and every other relation stays whole.
The same graph, fractions and seed give the same split.

Each validation and test edge (u, v) is ranked against fixed negatives (u, w),
w uniform over the vertices (of the relation's destination type; OGB's
ogbl-citation2 convention; a w may happen to be a true neighbour): `held_out_negatives` draws them counter-based from
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
from gnnrun.data.hetero import reverse
from gnnrun.errors import GnnrunError, did_you_mean
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
    edge_type: np.ndarray | None = None  # a heterogeneous graph's: each kept edge's relation


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


def split_relation(
    dataset: GraphDataset, relation: int, val_fraction: float, test_fraction: float, seed: int
) -> EdgeSplit:
    """Split a heterogeneous graph's edges of `relation` as the module docstring says."""
    schema = dataset.hetero
    assert schema is not None
    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices, dtype=np.int64)
    edge_type = np.asarray(dataset.edge_type, dtype=np.int64)
    src, dst = edges_from_csr(indptr, indices)
    mine = np.flatnonzero(edge_type == relation)
    order = np.random.default_rng(seed).permutation(mine.size)
    num_val = int(round(val_fraction * mine.size))
    num_test = int(round(test_fraction * mine.size))
    val, test, train = (
        np.stack([src[mine[np.sort(p)]], dst[mine[np.sort(p)]]])
        for p in np.split(order, [num_val, num_val + num_test])
    )
    held = np.concatenate([val, test], axis=1)
    held_keys = np.sort((held[0] << 32) | held[1])
    turned = reverse(schema.relations[relation])
    twin = schema.relations.index(turned) if turned in schema.relations else -1
    forward = (edge_type == relation) & np.isin((src << 32) | dst, held_keys)
    backward = (edge_type == twin) & np.isin((dst << 32) | src, held_keys)
    keep = ~(forward | backward)
    kept = np.bincount(dst[keep], minlength=indptr.shape[0] - 1)
    graph_indptr = np.concatenate([[0], np.cumsum(kept)]).astype(indptr.dtype)
    edge_types = np.asarray(dataset.edge_type)[keep]
    return EdgeSplit(graph_indptr, np.asarray(dataset.indices)[keep], train, val, test, edge_types)


def negative_range(dataset: GraphDataset, relation: int | None, end: str) -> tuple[int, int]:
    """(first id, count) of the vertices a negative's `end` ("source" or "destination")
    is drawn from: the relation's type of that end on a heterogeneous graph, else all."""
    if relation is None or dataset.hetero is None:
        return 0, dataset.num_nodes
    schema = dataset.hetero
    source, _, destination = schema.relations[relation]
    t = schema.type_index(destination if end == "destination" else source)
    return int(schema.offsets[t]), int(schema.type_counts[t])


def held_out_negatives(
    edges: np.ndarray | torch.Tensor,
    edge_ids: torch.Tensor,
    num: int,
    destinations: tuple[int, int],
    split_seed: int,
    split: str,
) -> torch.Tensor:
    """[len(edge_ids), num] negative destinations, in the vertex range `destinations`, of
    the `split` edges `edge_ids` (their positions in the split), whose pairs are `edges`
    [2, len(edge_ids)]."""
    return held_out_negative_pairs(
        edges, edge_ids, num, destinations, split_seed, split, "per_source"
    )[1]


def held_out_negative_pairs(
    edges: np.ndarray | torch.Tensor,
    edge_ids: torch.Tensor,
    num: int,
    destinations: tuple[int, int],
    split_seed: int,
    split: str,
    sampler: str,
    sources: tuple[int, int] | None = None,
) -> torch.Tensor:
    """[2, len(edge_ids), num] negative pairs of the `split` edges `edge_ids`: `per_source`
    (each edge's own source, as `held_out_negatives`) or `uniform` (both ends uniform, the
    source in `sources`: GAE's random pairs)."""
    key = split_seed * 0x100000001B3 + _NEGATIVE_STREAMS[split]
    pairs = torch.as_tensor(np.asarray(edges))
    negatives = sample_negatives(sampler, pairs, edge_ids, num, key, destinations, sources)
    return negatives.view(2, -1, num)


def split_settings(task) -> dict[str, Any]:
    """What a link dataset records of the task's settings: the ones that decide the split."""
    keys = ("val_fraction", "test_fraction", "split_seed", "relation")
    return {k: getattr(task, k) for k in keys}


def target_relation(dataset: GraphDataset, name: str | None) -> int | None:
    """The index of relation `name`, the link task's targets on a heterogeneous graph
    (None on a homogeneous one); refused when missing, unknown or given for nothing."""
    schema = dataset.hetero
    if schema is None:
        if name is not None:
            raise GnnrunError(
                f"task.relation={name} is set but {dataset.name} is homogeneous (one relation): "
                "leave task.relation out"
            )
        return None
    # A relation by its name, or canonically as source__name__destination (as in a custom
    # .npz's edge_index__<src>__<relation>__<dst>), which two relations may share a name.
    short = schema.relation_names()
    canonical = ["__".join(relation) for relation in schema.relations]
    names = [n if short.count(n) == 1 else canonical[i] for i, n in enumerate(short)]
    if name is None:
        raise GnnrunError(
            f"{dataset.name} is heterogeneous: name the relation whose edges to predict with "
            f"task.relation= one of {', '.join(names)}"
        )
    if name in canonical:
        return canonical.index(name)
    named = [canonical[i] for i, n in enumerate(short) if n == name]
    if len(named) > 1:
        raise GnnrunError(
            f"task.relation={name} names {len(named)} relations of {dataset.name}: give one as "
            f"source__relation__destination, task.relation= one of {', '.join(named)}"
        )
    if not named:
        raise GnnrunError(
            f"task.relation={name} is not a relation of {dataset.name}"
            f"{did_you_mean(name, names)}; its relations are {', '.join(names)}"
        )
    return canonical.index(named[0])


def prepare_link_dataset(dataset: GraphDataset, task) -> GraphDataset:
    """Open `dataset`'s link-prediction copy at `task.prepared_dir`, writing it first when
    absent or made from another dataset or split (concurrent runs wait for each other)."""
    from gnnrun.progress import stage

    relation = target_relation(dataset, task.relation)
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
            if relation is None:
                split = split_edges(
                    np.asarray(dataset.indptr),
                    np.asarray(dataset.indices),
                    dataset.directed,
                    task.val_fraction,
                    task.test_fraction,
                    task.split_seed,
                )
            else:
                split = split_relation(
                    dataset, relation, task.val_fraction, task.test_fraction, task.split_seed
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
                edge_type=dataset.edge_type if relation is None else split.edge_type,
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
