"""DRPA's all-to-all through /dev/shm on real ranks: the same rows as gloo, in any wait order."""

from __future__ import annotations

import time

import pytest
import torch

from gnnrun.comm import Communicator
from gnnrun.comm.shm import PREFIX, SHM_ROOT
from gnnrun.errors import GnnrunError
from gnnrun.testing import run_on_ranks

pytestmark = pytest.mark.skipif(not SHM_ROOT.is_dir(), reason="no /dev/shm on this machine")


def _rows(rank: int, world: int, exchange: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """Rank r sends (r + d + exchange) % 4 rows of width 5 to rank d (0 for some pairs)."""
    in_rows = [(rank + d + exchange) % 4 for d in range(world)]
    out_rows = [(s + rank + exchange) % 4 for s in range(world)]
    values = [torch.full((n, 5), 1000.0 * exchange + 10 * rank + d) for d, n in enumerate(in_rows)]
    return torch.cat(values), in_rows, out_rows


def three_exchanges(rank: int, world: int, shared_memory: bool) -> dict:
    comm = Communicator(shared_memory=shared_memory, timeout_s=60)
    started = []
    for exchange in range(3):
        inp, in_rows, out_rows = _rows(rank, world, exchange)
        out = torch.empty(sum(out_rows), 5)
        started.append((out, comm.all_to_all_start(out, inp, out_rows, in_rows, "rows")))
    # Waited for last to first, as cd-r consumes exchanges epochs after starting them.
    received = [None] * 3
    for exchange in reversed(range(3)):
        out, work = started[exchange]
        work.wait()
        received[exchange] = out.tolist()
    return {"received": received, "bytes": comm.bytes.reset(), "transport": comm.transport}


def test_shared_memory_delivers_what_gloo_delivers():
    world = 3
    by_shm = run_on_ranks(three_exchanges, world, True)
    by_gloo = run_on_ranks(three_exchanges, world, False)
    for rank in range(world):
        assert by_shm[rank]["transport"] == "shared_memory"
        assert by_gloo[rank]["transport"] == "gloo"
        assert by_shm[rank]["received"] == by_gloo[rank]["received"]
        for exchange, rows in enumerate(by_shm[rank]["received"]):
            expected = [
                [1000.0 * exchange + 10 * source + rank] * 5
                for source in range(world)
                for _ in range((source + rank + exchange) % 4)
            ]
            assert rows == expected
        sent = sum((rank + d + e) % 4 * 5 * 4 for e in range(3) for d in range(world) if d != rank)
        assert by_shm[rank]["bytes"] == by_gloo[rank]["bytes"] == {"rows": sent}
    # Every file was read and removed, and each rank removed the directory at exit.
    assert not list(SHM_ROOT.glob(PREFIX + "*"))


def one_rank_never_sends(rank: int, world: int) -> None:
    comm = Communicator(timeout_s=1)
    inp, in_rows, out_rows = _rows(rank, world, 1)
    out = torch.empty(sum(out_rows), 5)
    work = comm.all_to_all_start(out, inp, out_rows, in_rows, "rows")
    if rank == 0:
        work.wait()  # rank 1 sent its rows; wait for them
        time.sleep(3)  # and keep the directory (removed at exit) past rank 1's timeout
        return
    # Rank 1 starts a second exchange that rank 0 never joins, and waits on it.
    comm.all_to_all_start(out, inp, out_rows, in_rows, "rows").wait()


def test_a_peer_that_never_sends_is_named_after_the_timeout():
    with pytest.raises(GnnrunError, match=r"rank 0 did not send 1\.0-1 within cluster\.timeout_s"):
        run_on_ranks(one_rank_never_sends, 2)
