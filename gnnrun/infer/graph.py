"""A rank's share of the graph for inference: its own vertices' in-edges, and chunk blocks.

Local ids follow the edge-cut part (gnnrun.partition.book): the rank's own
vertices first, then its halo (in-neighbours owned by other ranks). With one
rank the whole dataset is the part and there is no halo.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.hetero import HeteroSchema
from gnnrun.ops.block import Block
from gnnrun.partition.book import Part

SPLITS = ("train", "val", "test")


@dataclass
class OwnedGraph:
    nodes: np.ndarray  # [num_local] dataset id of every local vertex
    indptr: np.ndarray  # [num_own + 1] in-CSR of the own vertices
    indices: np.ndarray  # local ids of their in-neighbours (own or halo)
    feat: np.ndarray  # [num_own, in_dim] input features of the own vertices
    label: np.ndarray  # [num_own] (-1: unlabelled)
    splits: dict[str, np.ndarray]  # split -> local ids of own vertices in it
    halo_owner: np.ndarray  # [num_halo] the rank that owns each halo vertex
    # A heterogeneous graph's: the relation of each edge (aligned with `indices`), and the
    # vertex type of each local vertex.
    edge_type: np.ndarray | None = None
    node_type: np.ndarray | None = None

    @property
    def num_own(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_local(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def num_halo(self) -> int:
        return self.num_local - self.num_own

    @classmethod
    def from_dataset(cls, dataset: GraphDataset) -> OwnedGraph:
        nodes = np.arange(dataset.num_nodes, dtype=np.int64)
        return cls(
            nodes=nodes,
            indptr=dataset.indptr,
            indices=dataset.indices,
            feat=dataset.feat,
            label=dataset.label,
            splits={split: getattr(dataset, f"{split}_idx") for split in SPLITS},
            halo_owner=np.zeros(0, dtype=np.int64),
            edge_type=dataset.edge_type,
            node_type=None if dataset.hetero is None else _types(dataset.hetero, nodes),
        )

    @classmethod
    def from_part(cls, part: Part, schema: HeteroSchema | None = None) -> OwnedGraph:
        """`schema`: the dataset's types, when it is heterogeneous."""
        return cls(
            nodes=part["nodes"],
            indptr=part["indptr"],
            indices=part["indices"],
            feat=part["feat"],
            label=part["label"],
            splits={split: part[f"{split}_idx"] for split in SPLITS},
            halo_owner=part["halo_owner"],
            edge_type=None if schema is None else part["edge_type"],
            node_type=None if schema is None else _types(schema, part["nodes"]),
        )

    def own_range_of_type(self, offsets: np.ndarray, node_type: int) -> tuple[int, int]:
        """[start, stop) of the own vertices of type `node_type`: a type's vertices have
        the homogenised ids [offsets[t], offsets[t + 1]), and own vertices come in
        increasing id (gnnrun.partition.book), so they are one run of local ids."""
        own = np.asarray(self.nodes[: self.num_own])
        start, stop = np.searchsorted(own, offsets[node_type : node_type + 2])
        return int(start), int(stop)

    _flags: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, init=False, repr=False)

    def _scratch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(a false flag, a position) per local vertex: chunk_block's maps, kept between chunks."""
        if self._flags is None:
            self._flags = (
                torch.zeros(self.num_local, dtype=torch.bool),
                torch.empty(self.num_local, dtype=torch.int64),
            )
        return self._flags

    def partial_out_degrees(self) -> np.ndarray:
        """Edges leaving each local vertex among this part's edges (a halo vertex's other
        edges are counted by the other parts that hold them)."""
        return np.bincount(np.asarray(self.indices), minlength=self.num_local).astype(np.int64)

    def chunks(self, size: int) -> list[tuple[int, int]]:
        """[start, stop) ranges of own vertices, `size` at a time."""
        return [(a, min(a + size, self.num_own)) for a in range(0, self.num_own, size)]

    def chunk_block(
        self, start: int, stop: int, in_degrees: torch.Tensor, out_degrees: torch.Tensor
    ) -> Block:
        """The block of own vertices [start, stop) with every in-edge: destinations first,
        then the other sources in increasing local id; `src_ids` are local ids. The graph's
        degrees (`in_degrees` of own vertices, `out_degrees` of local ones) go with it, for
        the normalisations that use them (GCN, SAGE's gcn aggregator)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        indptr = torch.from_numpy(np.asarray(self.indptr[start : stop + 1], dtype=np.int64) - lo)
        neighbours = torch.from_numpy(np.asarray(self.indices[lo:hi], dtype=np.int64))
        seen, position = self._scratch()
        # The distinct sources outside the chunk, in increasing local id, without a sort:
        # flags over the rank's local vertices (a scan of one byte per vertex).
        seen[neighbours] = True
        seen[start:stop] = False
        others = seen.nonzero().squeeze(1)
        seen[others] = False
        position[start:stop] = torch.arange(stop - start)
        position[others] = torch.arange(stop - start, stop - start + others.numel())
        indices = position[neighbours]
        src_ids = torch.cat([torch.arange(start, stop), others])
        degrees = (in_degrees[start:stop], out_degrees[src_ids])
        block = Block(indptr, indices, int(src_ids.numel()), src_ids, graph_degrees=degrees)
        if self.edge_type is not None:  # a heterogeneous graph's relations and types
            block.etypes = torch.from_numpy(np.asarray(self.edge_type[lo:hi], dtype=np.int64))
            block.node_types = torch.from_numpy(self.node_type)[src_ids]
        return block


def _types(schema: HeteroSchema, nodes: np.ndarray) -> np.ndarray:
    return schema.type_of(nodes).astype(np.int64)
