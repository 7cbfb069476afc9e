"""The all-to-all-v exchange on real ranks: uneven sizes, and a second exchange that reuses the counts."""

from __future__ import annotations

import torch

from gnnrun.comm import Communicator
from gnnrun.testing import run_on_ranks


def ids_then_rows(rank: int, world: int) -> tuple[list, list, dict[str, int]]:
    comm = Communicator()
    # Rank r sends r + d ids to rank d: every pair of ranks exchanges a different size.
    ids = [torch.arange(rank + d, dtype=torch.int64) + 100 * rank for d in range(world)]
    rows = [i.to(torch.float32)[:, None].repeat(1, 3) for i in ids]
    ids_exchange = comm.exchange_start(ids, "ids")
    rows_exchange = comm.exchange_start(rows, "rows", ids_exchange.incoming_counts)
    got_ids, got_rows = ids_exchange.wait(), rows_exchange.wait()
    return [i.tolist() for i in got_ids], [r.tolist() for r in got_rows], comm.bytes.reset()


def test_rows_follow_their_ids_without_a_second_size_exchange():
    world = 3
    for rank, (ids_from, rows_from, sent) in enumerate(run_on_ranks(ids_then_rows, world)):
        for source in range(world):
            assert ids_from[source] == [100 * source + k for k in range(source + rank)]
            assert rows_from[source] == [[float(i)] * 3 for i in ids_from[source]]
        remote_rows = sum(rank + d for d in range(world) if d != rank)
        assert sent["ids"] == remote_rows * 8 + world * 8  # the ids, and the sizes
        assert sent["rows"] == remote_rows * 3 * 4  # the rows only


def test_ranks_on_this_machine_come_from_the_launcher(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert Communicator().ranks_on_this_machine == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert Communicator().ranks_on_this_machine == 1  # no launcher: every rank, here one
