"""The halo exchange of layer-wise inference: rows of vertices a rank reads but does not own.

Every rank lists once, per owner, the halo vertices it needs (in its halo's
order) and tells the owners; each owner turns them into its own local ids. A
`pull` then sends each owner's rows of a layer to the ranks that read them, in
rounds of at most `rows_per_round` rows per pair of ranks, so that what is in
flight stays bounded however large the halo. The round count is the same on
every rank (the largest list decides), as the all-to-alls must pair up. `push_sum`
goes the other way and adds the halo's values into their owners' (out-degrees).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gnnrun.comm import Communicator
from gnnrun.infer.graph import OwnedGraph


class HaloPlan:
    def __init__(
        self, graph: OwnedGraph, node_local: np.ndarray, comm: Communicator, rows_per_round: int
    ) -> None:
        """`node_local`: every dataset id's local id in its owner's part (the partition's map)."""
        self.comm, self.rows_per_round = comm, rows_per_round
        owners = np.asarray(graph.halo_owner)
        # Halo positions (0-based within the halo) of the vertices each rank owns.
        self.receive = [
            torch.from_numpy(np.flatnonzero(owners == q)) for q in range(comm.world_size)
        ]
        if not comm.distributed:
            self.send = [torch.zeros(0, dtype=torch.int64)]
            return
        wanted = [
            torch.from_numpy(
                np.asarray(graph.nodes[graph.num_own + positions.numpy()], dtype=np.int64)
            )
            for positions in self.receive
        ]
        asked = comm.exchange(wanted, "halo_plan")
        # Own local ids of the vertices each rank reads, in the order it reads them.
        self.send = [
            torch.from_numpy(np.asarray(node_local[ids.numpy()], np.int64)) for ids in asked
        ]
        longest = max(len(ids) for ids in self.send)
        self.rounds = comm.max_int(math.ceil(longest / rows_per_round))

    def pull(self, own: torch.Tensor, halo: torch.Tensor, purpose: str) -> None:
        """Fill `halo` ([num_halo, ...]) with the owners' rows of `own` ([num_own, ...])."""
        if not self.comm.distributed:
            return
        step = self.rows_per_round
        for r in range(self.rounds):
            window = slice(r * step, (r + 1) * step)
            outgoing = [own.index_select(0, ids[window]) for ids in self.send]
            counts = torch.tensor([len(p[window]) for p in self.receive], dtype=torch.int64)
            pending = self.comm.exchange_start(outgoing, purpose, incoming_counts=counts)
            for positions, rows in zip(self.receive, pending.wait(), strict=True):
                halo.index_copy_(0, positions[window], rows)

    def push_sum(self, halo_values: torch.Tensor, own_values: torch.Tensor, purpose: str) -> None:
        """Add each halo vertex's value into its owner's `own_values` (one exchange)."""
        if not self.comm.distributed:
            return
        outgoing = [halo_values.index_select(0, p) for p in self.receive]
        counts = torch.tensor([len(ids) for ids in self.send], dtype=torch.int64)
        received = self.comm.exchange_start(outgoing, purpose, incoming_counts=counts).wait()
        for ids, values in zip(self.send, received, strict=True):
            own_values.index_add_(0, ids, values)
