"""A rank's chunk blocks: destinations first, every in-edge, the graph's degrees."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.infer.graph import OwnedGraph
from gnnrun.ops.aggregate import aggregate
from gnnrun.ops.block import Block


def _graph() -> OwnedGraph:
    """4 own vertices and 2 halo ones (local ids 4, 5); in-edges of each own vertex."""
    sources = [[1, 4], [0, 2, 5], [3], [0, 1, 5]]
    indptr = np.cumsum([0] + [len(s) for s in sources])
    return OwnedGraph(
        nodes=np.array([10, 11, 12, 13, 20, 21]),
        indptr=indptr,
        indices=np.concatenate(sources),
        feat=np.zeros((4, 1), np.float32),
        label=np.zeros(4, np.int64),
        splits={},
        halo_owner=np.array([1, 1]),
    )


def test_a_chunk_block_lists_destinations_then_sorted_other_sources():
    graph = _graph()
    in_degrees, out_degrees = torch.tensor([2, 3, 1, 3]), torch.arange(6) + 100
    block = graph.chunk_block(1, 3, in_degrees, out_degrees)  # own vertices 1 and 2
    assert block.num_dst == 2 and block.src_ids.tolist() == [1, 2, 0, 3, 5]
    assert block.src_ids[block.indices].tolist() == [0, 2, 5, 3]  # the rows' sources, in order
    assert block.graph_degrees[0].tolist() == [3, 1]
    assert block.graph_degrees[1].tolist() == [101, 102, 100, 103, 105]
    again = graph.chunk_block(0, 4, in_degrees, out_degrees)  # the maps are reset between chunks
    assert again.src_ids.tolist() == [0, 1, 2, 3, 4, 5]
    assert again.src_ids[again.indices].tolist() == graph.indices.tolist()


def test_chunks_aggregate_as_the_whole_part():
    graph = _graph()
    x = torch.randn(6, 3)
    whole = aggregate(Block(torch.from_numpy(graph.indptr), torch.from_numpy(graph.indices), 6), x)
    degrees = (torch.zeros(4, dtype=torch.int64), torch.zeros(6, dtype=torch.int64))
    parts = [
        aggregate(block, x[block.src_ids])
        for block in (graph.chunk_block(a, b, *degrees) for a, b in graph.chunks(3))
    ]
    assert graph.chunks(3) == [(0, 3), (3, 4)]
    torch.testing.assert_close(torch.cat(parts), whole)
