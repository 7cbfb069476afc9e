"""1D row blocks of GCN's normalised adjacency matrix after a seeded random permutation (MG-GCN).

The vertices are renumbered by a seeded random permutation (`partitioner.permute`;
off: the graph's own order), and the renumbered rows are cut into P equal
blocks: block i holds positions `block_bounds(n, P)[i]` up to the next bound.
Part i stores its rows of GCN's D^-1/2 (A + I) D^-1/2, as `GCNConv` computes it
on a whole graph (gnnrun.models.gcn): an edge u -> v of the in-CSR has the value
1 / sqrt((out_u + 1)(in_v + 1)), the self loop of v 1 / sqrt((out_v + 1)(in_v + 1)).
Those rows are split by column into P tiles (tile j: the columns of block j), so
that a stage of the distributed product multiplies one tile by one broadcast block.

A random order spreads the high-degree vertices evenly over the blocks; a
graph's own order often groups them (crawl order, degree-sorted ids), which
leaves one rank with most of the non-zeros. The manifest records the non-zero
balance with and without the permutation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnrun.data.dataset import GraphDataset
from gnnrun.ops.rows import take_rows
from gnnrun.partition.registry import Assignment, PartitionerConfig, register_partitioner


@dataclass
class Block1DPartitionerConfig(PartitionerConfig):
    name: str = "block1d"
    # Renumber the vertices by a random permutation seeded by partitioner.seed before
    # cutting the rows into blocks; false keeps the graph's own order.
    permute: bool = True


@register_partitioner("block1d", "block1d", Block1DPartitionerConfig)
def block1d_partition(dataset: GraphDataset, cfg: Block1DPartitionerConfig) -> Assignment:
    """Assignment.parts: each vertex's position in the new order (its row in the blocks)."""
    n = dataset.num_nodes
    order = np.random.default_rng(cfg.seed).permutation(n) if cfg.permute else np.arange(n)
    position = inverse_permutation(order)
    balance = nonzero_balance(dataset.indptr, dataset.indices, position, cfg.num_parts)
    own = nonzero_balance(dataset.indptr, dataset.indices, np.arange(n), cfg.num_parts)
    return Assignment(position, {"nonzero_imbalance": balance, "nonzero_imbalance_own_order": own})


def inverse_permutation(order: np.ndarray) -> np.ndarray:
    inverse = np.empty(order.size, dtype=np.int64)
    inverse[order] = np.arange(order.size, dtype=np.int64)
    return inverse


