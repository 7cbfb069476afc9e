"""Vertex-cut parts from an edge assignment: each part's edges, clones and the clone table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import edges_from_csr, unique_ids
from gnnrun.ops.rows import take_rows
from gnnrun.partition.edge_cut import imbalance


class CloneTable:
    """Which parts hold a clone of each vertex, and which clone is the root.

    Built from the (vertex, part) pairs of all clones. The root of a split
    vertex is its clone in part `clones[v][v % num_clones(v)]` (parts in
    increasing order): deterministic, and it spreads the roots, and with them
    the reduction work, evenly over the parts.
    """

    def __init__(self, clone_vertex: np.ndarray, clone_part: np.ndarray, num_nodes: int) -> None:
        self.order = np.lexsort((clone_part, clone_vertex))  # clones sorted by (vertex, part)
        self.vertex = clone_vertex[self.order]
        self.part = clone_part[self.order]
        self.count = np.bincount(self.vertex, minlength=num_nodes)
        self.first = np.concatenate([[0], np.cumsum(self.count)[:-1]])
        self.root_slot = self.first + np.arange(num_nodes) % np.maximum(self.count, 1)
        self.root_part = self.part[self.root_slot].astype(np.int32)

    @property
    def replication_factor(self) -> float:
        return self.vertex.size / max(self.count.size, 1)


class VertexCutBuilder:
    """Builds the parts of an edge assignment `edge_part[e]` over the CSR's edges."""

    kind = "vertex_cut"

    def __init__(self, dataset: GraphDataset, edge_part: np.ndarray, num_parts: int) -> None:
        self.dataset, self.num_parts = dataset, num_parts
        n = dataset.num_nodes
        self.src, self.dst = edges_from_csr(dataset.indptr, dataset.indices)
        self.edge_order = np.argsort(edge_part, kind="stable")  # within a part: CSR order
        self.edge_bounds = np.concatenate(
            [[0], np.cumsum(np.bincount(edge_part, minlength=num_parts))]
        )

        # A vertex lives where its edges are; one with no edge at all lives in part v % P.
        members = []
        touched = np.zeros(n, dtype=bool)
        for part in range(num_parts):
            chosen = self._edges_of(part)
            members.append(unique_ids(np.concatenate([self.src[chosen], self.dst[chosen]]), n))
            touched[members[-1]] = True
        lonely = np.flatnonzero(~touched)
        self.members = [
            np.sort(np.concatenate([m, lonely[lonely % num_parts == p]]))
            for p, m in enumerate(members)
        ]
        clone_vertex = np.concatenate(self.members)
        clone_part = np.concatenate(
            [np.full(m.size, p, dtype=np.int64) for p, m in enumerate(self.members)]
        )
        clone_local = np.concatenate([np.arange(m.size, dtype=np.int64) for m in self.members])
        self.table = CloneTable(clone_vertex, clone_part, n)
        self.clone_local = clone_local[self.table.order]
        self.node_owner = self.table.root_part
        self.node_local = self.clone_local[self.table.root_slot]
        self.links = _clone_links(self.table, self.clone_local, num_parts)

    def _edges_of(self, part: int) -> np.ndarray:
        return self.edge_order[self.edge_bounds[part] : self.edge_bounds[part + 1]]

    def parts(self) -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, Any]]]:
        """Yield (part, arrays, figures) for each part."""
        dataset, table = self.dataset, self.table
        to_local = np.full(dataset.num_nodes, -1, dtype=np.int64)
        for part in range(self.num_parts):
            nodes = self.members[part]
            to_local[nodes] = np.arange(nodes.size)
            chosen = self._edges_of(part)
            indptr = np.zeros(nodes.size + 1, dtype=np.int64)
            np.cumsum(np.bincount(to_local[self.dst[chosen]], minlength=nodes.size), out=indptr[1:])
            root_part = table.root_part[nodes]
            arrays = {
                "nodes": nodes.astype(np.int64),
                "indptr": indptr,
                "indices": to_local[self.src[chosen]].astype(dataset.indices.dtype),
                "root_part": root_part,
                "clone_links": self.links[part],
                "feat": take_rows(dataset.feat, nodes),
                "label": np.asarray(dataset.label[nodes]),
            }
            for split in ("train_idx", "val_idx", "test_idx"):
                ids = np.asarray(getattr(dataset, split))
                arrays[split] = to_local[ids[table.root_part[ids] == part]]
            figures = {
                "vertices": int(nodes.size),
                "split_vertices": int(np.count_nonzero(table.count[nodes] > 1)),
                "roots": int(np.count_nonzero(root_part == part)),
                "edges": int(chosen.size),
                "train": int(arrays["train_idx"].size),
                "val": int(arrays["val_idx"].size),
                "test": int(arrays["test_idx"].size),
            }
            yield part, arrays, figures

    def summary(self, figures: list[dict[str, Any]]) -> dict[str, Any]:
        split = int(np.count_nonzero(self.table.count > 1))
        return {
            "replication_factor": self.table.replication_factor,
            "split_vertices": split,
            "split_fraction": split / max(self.dataset.num_nodes, 1),
            "imbalance": imbalance(figures, ("edges", "vertices", "train")),
        }


def _clone_links(table: CloneTable, local_of_clone: np.ndarray, num_parts: int) -> list[np.ndarray]:
    """Per part, rows (my local id, other part, other local id) between each root and its leaves."""
    vertex, part = table.vertex, table.part
    split = table.count[vertex] > 1
    root_part = table.root_part[vertex].astype(np.int64)
    is_leaf = split & (part != root_part)
    root_slot = table.root_slot[vertex]  # for every clone, the slot of its vertex's root
    leaf_v, leaf_p, leaf_l = vertex[is_leaf], part[is_leaf], local_of_clone[is_leaf]
    root_p, root_l = root_part[is_leaf], local_of_clone[root_slot[is_leaf]]
    # A leaf's row points at its root; the root gets one row per leaf.
    holder = np.concatenate([leaf_p, root_p])
    mine = np.concatenate([leaf_l, root_l])
    other_part = np.concatenate([root_p, leaf_p])
    other_local = np.concatenate([root_l, leaf_l])
    vid = np.concatenate([leaf_v, leaf_v])
    order = np.lexsort((vid, other_part, holder))
    rows = np.stack([mine[order], other_part[order], other_local[order]], axis=1).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(holder[order], minlength=num_parts))])
    return [rows[bounds[p] : bounds[p + 1]] for p in range(num_parts)]
