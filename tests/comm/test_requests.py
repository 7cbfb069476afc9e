"""Requests answered by every rank's server thread: replies of any size, into given memory,
while the asking rank does its own work, a failed request reported to the asker, and a
close that waits for the other ranks."""

from __future__ import annotations

import threading

import pytest
import torch

from gnnrun.comm import Communicator
from gnnrun.comm.requests import RequestFailed
from gnnrun.errors import GnnrunError
from gnnrun.testing import run_on_ranks

LAYOUT = [(torch.int64, ()), (torch.float32, (2,))]
ROUNDS = 8


def answer(rank: int):
    """Rank `rank`'s handler: for ids, the ids plus 1000 * rank, and a row [id, rank] each."""

    def handler(ids: torch.Tensor) -> list[torch.Tensor]:
        if ids.numel() and int(ids[0]) < 0:
            raise ValueError("a negative id")
        rows = torch.stack([ids.float(), torch.full((ids.numel(),), float(rank))], 1)
        return [ids + 1000 * rank, rows]

    return handler


def ask_every_other_rank(rank: int, world: int) -> dict:
    comm = Communicator()
    service = comm.request_service(answer(rank))
    out = {}
    for round_ in range(ROUNDS):  # several rounds, each rank asking every other at once
        # Rank r asks rank d for r + d + round ids (none of itself; nothing of rank 0
        # in even rounds, so that some ranks are not asked).
        payloads = [
            None
            if d == rank or (d == 0 and round_ % 2 == 0)
            else torch.arange(rank + d + round_, dtype=torch.int64)
            for d in range(world)
        ]
        last = world - 1 if rank != world - 1 else world - 2  # a rank asked every round
        into = {
            last: [
                torch.empty(rank + last + round_, dtype=torch.int64),
                torch.empty(rank + last + round_, 2),
            ]
        }
        pending = service.ask(payloads, LAYOUT, ("asked", "answered"), into=into)
        answers = pending.wait()
        for d, (ids, rows) in answers.items():
            assert torch.equal(ids, payloads[d] + 1000 * d), (rank, d, round_)
            assert torch.equal(rows[:, 1], torch.full((ids.numel(),), float(d)))
        assert answers[last][0].data_ptr() == into[last][0].data_ptr()  # received in place
        out[round_] = sorted(answers)
    sent = service.take_bytes()
    try:
        service.ask([torch.tensor([-1])] * world, LAYOUT, ("asked", "answered")).wait()
        failure = None
    except RequestFailed as error:
        failure = str(error)
    service.close()
    return {"asked": out, "bytes": sent, "failure": failure, "served": service.served}


def test_every_rank_answers_the_others_while_asking_them():
    world = 3
    results = run_on_ranks(ask_every_other_rank, world)
    for rank, result in enumerate(results):
        expected_even = [d for d in range(world) if d not in (rank, 0)]
        assert result["asked"][0] == expected_even
        assert result["asked"][1] == [d for d in range(world) if d != rank]
        # What a rank received: every id back (8 bytes) with its row (8 bytes), every round.
        rows = sum(
            rank + d + r for r in range(ROUNDS) for d in range(world) if d != rank and (d or r % 2)
        )
        assert result["bytes"]["answered"] == rows * 16
        assert result["failure"] is not None and "could not answer" in result["failure"]
        assert result["served"] > 0


def asks_from_several_threads(rank: int, world: int, threads: int) -> list[dict]:
    """`threads` threads of each rank ask every other rank at once, ROUNDS times each, for
    ids of their own: each gets its own answers, and its own asks' bytes."""
    service = Communicator().request_service(answer(rank))
    results: list[dict] = [{} for _ in range(threads)]
    start = threading.Barrier(threads)

    def asker(t: int) -> None:
        start.wait()
        wrong = 0
        for round_ in range(ROUNDS):
            # Thread t's ids say who asked: 100 * t + round, as many as t + round + 1.
            ids = torch.full((t + round_ + 1,), 100 * t + round_, dtype=torch.int64)
            payloads = [None if d == rank else ids for d in range(world)]
            answers = service.ask(payloads, LAYOUT, ("asked", "answered")).wait()
            wrong += sum(not torch.equal(a[0], ids + 1000 * d) for d, a in answers.items())
        results[t] = {"wrong": wrong, "bytes": service.take_bytes()}

    workers = [threading.Thread(target=asker, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    service.close()
    return results


def test_threads_of_a_rank_asking_at_once_each_get_their_own_answers_and_bytes():
    world, threads = 3, 3
    for rank, per_thread in enumerate(run_on_ranks(asks_from_several_threads, world, threads)):
        for t, result in enumerate(per_thread):
            assert result["wrong"] == 0, (rank, t)
            # Each answer: an id (8 bytes) and a row of two float32 (8 bytes), from each of
            # the other ranks; each request: a 4-word header and the ids.
            ids = sum(t + r + 1 for r in range(ROUNDS))
            assert result["bytes"]["answered"] == ids * 16 * (world - 1), (rank, t)
            assert result["bytes"]["asked"] == (ids + 4 * ROUNDS) * 8 * (world - 1), (rank, t)


def asks_a_dead_rank(rank: int, world: int) -> None:
    service = Communicator().request_service(answer(rank))
    if rank == 1:
        raise RuntimeError("rank 1 stops")
    service.ask([None, torch.arange(3)], LAYOUT, ("asked", "answered")).wait()


@pytest.mark.slow  # make test-slow (the pipeline's failing-sampler test covers it end to end)
def test_a_rank_that_dies_fails_the_run_naming_it():
    with pytest.raises(GnnrunError, match="rank 1 failed"):
        run_on_ranks(asks_a_dead_rank, 2, timeout_s=60)