def block_bounds(num_rows: int, num_parts: int) -> np.ndarray:
    """[P + 1] first row of each block: P blocks whose sizes differ by at most one."""
    sizes = np.full(num_parts, num_rows // num_parts, dtype=np.int64)
    sizes[: num_rows % num_parts] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def nonzero_balance(
    indptr: np.ndarray, indices: np.ndarray, position: np.ndarray, num_parts: int
) -> dict[str, float]:
    """max / mean of the non-zeros of A + I over the P row blocks and over the P x P tiles
    when vertex v sits at row `position[v]` (1.0: perfect balance)."""
    n = indptr.shape[0] - 1
    bounds = block_bounds(n, num_parts)
    block = np.searchsorted(bounds, position, side="right") - 1
    degree = np.diff(np.asarray(indptr)).astype(np.int64)
    rows = np.bincount(block, weights=degree + 1, minlength=num_parts)
    dst_block = np.repeat(block, degree)
    src_block = block[np.asarray(indices, dtype=np.int64)]
    tiles = np.bincount(dst_block * num_parts + src_block, minlength=num_parts * num_parts)
    tiles += np.bincount(block * (num_parts + 1), minlength=num_parts * num_parts)  # diagonal
    return {"row_blocks": _max_over_mean(rows), "tiles": _max_over_mean(tiles)}


def _max_over_mean(values: np.ndarray) -> float:
    mean = float(np.mean(values))
    return float(np.max(values)) / mean if mean > 0 else 1.0


def gcn_adjacency(
    indptr: np.ndarray, indices: np.ndarray, position: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GCN's D^-1/2 (A + I) D^-1/2 as (row, column, value) in the renumbered ids, sorted
    by (row, column); float32 values computed as GCNConv computes its scalings."""
    n = indptr.shape[0] - 1
    src = np.asarray(indices, dtype=np.int64)
    in_degree = np.diff(np.asarray(indptr)).astype(np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), in_degree)
    out_degree = np.bincount(src, minlength=n)
    norm_src = (1.0 / np.sqrt(out_degree + 1.0)).astype(np.float32)
    norm_dst = (1.0 / np.sqrt(in_degree + 1.0)).astype(np.float32)
    loops = np.arange(n, dtype=np.int64)
    rows = position[np.concatenate([dst, loops])]
    cols = position[np.concatenate([src, loops])]
    values = np.concatenate([norm_src[src] * norm_dst[dst], norm_src * norm_dst])
    order = np.argsort(rows * n + cols, kind="stable")
    return rows[order], cols[order], values[order]


def tiled_rows(
    rows: np.ndarray,
    cols: np.ndarray,
    values: np.ndarray,
    bounds: np.ndarray,
    part: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Part `part`'s rows of a (row, column)-sorted matrix as P stacked tile CSRs.

    Row `j * rows_of_part + r` of the result is local row r's entries in column
    tile j; its indices are columns within block j.
    """
    num_parts = bounds.size - 1
    lo, hi = np.searchsorted(rows, [bounds[part], bounds[part + 1]])
    r, c, v = rows[lo:hi] - bounds[part], cols[lo:hi], values[lo:hi]
    tile = np.searchsorted(bounds, c, side="right") - 1
    order = np.argsort(tile, kind="stable")  # keeps (row, column) order inside each tile
    r, c, v, tile = r[order], c[order], v[order], tile[order]
    height = int(bounds[part + 1] - bounds[part])
    indptr = np.zeros(num_parts * height + 1, dtype=np.int64)
    np.cumsum(np.bincount(tile * height + r, minlength=num_parts * height), out=indptr[1:])
    return indptr, c - bounds[tile], v.astype(np.float32)


class Block1DBuilder:
    """Builds the parts of a renumbering `position[v]` (gnnrun.partition.book, block1d)."""

    kind = "block1d"

    def __init__(self, dataset: GraphDataset, position: np.ndarray, num_parts: int) -> None:
        self.dataset, self.num_parts = dataset, num_parts
        n = dataset.num_nodes
        self.position = np.asarray(position, dtype=np.int64)
        self.order = inverse_permutation(self.position)  # original id at each position
        self.bounds = block_bounds(n, num_parts)
        self.node_owner = (np.searchsorted(self.bounds, self.position, side="right") - 1).astype(
            np.int32
        )
        self.node_local = self.position - self.bounds[self.node_owner]
        self.adjacency = gcn_adjacency(dataset.indptr, dataset.indices, self.position)
        # Â's transpose is Â itself when every edge is stored both ways (in = out degrees).
        self.transpose = None
        if dataset.directed:
            rows, cols, values = self.adjacency
            order = np.lexsort((rows, cols))
            self.transpose = (cols[order], rows[order], values[order])

    def parts(self) -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, Any]]]:
        """Yield (part, arrays, figures) for each part."""
        dataset, bounds = self.dataset, self.bounds
        for part in range(self.num_parts):
            nodes = self.order[bounds[part] : bounds[part + 1]]
            indptr, indices, values = tiled_rows(*self.adjacency, bounds, part)
            arrays = {
                "nodes": nodes.astype(np.int64),
                "tile_indptr": indptr,
                "tile_indices": indices,
                "tile_values": values,
                "feat": take_rows(dataset.feat, nodes),
                "label": np.asarray(dataset.label[nodes]),
            }
            if self.transpose is not None:
                t_indptr, t_indices, t_values = tiled_rows(*self.transpose, bounds, part)
                arrays |= {
                    "tile_t_indptr": t_indptr,
                    "tile_t_indices": t_indices,
                    "tile_t_values": t_values,
                }
            for split in ("train_idx", "val_idx", "test_idx"):
                ids = np.asarray(getattr(dataset, split))
                arrays[split] = np.sort(self.node_local[ids[self.node_owner[ids] == part]])
            height = nodes.size
            tile_nonzeros = np.diff(indptr[::height]) if height else np.zeros(self.num_parts)
            figures = {
                "rows": int(height),
                "nonzeros": int(indices.size),
                "local_nonzeros": int(tile_nonzeros[part]),
                "max_tile_nonzeros": int(tile_nonzeros.max()),
                "train": int(arrays["train_idx"].size),
                "val": int(arrays["val_idx"].size),
                "test": int(arrays["test_idx"].size),
            }
            yield part, arrays, figures

    def summary(self, figures: list[dict[str, Any]]) -> dict[str, Any]:
        return {"block_bounds": self.bounds.tolist(), "symmetric": self.transpose is None}
