"""Where a minibatch's neighbours and features come from: the whole graph, or the owners of a partition.

`make_minibatch` is written once against the small `GraphSource` interface.
`LocalGraphSource` answers from the whole dataset in this process (the
`single` reference); `PartitionGraphSource` sends each request to the rank that
owns the vertex (DistDGL semantics): the owner samples its vertices'
neighbourhoods and returns their features. Sampling randomness is keyed by
(step key, hop, global vertex id), so for the same seeds both sources build
exactly the same blocks: the test oracle for the distributed path.

On a heterogeneous graph (gnnrun.data.hetero) each vertex's in-edges are sampled
per relation, each with its own fanout, from the rows `v * R + r` of a
per-relation CSR: the sampling key of a row is its row id, the same in every
process. A minibatch's blocks then carry each edge's relation and its input
features come per vertex type (`TypedInput`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch

from gnnrun.comm import Communicator, RequestService
from gnnrun.data.dataset import GraphDataset, typed_feat_name
from gnnrun.data.hetero import HeteroSchema, relation_indptr
from gnnrun.models.hetero import TypedInput, typed_input
from gnnrun.ops.block import Block
from gnnrun.ops.native import to_tensor
from gnnrun.ops.rows import take_rows
from gnnrun.ops.sampling import compact, sample_relations
from gnnrun.partition.book import PartitionBook

# A hop's fanout: one for every relation, or one per relation.
Fanout = int | list[int]
# (rows, row shape, dtype) -> a tensor of that shape to gather feature rows into.
RowBuffers = Callable[[int, tuple[int, ...], torch.dtype], torch.Tensor]


class GraphSource:
    """Answers a minibatch's requests: sampled neighbourhoods and input features."""

    schema: HeteroSchema | None = None  # a heterogeneous graph's types

    @property
    def num_relations(self) -> int:
        return 1 if self.schema is None else self.schema.num_relations

    def sample_rows(
        self, rows: torch.Tensor, fanouts: list[int], key: int, hop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For rows `v * R + r` of global vertices v (just v when R = 1): (offsets
        [len+1], sampled neighbour global ids), relation r's rows with fanouts[r]."""
        raise NotImplementedError

    def sample(
        self, nodes: torch.Tensor, fanout: Fanout, key: int, hop: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """For global ids `nodes`: (offsets [len+1], sampled neighbour global ids, each
        sampled edge's relation; None for a homogeneous graph). A vertex's neighbours
        are listed by relation."""
        num_relations = self.num_relations
        fanouts = [fanout] * num_relations if isinstance(fanout, int) else list(fanout)
        if num_relations == 1:
            return (*self.sample_rows(nodes, fanouts, key, hop), None)
        rows = (nodes[:, None] * num_relations + torch.arange(num_relations)).reshape(-1)
        row_offsets, neighbours = self.sample_rows(rows, fanouts, key, hop)
        etypes = torch.repeat_interleave(rows % num_relations, row_offsets[1:] - row_offsets[:-1])
        return row_offsets[::num_relations].contiguous(), neighbours, etypes

    def features(self, nodes: torch.Tensor) -> torch.Tensor | TypedInput:
        """The input rows of global vertices `nodes` (per type, for a heterogeneous graph)."""
        raise NotImplementedError


def hop_fanouts(sampling, schema: HeteroSchema | None) -> list[Fanout]:
    """`algorithm.fanouts` (`sampling`: a sampled algorithm's config,
    gnnrun.algorithms.minibatch.minibatch.SampledConfig) per hop; on a heterogeneous graph a list
    per hop with each relation's fanout (`algorithm.relation_fanouts` by relation name,
    else `algorithm.fanouts`). The names are checked before ranks start
    (gnnrun.algorithms.checks)."""
    if schema is None:
        return list(sampling.fanouts)
    names = schema.relation_names()
    return [
        [int(sampling.relation_fanouts.get(name, sampling.fanouts)[hop]) for name in names]
        for hop in range(len(sampling.fanouts))
    ]


def make_minibatch(
    source: GraphSource,
    seeds: torch.Tensor,
    fanouts: list[Fanout],
    key: int,
    exclude: torch.Tensor | None = None,
) -> tuple[list[Block], torch.Tensor | TypedInput]:
    """Sampled blocks (input layer first) for `seeds` (global ids) and the input features."""
    blocks = sample_minibatch(source, seeds, fanouts, key, exclude)
    return blocks, source.features(blocks[0].src_ids)


def sample_minibatch(
    source: GraphSource,
    seeds: torch.Tensor,
    fanouts: list[Fanout],
    key: int,
    exclude: torch.Tensor | None = None,
) -> list[Block]:
    """The sampled blocks of `seeds` (global ids), input layer first; their input vertices
    are `blocks[0].src_ids`. `fanouts` go from the seeds outwards: fanouts[0] neighbours
    per seed (per relation, where it lists one per relation).

    `exclude` [2, E]: vertex pairs whose edges, in either direction, leave every block
    once sampled (a link-prediction step's target edges; DistDGL drops them from the
    sampled frontier the same way), so a vertex may keep fewer than its fanout."""
    blocks: list[Block] = []
    frontier = seeds
    excluded = None if exclude is None or not exclude.numel() else pair_keys(exclude)
    for hop, fanout in enumerate(fanouts):
        offsets, neighbours, etypes = source.sample(frontier, fanout, key, hop)
        if excluded is not None:
            offsets, neighbours, etypes = _drop_pairs(
                frontier, offsets, neighbours, etypes, excluded
            )
        indptr, indices, src_ids = compact(frontier, offsets, neighbours)
        block = Block(indptr, indices, int(src_ids.numel()), src_ids, etypes=etypes)
        if source.schema is not None:
            block.node_types = torch.from_numpy(source.schema.type_of(src_ids.numpy()))
        blocks.insert(0, block)
        frontier = src_ids
    return blocks


def pair_keys(pairs: torch.Tensor) -> torch.Tensor:
    """One int64 per vertex pair [2, E] and per direction, sorted: (a << 32) | b."""
    a, b = pairs[0].to(torch.int64), pairs[1].to(torch.int64)
    return torch.unique(torch.cat([(a << 32) | b, (b << 32) | a]))


def _drop_pairs(
    frontier: torch.Tensor,
    offsets: torch.Tensor,
    neighbours: torch.Tensor,
    etypes: torch.Tensor | None,
    excluded: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The sampled edges neighbour -> frontier vertex whose pair is not in `excluded`."""
    counts = offsets[1:] - offsets[:-1]
    destinations = torch.repeat_interleave(frontier, counts)
    keep = ~torch.isin((neighbours << 32) | destinations, excluded)
    row = torch.repeat_interleave(torch.arange(frontier.numel()), counts)
    kept = torch.zeros(frontier.numel(), dtype=torch.int64).index_add_(0, row, keep.long())
    offsets = torch.zeros_like(offsets)
    torch.cumsum(kept, 0, out=offsets[1:])
    return offsets, neighbours[keep], None if etypes is None else etypes[keep]


class LocalGraphSource(GraphSource):
    """The whole dataset, in this process."""

    def __init__(self, dataset: GraphDataset) -> None:
        self.schema = dataset.hetero
        self.indices = to_tensor(dataset.indices)
        self.feat = dataset.feat
        if self.schema is None:
            self.indptr = to_tensor(dataset.indptr, np.int64)
        else:
            self.indptr = torch.from_numpy(
                relation_indptr(dataset.indptr, dataset.edge_type, self.schema.num_relations)
            )
            self.typed_feat = dataset.typed_feat

    def sample_rows(self, rows, fanouts, key, hop):
        return sample_relations(self.indptr, self.indices, rows, fanouts, key, hop)

    def features(self, nodes):
        if self.schema is None:
            return torch.from_numpy(take_rows(self.feat, nodes.numpy()))
        return typed_input(self.schema, nodes, self._typed_rows)

    def _typed_rows(self, node_type: int, typed_ids: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(take_rows(self.typed_feat[node_type], typed_ids.numpy()))


class PartitionGraphSource(GraphSource):
    """One rank's edge-cut part; requests for other vertices go to their owners.

    The part's CSR is indexed here by *global* id (empty rows for vertices
    owned elsewhere), so that sampling keys its randomness on global ids and
    the k-th neighbour of a row is the same vertex as in the global CSR (parts
    keep each row in global order).
    """

    # Served sources only (`served()`): this rank's servers, and its side as their client.
    sampling: RequestService | None = None
    fetching: RequestService | None = None

    def __init__(
        self, book: PartitionBook, comm: Communicator, schema: HeteroSchema | None = None
    ) -> None:
        part = book.load_part(book.part_of_rank(comm.rank))
        self.comm, self.schema = comm, schema
        # The rank to ask for each vertex. Where T trainers share each part (a machine's,
        # partitioner=two_level), the one with this rank's place on the owner's machine:
        # this rank itself for its own machine's vertices, and the machine's trainers
        # share the answering of the others'.
        trainers = book.trainers_per_part
        owner_part = torch.from_numpy(np.array(book.node_owner(), dtype=np.int64))
        self.owner = owner_part * trainers + comm.rank % trainers
        self.local = torch.from_numpy(np.array(book.node_local(), dtype=np.int64))
        self.nodes = torch.from_numpy(np.array(part["nodes"], dtype=np.int64))
        n, rows_per_vertex = self.owner.numel(), self.num_relations
        # A run of one rank holds every vertex under its global id: its sampling and its
        # feature rows need no routing and no id mapping (LocalGraphSource's path). On
        # synthetic-large a minibatch's sampling then took 2.3x less time, the gather of its
        # 480,000 input rows 3x less (benchmarks/2026-11-27-one-rank-source.md).
        self.whole_graph = comm.world_size == 1 and torch.equal(self.nodes, torch.arange(n))
        solid = self.nodes[: part.num_solid]
        # Rows of the part in global-id order are its solid rows in local order
        # (solid local ids increase with global id), so the indices carry over.
        part_indptr = np.asarray(part["indptr"])
        if schema is not None:  # rows v * R + r: the part's edges are listed by relation
            part_indptr = relation_indptr(
                part_indptr, np.asarray(part["edge_type"]), rows_per_vertex
            )
        degrees = torch.zeros(n, rows_per_vertex, dtype=torch.int64)
        degrees[solid] = torch.from_numpy(np.diff(part_indptr)).view(-1, rows_per_vertex)
        self.indptr = torch.zeros(n * rows_per_vertex + 1, dtype=torch.int64)
        torch.cumsum(degrees.view(-1), 0, out=self.indptr[1:])
        self.indices = to_tensor(part["indices"])
        self.feat = part["feat"]
        self.label = torch.from_numpy(np.array(part["label"], dtype=np.int64))
        if schema is not None:
            # Solid vertices are in global-id order, so each type's are consecutive: the
            # part's rows of type t start at the local id of its first vertex of type t.
            starts = np.searchsorted(solid.numpy(), schema.offsets[:-1])
            self.typed_feat = {
                t: (part[typed_feat_name(t)], int(starts[t]))
                for t, dim in enumerate(schema.feat_dims)
                if dim
            }

    def talking_over(self, comm: Communicator) -> PartitionGraphSource:
        """This part (its arrays shared, not copied), sending its requests through `comm`."""
        source = copy.copy(self)
        source.comm = comm
        return source

    def served(self) -> PartitionGraphSource:
        """This part (its arrays shared), asking the other ranks' servers instead of
        exchanging with them: each rank answers requests in threads of its own
        (gnnrun.comm.requests), so a rank's sampling and feature fetches never wait for
        another rank to reach the same exchange. Collective to create (every rank, in the
        same order); `close()` ends it. The same blocks and rows as `talking_over`."""
        source = copy.copy(self)
        source.sampling = self.comm.request_service(self._answer_sampling)
        source.fetching = self.comm.request_service(self._answer_fetch)
        return source

    def close(self, timeout_s: float = 300.0) -> None:
        """End the served source's services (RequestService.close)."""
        for service in (self.sampling, self.fetching):
            if service is not None:
                service.close(timeout_s)
        self.sampling = self.fetching = None

    def _route(
        self, nodes: torch.Tensor, owner: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=self.comm.world_size).tolist()
        return order, list(nodes[order].split(counts))

    # ------------------------------------------------------------------ sampling

    def sample_rows(self, rows, fanouts, key, hop):
        if self.whole_graph:
            return sample_relations(self.indptr, self.indices, rows, fanouts, key, hop)
        order, requests = self._route(rows, self.owner[rows // self.num_relations])
        if self.sampling is None:
            received = self.comm.exchange(requests, "sample_requests")
            replies = [self._sample_own(ids, fanouts, key, hop) for ids in received]
            counts = torch.cat(self.comm.exchange([c for c, _ in replies], "sample_replies"))
            neighbours = torch.cat(self.comm.exchange([n for _, n in replies], "sample_replies"))
        else:
            header = torch.tensor([hop, key, len(fanouts), *fanouts], dtype=torch.int64)
            pending = self.sampling.ask(
                [torch.cat([header, ids]) if ids.numel() else None for ids in requests],
                [(torch.int64, ()), (torch.int64, ())],
                ("sample_requests", "sample_replies"),
            )
            own = self._sample_own(requests[self.comm.rank], fanouts, key, hop)
            answers = pending.wait()
            answers[self.comm.rank] = list(own)
            empty = torch.zeros(0, dtype=torch.int64)
            replies = [answers.get(r, (empty, empty)) for r in range(self.comm.world_size)]
            counts = torch.cat([c for c, _ in replies])
            neighbours = torch.cat([n for _, n in replies])
        # Undo the routing order: rows came back grouped by owner.
        starts = torch.zeros(counts.numel() + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=starts[1:])
        original_counts = torch.empty_like(counts)
        original_counts[order] = counts
        offsets = torch.zeros(rows.numel() + 1, dtype=torch.int64)
        torch.cumsum(original_counts, 0, out=offsets[1:])
        gather = torch.empty(int(offsets[-1]), dtype=torch.int64)
        if gather.numel():
            position_in_reply = torch.empty_like(order)
            position_in_reply[order] = torch.arange(order.numel())
            reply_start = starts[position_in_reply]
            gather = torch.repeat_interleave(
                reply_start - offsets[:-1], original_counts
            ) + torch.arange(int(offsets[-1]))
            gather = neighbours[gather]
        return offsets, gather

    def _sample_own(
        self, rows: torch.Tensor, fanouts: list[int], key: int, hop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of this part, sampled: (each row's count, the neighbours' global ids)."""
        offsets, neighbours = sample_relations(self.indptr, self.indices, rows, fanouts, key, hop)
        return offsets[1:] - offsets[:-1], self.nodes[neighbours]

    def _answer_sampling(self, payload: torch.Tensor) -> list[torch.Tensor]:
        hop, key, num_fanouts = payload[:3].tolist()
        fanouts = payload[3 : 3 + num_fanouts].tolist()
        return list(self._sample_own(payload[3 + num_fanouts :], fanouts, key, hop))

    # ------------------------------------------------------------------ features

    def features(self, nodes):
        if self.schema is None:
            return self._input_rows(nodes, -1)
        offsets = self.schema.offsets
        return typed_input(
            self.schema,
            nodes,
            lambda t, typed_ids: self._input_rows(typed_ids + int(offsets[t]), t),
        )

    def _input_rows(self, nodes: torch.Tensor, node_type: int) -> torch.Tensor:
        """Input features of global vertices `nodes` (of `node_type`; -1: homogeneous)."""
        if self.fetching is not None:
            rows, position = self.gather_rows(nodes, node_type)
            return rows if position is None else rows[position]
        return self.fetch_rows(nodes, *self._table(node_type))

    def _table(self, node_type: int) -> tuple[np.ndarray, int]:
        """A feature table and the local id of its first row (-1: the homogeneous one)."""
        return (self.feat, 0) if node_type < 0 else self.typed_feat[node_type]

    def fetch_rows(self, nodes: torch.Tensor, table: np.ndarray, first_row: int) -> torch.Tensor:
        """Rows of global vertices `nodes` from their owners' `table`, whose row of the
        owner's local id l is l - first_row, over all-to-alls."""
        if self.whole_graph:
            return torch.from_numpy(take_rows(table, self._own_rows(nodes, first_row)))
        # This rank's own rows are gathered straight into place while the others are
        # on their way: through the exchange they would be copied three more times.
        owner = self.owner[nodes]
        mine = owner == self.comm.rank
        remote = torch.nonzero(~mine).squeeze(1)
        order, requests = self._route(nodes[remote], owner[remote])
        received = self.comm.exchange(requests, "feature_requests")
        replies = [
            torch.from_numpy(take_rows(table, self._own_rows(ids, first_row))) for ids in received
        ]
        pending = self.comm.exchange_start(replies, "features")
        own = torch.nonzero(mine).squeeze(1)
        out = torch.empty((nodes.numel(), *table.shape[1:]), dtype=replies[0].dtype)
        out.index_copy_(
            0, own, torch.from_numpy(take_rows(table, self._own_rows(nodes[own], first_row)))
        )
        out.index_copy_(0, remote[order], torch.cat(pending.wait()))
        return out

    def gather_rows(
        self, nodes: torch.Tensor, node_type: int = -1, into: RowBuffers | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(rows, position): the feature rows of global vertices `nodes` (of `node_type`,
        -1 on a homogeneous graph) in one buffer, and each vertex's row in it, so that
        rows[position] lists them in order; position None: the rows are in order already
        (a source that holds the whole graph gathers them so).

        The buffer holds this rank's own rows first, gathered into it, then each other
        owner's, received into it (served; over the all-to-alls, copied into it once
        received): one copy per byte (DistDGLv2's pinned buffer), where putting them in
        order would take a second. The reordering is left to the reader: on a GPU rank, the
        GPU's after the buffer's copy. `into(rows, row_shape, dtype)` gives the buffer (a
        reused one); by default a new one."""
        table, first_row = self._table(node_type)
        dtype = torch.from_numpy(np.empty(0, dtype=table.dtype)).dtype
        shape = (nodes.numel(), *table.shape[1:])
        rows = (
            torch.empty(shape, dtype=dtype) if into is None else into(*shape[:1], shape[1:], dtype)
        )
        if self.whole_graph:
            take_rows(table, self._own_rows(nodes, first_row), out=rows.numpy())
            return rows, None
        order, requests = self._route(nodes, self.owner[nodes])
        me, world = self.comm.rank, self.comm.world_size
        sizes = [ids.numel() for ids in requests]
        ranks = [me, *[r for r in range(world) if r != me]]  # the buffer's order
        starts = dict(
            zip(ranks, np.cumsum([0, *[sizes[r] for r in ranks[:-1]]]).tolist(), strict=True)
        )
        part = {r: rows[starts[r] : starts[r] + sizes[r]] for r in ranks}
        own = self._own_rows(requests[me], first_row)
        if self.fetching is not None:
            pending = self.fetching.ask(
                [
                    torch.cat([torch.tensor([node_type]), ids]) if ids.numel() else None
                    for ids in requests
                ],
                [(dtype, tuple(table.shape[1:]))],
                ("feature_requests", "features"),
                into={r: [part[r]] for r in ranks[1:]},
            )
            take_rows(table, own, out=part[me].numpy())
            pending.wait()
        else:  # all-to-alls, in step with every rank (`fetch_rows`' traffic, byte for byte)
            requests[me] = requests[me][:0]
            received = self.comm.exchange(requests, "feature_requests")
            replies = [
                torch.from_numpy(take_rows(table, self._own_rows(ids, first_row)))
                for ids in received
            ]
            pending = self.comm.exchange_start(replies, "features")
            take_rows(table, own, out=part[me].numpy())
            for r, arrived in enumerate(pending.wait()):
                if r != me:
                    part[r].copy_(arrived)
        # nodes[order] are grouped by owner in rank order, the buffer's with this rank first.
        in_buffer = torch.cat([torch.arange(starts[r], starts[r] + sizes[r]) for r in range(world)])
        position = torch.empty_like(order)
        position[order] = in_buffer
        return rows, position

    def _own_rows(self, nodes: torch.Tensor, first_row: int) -> np.ndarray:
        """The rows in this part's feature table (whose first row is local id `first_row`)
        of global vertices `nodes`, all of them this rank's."""
        local = nodes if self.whole_graph else self.local[nodes]
        return (local - first_row).numpy()

    def _answer_fetch(self, payload: torch.Tensor) -> list[torch.Tensor]:
        table, first_row = self._table(int(payload[0]))
        ids = payload[1:]  # global ids
        return [torch.from_numpy(take_rows(table, self._own_rows(ids, first_row)))]

    def labels(self, nodes: torch.Tensor) -> torch.Tensor:
        """Labels of vertices this rank owns."""
        return self.label[self.local[nodes]]
