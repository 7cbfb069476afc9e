"""Edge-cut parts from a vertex assignment: solid vertices, their in-edges, and halos."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from gnnrun.data.dataset import GraphDataset, typed_feat_name
from gnnrun.data.graph import unique_ids
from gnnrun.ops.rows import take_rows


def gather_rows(
    indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The sub-CSR of `rows` (in that order): its indptr and the gathered indices."""
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    sub_indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=sub_indptr[1:])
    positions = np.repeat(starts - sub_indptr[:-1], lengths) + np.arange(
        sub_indptr[-1], dtype=np.int64
    )
    return sub_indptr, np.asarray(indices[positions])


def local_ids(node_part: np.ndarray, num_parts: int) -> np.ndarray:
    """VID_p of every vertex in its own part: its rank among the part's vertices by original id."""
    order = np.argsort(node_part, kind="stable")
    counts = np.bincount(node_part, minlength=num_parts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    local = np.empty(node_part.size, dtype=np.int64)
    local[order] = np.arange(node_part.size, dtype=np.int64) - np.repeat(starts, counts)
    return local


class EdgeCutBuilder:
    """Builds the parts of a vertex assignment `node_part[v]` (DESIGN.md, Partitions)."""

    kind = "edge_cut"

    def __init__(
        self,
        dataset: GraphDataset,
        node_part: np.ndarray,
        num_parts: int,
        trainer: np.ndarray | None = None,
    ) -> None:
        """`trainer`: of parts shared by several trainers, each vertex's trainer."""
        self.dataset, self.num_parts, self.trainer = dataset, num_parts, trainer
        self.node_owner = node_part.astype(np.int32)
        self.node_local = local_ids(node_part, num_parts)

    def parts(self) -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, Any]]]:
        """Yield (part, arrays, figures) for each part."""
        dataset, node_part, node_local = self.dataset, self.node_owner, self.node_local
        order = np.argsort(node_part, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(node_part, minlength=self.num_parts))])
        for part in range(self.num_parts):
            solid = order[bounds[part] : bounds[part + 1]]  # increasing original ids (stable sort)
            indptr, neighbours = gather_rows(dataset.indptr, dataset.indices, solid)
            neighbours = neighbours.astype(np.int64)
            remote = node_part[neighbours] != part
            halo = unique_ids(neighbours[remote], dataset.num_nodes)
            to_local = node_local.copy()  # right for solid vertices; halos get ids after them
            to_local[halo] = solid.size + np.arange(halo.size)
            local_neighbours = to_local[neighbours]
            arrays = {
                "nodes": np.concatenate([solid, halo]).astype(np.int64),
                "indptr": indptr,
                "indices": local_neighbours.astype(dataset.indices.dtype),
                "halo_owner": node_part[halo].astype(np.int32),
                "feat": take_rows(dataset.feat, solid),
                "label": np.asarray(dataset.label[solid]),
            }
            for split in ("train_idx", "val_idx", "test_idx"):
                ids = np.asarray(getattr(dataset, split))
                arrays[split] = np.sort(node_local[ids[node_part[ids] == part]])
            if dataset.hetero is not None:
                arrays |= self._typed_arrays(solid)
            if self.trainer is not None:
                arrays["trainer"] = self.trainer[solid].astype(np.int32)
            figures = {
                "solid": int(solid.size),
                "halo": int(halo.size),
                "edges": int(neighbours.size),
                "cut_edges": int(remote.sum()),
                "train": int(arrays["train_idx"].size),
                "val": int(arrays["val_idx"].size),
                "test": int(arrays["test_idx"].size),
            }
            yield part, arrays, figures

    def _typed_arrays(self, solid: np.ndarray) -> dict[str, np.ndarray]:
        """A heterogeneous part's relation per edge, and the features of each featured type
        for its solid vertices (which, in global-id order, come type after type)."""
        dataset = self.dataset
        schema = dataset.hetero
        assert schema is not None and dataset.edge_type is not None
        arrays = {"edge_type": gather_rows(dataset.indptr, dataset.edge_type, solid)[1]}
        types, typed_ids = schema.to_typed(solid)
        for t, feat in enumerate(dataset.typed_feat or []):
            if feat is not None:
                arrays[typed_feat_name(t)] = take_rows(feat, typed_ids[types == t])
        return arrays

    def summary(self, figures: list[dict[str, Any]]) -> dict[str, Any]:
        cut = sum(f["cut_edges"] for f in figures)
        return {
            "cut_edges": cut,
            "cut_fraction": cut / max(self.dataset.num_edges, 1),
            "halo_fraction": sum(f["halo"] for f in figures) / max(self.dataset.num_nodes, 1),
            "imbalance": imbalance(figures, ("solid", "edges", "train")),
        }


def imbalance(figures: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, float]:
    """max / mean per figure: 1.0 is perfect balance."""
    out = {}
    for key in keys:
        values = np.array([f[key] for f in figures], dtype=np.float64)
        out[key] = float(values.max() / values.mean()) if values.mean() > 0 else 1.0
    return out
