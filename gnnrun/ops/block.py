"""The unit every GNN layer runs on: a bipartite in-CSR from source to destination vertices.

A Block maps `num_src` source vertices to `num_dst` destination vertices. Row
`v` of the CSR (`indices[indptr[v]:indptr[v+1]]`) lists the *local* source ids
of v's in-neighbours. As in DGL, the destinations are the first `num_dst`
sources (`x_dst = x_src[:num_dst]`), which is what SAGE's self term and GAT's
destination attention need. A full graph is a Block with num_src == num_dst.

`src_ids` holds the id of every source vertex in the id space of the graph the
block was taken from (global ids, or a partition's local ids); its first
`num_dst` entries are the destination ids.

A vertex-cut part is a Block whose edges are a subset of the graph's: it
carries the graph's degrees of its vertices (`graph_degrees`), which
normalisations use, and a `completion` that adds to each split vertex's
partial aggregate what its clones in other parts aggregated (DistGNN's DRPA,
gnnrun/algorithms/distgnn/drpa.py).

A block of a heterogeneous graph (gnnrun.data.hetero) carries each edge's
relation (`etypes`, aligned with `indices`) and each source's vertex type
(`node_types`); `relation_blocks` splits it into one block per relation over
the same vertices, `relation_rows` reads it as one block over rows `v * R + r`,
for relational layers that aggregate each relation apart. A block of a
homogeneous graph is its own only relation block and relation rows, so such
layers keep a part's `graph_degrees`, `completion` and `sharded`; a new block built
from a part's block would lose them, and is refused (`_check_derivable`).

An edge-cut part trained full batch without halo rows (SAR) is a Block over
the rank's own vertices only (num_src == num_dst), whose CSR holds the edges
between them; its `sharded` aggregation adds the in-edges whose sources live
on other ranks, fetching those rows itself (gnnrun/algorithms/sar/shards.py). The
aggregation ops hand such a block to it whole.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch


class Completion(Protocol):
    """Turns a vertex-cut part's partial aggregates into full ones (gnnrun.algorithms.distgnn.drpa)."""

    def __call__(self, partial: torch.Tensor) -> torch.Tensor: ...

    def local_phase(self) -> AbstractContextManager:
        """Wraps the local aggregation before a completion (for its timer)."""
        ...


class ShardedAggregation(Protocol):
    """Aggregates over a block's own edges and over in-edges from other ranks' vertices,
    whose rows it fetches itself (gnnrun.algorithms.sar.shards). `block`'s CSR is the local
    shard: the edges among this rank's vertices (with GAT's self-loops where added)."""

    def aggregate(self, block: Block, x: torch.Tensor, reduce: str) -> torch.Tensor:
        """Sum or mean of x over every in-edge, remote sources included."""
        ...

    def gat_aggregate(
        self,
        block: Block,
        feat_src: torch.Tensor,
        el: torch.Tensor,
        er: torch.Tensor,
        negative_slope: float,
    ) -> torch.Tensor:
        """GAT's attention aggregation with the edge softmax over every in-edge."""
        ...


