"""METIS edge cut through pymetis, balancing what DistDGL balances, and its two-level variant."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges, edges_from_csr
from gnnrun.errors import did_you_mean
from gnnrun.partition.balance import rebalance
from gnnrun.partition.registry import Assignment, PartitionerConfig, register_partitioner


@dataclass
class MetisPartitionerConfig(PartitionerConfig):
    name: str = "metis"
    # Balance train/val/test vertex counts and edges per part as extra METIS
    # constraints, as DistDGL does; off: balance vertices only.
    balance_splits: bool = True
    balance_edges: bool = True


TWO_LEVEL_LAYOUTS = ("machines", "trainers")


@dataclass
class TwoLevelPartitionerConfig(MetisPartitionerConfig):
    name: str = "two_level"
    num_machines: int = 1  # first level; num_parts / num_machines trainers per machine
    # "machines": one part per machine, its training (and evaluation) vertices assigned to
    # its trainers by the second level (DistDGLv2); "trainers": one part per trainer.
    layout: str = "machines"

    def validate(self) -> None:
        super().validate()
        check(self.num_machines >= 1, "partitioner.num_machines must be at least 1")
        check(
            self.layout in TWO_LEVEL_LAYOUTS,
            f"partitioner.layout={self.layout!r}{did_you_mean(self.layout, TWO_LEVEL_LAYOUTS)}: "
            f"give one of {', '.join(TWO_LEVEL_LAYOUTS)}",
        )
        check(
            self.num_parts % self.num_machines == 0,
            f"partitioner.num_parts ({self.num_parts}) must be a multiple of "
            f"partitioner.num_machines ({self.num_machines})",
        )


def vertex_weights(dataset: GraphDataset, cfg: MetisPartitionerConfig) -> np.ndarray:
    """One column per METIS balance constraint: vertices (of each type, on a heterogeneous
    graph), in-degree, train/val/test membership.

    With several columns METIS balances each of them across the parts (DistDGL's
    scheme), so every trainer gets about the same number of training vertices and
    edges, not just vertices; DistDGLv2 adds a column per vertex type, so that every
    part holds its share of each type (and of its features), which METIS meets only
    roughly: `gnnrun.partition.balance` evens the types out afterwards. Empty columns
    are dropped (METIS rejects them).
    """
    n = dataset.num_nodes
    if dataset.hetero is None:
        columns = [np.ones(n, dtype=np.int64)]
    else:
        types = dataset.hetero.type_of(np.arange(n))
        columns = [(types == t).astype(np.int64) for t in range(dataset.hetero.num_types)]
    if cfg.balance_edges:
        columns.append(np.diff(dataset.indptr).astype(np.int64))
    if cfg.balance_splits:
        for split in (dataset.train_idx, dataset.val_idx, dataset.test_idx):
            column = np.zeros(n, dtype=np.int64)
            column[np.asarray(split)] = 1
            columns.append(column)
    columns = [c for c in columns if c.sum() > 0]
    return np.stack(columns, axis=1)


def metis_adjacency(dataset: GraphDataset) -> tuple[np.ndarray, np.ndarray]:
    """METIS needs a symmetric graph without self-loops, as int64 for pymetis' zero-copy path."""
    if dataset.directed:
        src, dst = edges_from_csr(dataset.indptr, dataset.indices)
        indptr, indices = csr_from_edges(src, dst, dataset.num_nodes, symmetrize=True)
    else:
        indptr, indices = dataset.indptr, dataset.indices
    return np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(
        indices, dtype=np.int64
    )


def run_metis(
    indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, num_parts: int, seed: int
) -> tuple[np.ndarray, int]:
    import pymetis

    if num_parts == 1:
        return np.zeros(indptr.size - 1, dtype=np.int32), 0
    options = pymetis.Options(seed=seed)
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(indptr, indices),
        vweights=np.ascontiguousarray(weights, dtype=np.int64).ravel(),
        options=options,
    )
    return np.frombuffer(result.vertex_part, dtype=np.int64).astype(np.int32), int(result.edge_cuts)


def balance_classes(dataset: GraphDataset, cfg: MetisPartitionerConfig) -> np.ndarray | None:
    """What `rebalance` spreads evenly on a heterogeneous graph: each vertex's type, the
    target type's train, val and test vertices apart (with `balance_splits`); None for a
    homogeneous graph, whose constraints METIS meets by itself."""
    schema = dataset.hetero
    if schema is None:
        return None
    classes = schema.type_of(np.arange(dataset.num_nodes))
    if cfg.balance_splits:
        for k, split in enumerate((dataset.train_idx, dataset.val_idx, dataset.test_idx)):
            classes[np.asarray(split)] = schema.num_types + k
    return classes


