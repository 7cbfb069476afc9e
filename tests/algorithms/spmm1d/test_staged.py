"""The staged 1D product's order of broadcasts and tile products, on a stand-in communicator
whose broadcasts deliver the other ranks' blocks: with `overlap`, stage j + 1's broadcast
is issued before stage j's product; without, after it."""

from __future__ import annotations

import pytest
import torch

from gnnrun.algorithms.spmm1d.staged import StagedProduct
from gnnrun.comm import PendingExchange
from gnnrun.timers import PhaseTimer

BLOCK_ROWS = [3, 2, 4]


class _Work:
    def wait(self) -> None:
        pass

    def get_future(self) -> _Work:
        return self

    def then(self, callback) -> None:
        callback(None)


class _Broadcasts:
    """Rank `rank` of len(blocks) ranks: a broadcast from rank j copies blocks[j] into the
    receiving tensor."""

    def __init__(self, rank: int, blocks: list[torch.Tensor]) -> None:
        self.rank, self.blocks = rank, blocks

    def broadcast_start(self, tensor: torch.Tensor, src: int, purpose: str) -> PendingExchange:
        if src != self.rank:
            tensor.copy_(self.blocks[src])
        return PendingExchange([tensor], _Work())


def _run(rank: int, overlap: bool) -> tuple[list, torch.Tensor, torch.Tensor]:
    torch.manual_seed(rank)
    rows = BLOCK_ROWS[rank]
    dense_tiles = [(torch.rand(rows, c) < 0.5).float() for c in BLOCK_ROWS]
    blocks = [torch.randn(r, 5) for r in BLOCK_ROWS]
    product = StagedProduct(
        [t.to_sparse_csr() for t in dense_tiles],
        [],
        BLOCK_ROWS,
        _Broadcasts(rank, blocks),
        PhaseTimer(),
        overlap,
    )
    product.events = []
    out = torch.empty(rows, 5)
    product.multiply(blocks[rank], out, lambda _slot, r, w: torch.empty(r, w), "test")
    expected = sum(t @ b for t, b in zip(dense_tiles, blocks, strict=True))
    return product.events, out, expected


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_overlap_issues_the_next_broadcast_before_this_product(rank):
    events, out, expected = _run(rank, overlap=True)
    torch.testing.assert_close(out, expected)
    stages = len(BLOCK_ROWS)
    assert sorted(events[:-1]) == sorted(
        [("issue", j) for j in range(stages)] + [("product", j) for j in range(stages)]
    )
    assert events[-1] == ("done", "test")
    for j in range(stages - 1):
        assert events.index(("issue", j + 1)) < events.index(("product", j)), (j, events)
    # ... and no earlier: stage j + 1 receives into the buffer of stage j - 1's product.
    for j in range(1, stages - 1):
        assert events.index(("product", j - 1)) < events.index(("issue", j + 1)), (j, events)


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_without_overlap_each_broadcast_follows_the_previous_product(rank):
    events, out, expected = _run(rank, overlap=False)
    torch.testing.assert_close(out, expected)
    for j in range(len(BLOCK_ROWS) - 1):
        assert events.index(("product", j)) < events.index(("issue", j + 1)), (j, events)