@dataclass
class Block:
    indptr: torch.Tensor  # int64 [num_dst + 1]
    indices: torch.Tensor  # int64 [num_edges], local source ids in [0, num_src)
    num_src: int
    src_ids: torch.Tensor | None = None  # int64 [num_src]
    graph_degrees: tuple[torch.Tensor, torch.Tensor] | None = None  # (in, out) in the whole graph
    completion: Completion | None = None
    sharded: ShardedAggregation | None = None
    # Its in-CSR is also its out-CSR (a whole undirected graph, rows sorted): the
    # backward passes, which run over the transpose, use the CSR itself.
    symmetric: bool = False
    etypes: torch.Tensor | None = None  # int64 [num_edges]: each edge's relation
    node_types: torch.Tensor | None = None  # int64 [num_src]: each source's vertex type
    _relations: list[Block] | None = field(default=None, repr=False, compare=False)
    _relation_rows: Block | None = field(default=None, repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    def to(self, device: torch.device, non_blocking: bool = False) -> Block:
        """This block with its arrays on `device` (itself when they are there already); the
        per-block caches are computed again there. A part's completion or sharded
        aggregation moves with its algorithm, not with the block."""
        if self.device == device:
            return self

        def move(t):
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return Block(
            move(self.indptr),
            move(self.indices),
            self.num_src,
            move(self.src_ids),
            None if self.graph_degrees is None else tuple(map(move, self.graph_degrees)),
            self.completion,
            self.sharded,
            self.symmetric,
            move(self.etypes),
            move(self.node_types),
        )

    @property
    def num_dst(self) -> int:
        return int(self.indptr.numel() - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    def in_degrees(self) -> torch.Tensor:
        """Edges into each destination in this block's CSR."""
        return self.indptr[1:] - self.indptr[:-1]

    def graph_in_degrees(self) -> torch.Tensor:
        """The destinations' in-degrees that normalisations use: the graph's, for a part."""
        return self.in_degrees() if self.graph_degrees is None else self.graph_degrees[0]

    def graph_out_degrees(self) -> torch.Tensor:
        """Edges leaving each source: in this block, or in the whole graph for a part.

        Counted once and kept on the block (a new `indices` array counts again): GCN
        normalises by it in every layer of every epoch, and counting 5M edges took
        about 30 ms of CPU each time, 5-10% of a full-batch GCN epoch. Shared: do not
        modify the result in place.
        """
        if self.graph_degrees is not None:
            return self.graph_degrees[1]
        if self.symmetric:  # its own transpose: what enters a vertex also leaves it
            return self.in_degrees()
        cached = getattr(self, "_out_degrees", None)
        if cached is None or cached[0] is not self.indices:
            cached = (self.indices, torch.bincount(self.indices, minlength=self.num_src))
            # Not a dataclass field: stays out of eq/repr; a replaced indices recounts.
            object.__setattr__(self, "_out_degrees", cached)
        return cached[1]

    def dst_of_edges(self) -> torch.Tensor:
        """The destination of every edge, in CSR order."""
        return torch.repeat_interleave(
            torch.arange(self.num_dst, device=self.device), self.in_degrees()
        )

    def without_sources(self, dropped: torch.Tensor) -> Block:
        """This block minus the edges whose source is marked in `dropped` (bool [num_src]).

        The vertices stay (ids and rows keep their positions); only their edges go,
        so degree normalisations see the smaller neighbourhoods.
        """
        self._check_derivable("without_sources")
        keep = ~dropped[self.indices]
        etypes = None if self.etypes is None else self.etypes[keep]
        return Block(
            self._kept_indptr(keep), self.indices[keep], self.num_src, self.src_ids, etypes=etypes
        )

    def _check_derivable(self, how: str) -> None:
        """Refuse to build a new Block from one with remote edges (`sharded`) or clone
        completion (`completion`): they belong to this block's CSR, and the new block,
        without them, would aggregate over the part's own edges only (exact-looking
        and wrong)."""
        if self.sharded is not None or self.completion is not None:
            kind = "remote shards (sar, domain_parallel)" if self.sharded else "clone completion"
            raise ValueError(
                f"Block.{how} would drop this block's {kind}: a layer that rebuilds its "
                "block cannot run on an edge-cut or vertex-cut part"
            )

    def _kept_indptr(self, keep: torch.Tensor) -> torch.Tensor:
        """The indptr of the edges marked in `keep` (bool [num_edges]), rows kept in place."""
        kept_before = torch.zeros(self.num_edges + 1, dtype=torch.int64, device=self.device)
        torch.cumsum(keep, 0, out=kept_before[1:])
        return kept_before[self.indptr]

    def relation_rows(self, num_relations: int) -> Block:
        """This block's edges as a block over rows `v * R + r` (relation r's in-edges of
        destination v), the same sources: one aggregation gives every relation's mean of
        every destination, [num_dst * R, ...]. The edges of a row must be listed by
        relation (as sampling and the typed CSR list them). Computed once per block; a
        block without relations read as one relation is the block itself."""
        if num_relations == 1 and self.etypes is None:
            # Rows v * 1 + 0 are this block's rows: itself, with what it carries (a
            # part's remote shards, completion and graph degrees).
            return self
        if self._relation_rows is None:
            self._check_derivable("relation_rows")
            etypes = torch.zeros_like(self.indices) if self.etypes is None else self.etypes
            key = self.dst_of_edges() * num_relations + etypes
            if key.numel() and not bool(torch.all(key[1:] >= key[:-1])):
                raise ValueError("a block's rows must list their edges by relation")
            counts = torch.bincount(key, minlength=self.num_dst * num_relations)
            indptr = torch.zeros(
                self.num_dst * num_relations + 1, dtype=torch.int64, device=self.device
            )
            torch.cumsum(counts, 0, out=indptr[1:])
            self._relation_rows = Block(indptr, self.indices, self.num_src, self.src_ids)
        return self._relation_rows

    def relation_blocks(self, num_relations: int) -> list[Block]:
        """One block per relation: the same sources and destinations, the edges of that
        relation (all of them for relation 0 of a block without relations). Computed once
        per block: full-batch training runs every layer on the same one."""
        if self._relations is None or len(self._relations) != num_relations:
            if self.etypes is None:
                if num_relations != 1:
                    raise ValueError(f"a block without relations split into {num_relations}")
                self._relations = [self]
            else:
                self._check_derivable("relation_blocks")
                self._relations = []
                for relation in range(num_relations):
                    keep = self.etypes == relation
                    self._relations.append(
                        Block(
                            self._kept_indptr(keep), self.indices[keep], self.num_src, self.src_ids
                        )
                    )
        return self._relations

    @classmethod
    def from_csr(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        num_src: int | None = None,
        symmetric: bool = False,
    ) -> Block:
        """A full-graph block over a CSR (destinations = all rows); `symmetric`: the CSR of
        an undirected graph, both directions stored, rows sorted."""
        indptr_t = torch.from_numpy(np.asarray(indptr, dtype=np.int64).copy())
        indices_t = torch.from_numpy(np.asarray(indices, dtype=np.int64).copy())
        n = indptr_t.numel() - 1
        return cls(indptr_t, indices_t, n if num_src is None else num_src, symmetric=symmetric)

    def validate(self) -> None:
        if self.indptr[0] != 0 or self.indptr[-1] != self.indices.numel():
            raise ValueError("block indptr does not span indices")
        if self.num_dst > self.num_src:
            raise ValueError("a block has at most as many destinations as sources")
        if self.indices.numel() and (self.indices.min() < 0 or self.indices.max() >= self.num_src):
            raise ValueError("block indices outside [0, num_src)")
        if self.symmetric and not self._is_own_transpose():
            raise ValueError("a block marked symmetric is not its own transpose")

    def _is_own_transpose(self) -> bool:
        """Whether the out-CSR equals the in-CSR: the same edges, both directions, rows sorted."""
        if self.num_src != self.num_dst:
            return False
        dst = self.dst_of_edges()
        src = self.indices.long()
        forward = dst * self.num_src + src  # sorted when the rows are
        return bool(
            torch.equal(forward, torch.sort(src * self.num_src + dst).values)
            and torch.all(forward[1:] > forward[:-1])
        )
