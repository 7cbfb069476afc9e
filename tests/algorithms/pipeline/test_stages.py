"""The bounded stage chain on its own: order, capacities, inline stages, failures, stopping."""

from __future__ import annotations

import threading
import time

import pytest

from gnnrun.algorithms.pipeline.stages import Stage, StagePipeline


def drain(pipeline: StagePipeline) -> list:
    out = []
    while True:
        try:
            out.append(pipeline.take())
        except StopIteration:
            return out


@pytest.mark.parametrize("capacities", [(0, 0, 0), (1, 1, 1), (3, 0, 2), (0, 2, 0)])
def test_items_come_out_in_order_through_every_stage(capacities):
    stages = [
        Stage("a", capacities[0], lambda x: x + [0]),
        Stage("b", capacities[1], lambda x: x + [1]),
        Stage("c", capacities[2], lambda x: x + [2]),
    ]
    pipeline = StagePipeline(iter([[i] for i in range(20)]), stages)
    assert drain(pipeline) == [[i, 0, 1, 2] for i in range(20)]
    stats = pipeline.take_stats()
    assert all(stats[s.name]["items"] == 20 for s in stages)
    assert not any(t.is_alive() for t in pipeline.threads)


def test_a_full_buffer_blocks_its_stage_at_its_capacity():
    produced = []

    def work(x):
        produced.append(x)
        return x

    pipeline = StagePipeline(iter(range(100)), [Stage("a", 3, work), Stage("b", 2, work)])
    time.sleep(0.3)  # nothing is taken: the stages fill their buffers and stop
    stats = pipeline.take_stats()
    assert stats["a"]["max_held"] == 3 and stats["b"]["max_held"] == 2
    # Each blocked stage keeps in hand the item it cannot put: b made 2 + 1, a made
    # those 3, the 3 its buffer holds and the 1 in its hand.
    assert len(produced) == (2 + 1) + (3 + 3 + 1)
    assert stats["a"]["blocked_s"] > 0
    assert drain(pipeline) == list(range(100))


def test_a_stage_failure_reaches_the_consumer_after_the_items_before_it():
    def work(x):
        if x == 5:
            raise ValueError("bad item 5")
        return x

    pipeline = StagePipeline(iter(range(10)), [Stage("a", 2, work), Stage("b", 2, lambda x: x)])
    assert [pipeline.take() for _ in range(5)] == list(range(5))
    with pytest.raises(ValueError, match="bad item 5"):
        pipeline.take()
    pipeline.close()
    assert not any(t.is_alive() for t in pipeline.threads)


def test_close_stops_stages_that_wait_for_room():
    pipeline = StagePipeline(iter(range(1000)), [Stage("a", 1, lambda x: x)])
    time.sleep(0.1)
    start = time.monotonic()
    pipeline.close()
    assert time.monotonic() - start < 1.0
    assert not any(t.is_alive() for t in pipeline.threads)


def test_stages_start_in_their_own_threads():
    names = []
    pipeline = StagePipeline(
        iter(range(3)),
        [Stage("a", 1, lambda x: x, start=lambda: names.append(threading.current_thread().name))],
    )
    drain(pipeline)
    assert names == ["pipeline-a"]


def test_workers_hand_items_on_in_order_whichever_finishes_first():
    """Item i sleeps longer the smaller i mod 4: later items finish first, and still come
    out after the earlier ones; the four workers really work at the same time."""
    busy, most_busy, lock = [0], [0], threading.Lock()

    def work(x):
        with lock:
            busy[0] += 1
            most_busy[0] = max(most_busy[0], busy[0])
        time.sleep(0.004 * (4 - x % 4))
        with lock:
            busy[0] -= 1
        return x

    stages = [Stage("a", 2, work, workers=4), Stage("b", 1, lambda x: -x)]
    pipeline = StagePipeline(iter(range(40)), stages)
    assert drain(pipeline) == [-i for i in range(40)]
    assert most_busy[0] == 4
    assert pipeline.take_stats()["a"]["items"] == 40
    assert len(pipeline.threads) == 5 and not any(t.is_alive() for t in pipeline.threads)


def test_a_worker_s_failure_comes_in_its_item_s_turn():
    def work(x):
        if x == 7:
            raise ValueError("bad item 7")
        time.sleep(0.002 * (x % 3))
        return x

    pipeline = StagePipeline(iter(range(30)), [Stage("a", 3, work, workers=3)])
    assert [pipeline.take() for _ in range(7)] == list(range(7))
    with pytest.raises(ValueError, match="bad item 7"):
        pipeline.take()
    pipeline.close()
    assert not any(t.is_alive() for t in pipeline.threads)


def test_each_worker_runs_the_stage_s_start_and_a_worker_needs_a_buffer():
    names = []
    pipeline = StagePipeline(
        iter(range(3)),
        [
            Stage(
                "a",
                1,
                lambda x: x,
                start=lambda: names.append(threading.current_thread().name),
                workers=2,
            )
        ],
    )
    assert drain(pipeline) == [0, 1, 2]
    assert sorted(names) == ["pipeline-a-0", "pipeline-a-1"]
    with pytest.raises(ValueError, match="2 workers need a capacity above 0"):
        Stage("a", 0, lambda x: x, workers=2)