def _balanced(
    parts: np.ndarray,
    classes: np.ndarray | None,
    indptr: np.ndarray,
    indices: np.ndarray,
    num_parts: int,
    info: dict,
) -> np.ndarray:
    """`parts` rebalanced per class where there are classes; in `info`, the vertices moved
    and how uneven METIS left the worst class (its busiest part's share over the even one)."""
    if classes is None or num_parts == 1:
        return parts
    balanced, moved = rebalance(parts, classes, indptr, indices, num_parts)
    info["rebalanced_vertices"] = info.get("rebalanced_vertices", 0) + moved
    info["metis_class_imbalance"] = max(
        info.get("metis_class_imbalance", 1.0), worst_class_imbalance(parts, classes, num_parts)
    )
    return balanced.astype(np.int32)


def worst_class_imbalance(parts: np.ndarray, classes: np.ndarray, num_parts: int) -> float:
    """The largest, over classes, of the busiest part's count over the even share."""
    worst = 1.0
    for cls in np.unique(classes):
        counts = np.bincount(parts[classes == cls], minlength=num_parts)
        worst = max(worst, float(counts.max() / (counts.sum() / num_parts)))
    return worst


@register_partitioner("metis", "edge_cut", MetisPartitionerConfig)
def metis_partition(dataset: GraphDataset, cfg: MetisPartitionerConfig) -> Assignment:
    indptr, indices = metis_adjacency(dataset)
    weights = vertex_weights(dataset, cfg)
    parts, cut = run_metis(indptr, indices, weights, cfg.num_parts, cfg.seed)
    info = {"metis_edge_cut": cut, "constraints": int(weights.shape[1])}
    classes = balance_classes(dataset, cfg)
    return Assignment(_balanced(parts, classes, indptr, indices, cfg.num_parts, info), info)


@register_partitioner("two_level", "edge_cut", TwoLevelPartitionerConfig)
def two_level_partition(dataset: GraphDataset, cfg: TwoLevelPartitionerConfig) -> Assignment:
    """METIS over machines, then METIS over the trainers of each machine (DistDGLv2).

    Layout "machines": one part per machine, shared by its T trainers (each loads it
    whole, so every vertex of the machine is local to each of them); the second level
    only says which trainer takes each training, validation and test vertex. Layout
    "trainers": part `m * T + t` is trainer t of machine m. Both levels balance the
    same constraints, so each trainer gets its share of the training vertices.
    """
    indptr, indices = metis_adjacency(dataset)
    weights = vertex_weights(dataset, cfg)
    classes = balance_classes(dataset, cfg)
    machine_of_part = [p // (cfg.num_parts // cfg.num_machines) for p in range(cfg.num_parts)]
    info = {"num_machines": cfg.num_machines, "machine_of_part": machine_of_part}
    machines, _ = run_metis(indptr, indices, weights, cfg.num_machines, cfg.seed)
    machines = _balanced(machines, classes, indptr, indices, cfg.num_machines, info)
    trainers = cfg.num_parts // cfg.num_machines
    parts = np.empty(dataset.num_nodes, dtype=np.int32)
    for machine in range(cfg.num_machines):
        members = np.flatnonzero(machines == machine)
        sub_indptr, sub_indices = _induced_subgraph(indptr, indices, members, dataset.num_nodes)
        local, _ = run_metis(sub_indptr, sub_indices, weights[members], trainers, cfg.seed)
        mine = None if classes is None else classes[members]
        local = _balanced(local, mine, sub_indptr, sub_indices, trainers, info)
        parts[members] = machine * trainers + local
    if cfg.layout == "machines":
        return Assignment(machines, info, trainers_per_part=trainers, trainer=parts % trainers)
    return Assignment(parts, info)


def _induced_subgraph(
    indptr: np.ndarray, indices: np.ndarray, members: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    from gnnrun.partition.edge_cut import gather_rows

    relabel = np.full(n, -1, dtype=np.int64)
    relabel[members] = np.arange(members.size)
    sub_indptr, neighbours = gather_rows(indptr, indices, members)
    keep = relabel[neighbours] >= 0
    counts = (
        np.add.reduceat(keep, sub_indptr[:-1])
        if neighbours.size
        else np.zeros(members.size, np.int64)
    )
    counts[np.diff(sub_indptr) == 0] = 0  # reduceat repeats the next value for empty rows
    new_indptr = np.zeros(members.size + 1, dtype=np.int64)
    np.cumsum(counts, out=new_indptr[1:])
    return new_indptr, relabel[neighbours[keep]]
