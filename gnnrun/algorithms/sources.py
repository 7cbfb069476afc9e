"""Where a minibatch's neighbours and features come from: the whole graph, or the owners of a partition.

`make_minibatch` is written once against the small `GraphSource` interface.
`LocalGraphSource` answers from the whole dataset in this process (the
`single` reference); `PartitionGraphSource` sends each request to the rank that
owns the vertex (DistDGL semantics): the owner samples its vertices'
neighbourhoods and returns their features. Sampling randomness is keyed by
(step key, hop, global vertex id), so for the same seeds both sources build
exactly the same blocks: the test oracle for the distributed path.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from gnnrun.comm import Communicator
from gnnrun.data.dataset import GraphDataset
from gnnrun.ops.block import Block
from gnnrun.ops.native import to_tensor
from gnnrun.ops.rows import take_rows
from gnnrun.ops.sampling import compact, sample_neighbors
from gnnrun.partition.book import PartitionBook


class GraphSource:
    def sample(
        self, nodes: torch.Tensor, fanout: int, key: int, hop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For global ids `nodes`: (offsets [len+1], sampled neighbour global ids)."""
        raise NotImplementedError

    def features(self, nodes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def make_minibatch(
    source: GraphSource, seeds: torch.Tensor, fanouts: list[int], key: int
) -> tuple[list[Block], torch.Tensor]:
    """Sampled blocks (input layer first) for `seeds` (global ids) and the input features."""
    blocks = sample_minibatch(source, seeds, fanouts, key)
    return blocks, source.features(blocks[0].src_ids)


def sample_minibatch(
    source: GraphSource, seeds: torch.Tensor, fanouts: list[int], key: int
) -> list[Block]:
    """The sampled blocks of `seeds` (global ids), input layer first; their input vertices
    are `blocks[0].src_ids`. `fanouts` go from the seeds outwards: fanouts[0] neighbours
    per seed."""
    blocks: list[Block] = []
    frontier = seeds
    for hop, fanout in enumerate(fanouts):
        offsets, neighbours = source.sample(frontier, fanout, key, hop)
        indptr, indices, src_ids = compact(frontier, offsets, neighbours)
        blocks.insert(0, Block(indptr, indices, int(src_ids.numel()), src_ids))
        frontier = src_ids
    return blocks


class LocalGraphSource(GraphSource):
    """The whole dataset, in this process."""

    def __init__(self, dataset: GraphDataset) -> None:
        self.indptr = to_tensor(dataset.indptr, np.int64)
        self.indices = to_tensor(dataset.indices)
        self.feat = dataset.feat

    def sample(self, nodes, fanout, key, hop):
        return sample_neighbors(self.indptr, self.indices, nodes, fanout, key, hop)

    def features(self, nodes):
        return torch.from_numpy(take_rows(self.feat, nodes.numpy()))


class PartitionGraphSource(GraphSource):
    """One rank's edge-cut part; requests for other vertices go to their owners.

    The part's CSR is indexed here by *global* id (empty rows for vertices
    owned elsewhere), so that sampling keys its randomness on global ids and
    the k-th neighbour of a row is the same vertex as in the global CSR (parts
    keep each row in global order).
    """

    def __init__(self, book: PartitionBook, comm: Communicator) -> None:
        part = book.load_part(comm.rank)
        self.comm = comm
        self.owner = torch.from_numpy(np.array(book.node_owner(), dtype=np.int64))
        self.local = torch.from_numpy(np.array(book.node_local(), dtype=np.int64))
        self.nodes = torch.from_numpy(np.array(part["nodes"], dtype=np.int64))
        n = self.owner.numel()
        solid = self.nodes[: part.num_solid]
        degrees = torch.zeros(n, dtype=torch.int64)
        degrees[solid] = torch.from_numpy(np.diff(np.asarray(part["indptr"])))
        self.indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(degrees, 0, out=self.indptr[1:])
        # Rows of the part in global-id order are its solid rows in local order
        # (solid local ids increase with global id), so the indices carry over.
        self.indices = to_tensor(part["indices"])
        self.feat = part["feat"]
        self.label = torch.from_numpy(np.array(part["label"], dtype=np.int64))

    def talking_over(self, comm: Communicator) -> PartitionGraphSource:
        """This part (its arrays shared, not copied), sending its requests through `comm`."""
        source = copy.copy(self)
        source.comm = comm
        return source

    def _route(self, nodes: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        owner = self.owner[nodes]
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=self.comm.world_size).tolist()
        return order, list(nodes[order].split(counts))

    def sample(self, nodes, fanout, key, hop):
        order, requests = self._route(nodes)
        received = self.comm.exchange(requests, "sample_requests")
        replies_counts, replies_neighbours = [], []
        for ids in received:
            offsets, neighbours = sample_neighbors(self.indptr, self.indices, ids, fanout, key, hop)
            replies_counts.append(offsets[1:] - offsets[:-1])
            replies_neighbours.append(self.nodes[neighbours])
        counts = torch.cat(self.comm.exchange(replies_counts, "sample_replies"))
        neighbours = torch.cat(self.comm.exchange(replies_neighbours, "sample_replies"))
        # Undo the routing order: rows came back grouped by owner.
        starts = torch.zeros(counts.numel() + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=starts[1:])
        original_counts = torch.empty_like(counts)
        original_counts[order] = counts
        offsets = torch.zeros(nodes.numel() + 1, dtype=torch.int64)
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

    def features(self, nodes):
        # This rank's own rows are gathered straight into place while the others are
        # on their way: through the exchange they would be copied three more times.
        mine = self.owner[nodes] == self.comm.rank
        remote = torch.nonzero(~mine).squeeze(1)
        order, requests = self._route(nodes[remote])
        received = self.comm.exchange(requests, "feature_requests")
        replies = [
            torch.from_numpy(take_rows(self.feat, self.local[ids].numpy())) for ids in received
        ]
        pending = self.comm.exchange_start(replies, "features")
        own = torch.nonzero(mine).squeeze(1)
        out = torch.empty((nodes.numel(), *self.feat.shape[1:]), dtype=replies[0].dtype)
        out.index_copy_(
            0, own, torch.from_numpy(take_rows(self.feat, self.local[nodes[own]].numpy()))
        )
        out.index_copy_(0, remote[order], torch.cat(pending.wait()))
        return out

    def labels(self, nodes: torch.Tensor) -> torch.Tensor:
        """Labels of vertices this rank owns."""
        return self.label[self.local[nodes]]
