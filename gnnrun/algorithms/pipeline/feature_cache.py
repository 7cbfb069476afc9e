"""The input features of the most-connected vertices, kept on the rank's device.

DistDGLv2 (section 4.2) keeps the features of frequently sampled vertices in GPU
memory, so that a minibatch copies to the GPU only the rows it does not find
there. Neighbour sampling reaches a vertex about in proportion to its in-degree,
so the cache holds the `count` vertices of highest in-degree in the whole graph
(ties by id: every rank caches the same ones), fetched once from their owners
when the pipeline starts. On a GPU rank it saves the copy to the GPU of every
row it holds, and on any rank the fetch of those rows from other ranks.

A minibatch's input vertices split into those found (`slots` >= 0) and those
missing; the missing rows are fetched and copied as without a cache, and
`assemble` puts both together on the device, in the minibatch's order: the
input features are exactly those fetched without a cache.
"""

from __future__ import annotations

import numpy as np
import torch


class FeatureCache:
    def __init__(self, ids: torch.Tensor, rows: torch.Tensor, num_nodes: int) -> None:
        self.rows = rows  # [count, F] on the rank's device, in the order of `ids`
        self.slot = torch.full((num_nodes,), -1, dtype=torch.int64)  # on the CPU, with the ids
        self.slot[ids] = torch.arange(ids.numel())

    @staticmethod
    def most_connected(indptr: np.ndarray, count: int) -> torch.Tensor:
        """The `count` vertices of highest in-degree (ties: the lower id first)."""
        degree = np.diff(np.asarray(indptr, dtype=np.int64))
        order = np.argsort(-degree, kind="stable")[: min(count, degree.size)]
        return torch.from_numpy(np.sort(order))

    @property
    def num_rows(self) -> int:
        return int(self.rows.shape[0])

    def lookup(self, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(each vertex's cache slot or -1, the vertices missing): what must still be fetched."""
        slots = self.slot[nodes]
        return slots, nodes[slots < 0]

    def assemble(self, slots: torch.Tensor, missing_rows: torch.Tensor) -> torch.Tensor:
        """The input rows in the minibatch's order, on the cache's device: cached rows from
        the cache, the others from `missing_rows` (in the order `lookup` listed them)."""
        slots = slots.to(self.rows.device)
        found = slots >= 0
        x = self.rows.new_empty((slots.numel(), self.rows.shape[1]))
        x[found] = self.rows[slots[found]]
        x[~found] = missing_rows.to(self.rows.device, self.rows.dtype)
        return x
