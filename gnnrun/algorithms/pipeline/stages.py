"""A chain of stages with bounded buffers between them, run ahead of a consumer by threads.

Items come from a finite schedule, go through the stages in order, and are
taken by the consumer (the trainer) with `take()`. A stage of capacity c > 0
runs in a thread of its own and puts each item it finishes into a buffer of at
most c items: it blocks while that buffer is full (its `blocked` time) and
waits while its input is empty (`starved`), so at most c finished items ever
wait after it and the memory of items ahead of the consumer stays bounded. A
stage of capacity 0 has no thread and no buffer: it runs inline, in the thread
that takes from it. All capacities 0 is the synchronous loop.

Threads, not processes: an item moves from stage to stage by reference and is
never copied or serialised; the heavy work (sampling kernels, feature gathers,
collectives) runs in C++ with Python's lock released.

A stage of W > 1 workers (capacity > 0) runs W threads, each taking the next
item from upstream and working on it while the others work on theirs (DistDGLv2's
pool of samplers); finished items enter the buffer in the order they were taken,
so the stage hands them on in schedule order whichever worker ends first. A
worker that finishes ahead of an earlier item waits for it (its blocked time).
Busy, blocked and starved seconds of such a stage are summed over its workers.

An exception in a stage travels downstream in place of its item and is raised
again by `take()`, in the consumer's thread; `close()` stops every thread at its
next item and waits for them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class Stage:
    name: str
    capacity: int  # finished items that may wait after this stage; 0: run inline
    work: Callable[[Any], Any]  # an item of the previous stage (or of the schedule) -> this one's
    # Run first in each of the stage's threads (its settings); the constructor returns
    # after every thread's has run.
    start: Callable[[], None] = lambda: None
    workers: int = 1  # threads working on items at once (capacity > 0 only)

    def __post_init__(self) -> None:
        if self.workers < 1 or (self.workers > 1 and self.capacity == 0):
            raise ValueError(
                f"stage {self.name}: {self.workers} workers need a capacity above 0 "
                "(an inline stage runs in its consumer's thread)"
            )


@dataclass
class StageStats:
    """One stage over a window (see `StagePipeline.take_stats`); seconds of its own thread, or
    of the thread that ran it inline."""

    busy_s: float = 0.0  # working on items
    blocked_s: float = 0.0  # waiting for room in its full buffer
    starved_s: float = 0.0  # waiting for an item from upstream
    items: int = 0
    max_held: int = 0  # the most items its buffer ever held (never above its capacity)
    held_sum: int = 0  # items in its buffer, summed over the consumer's takes
    takes: int = 0

    def as_dict(self) -> dict[str, float]:
        return {
            "busy_s": self.busy_s,
            "blocked_s": self.blocked_s,
            "starved_s": self.starved_s,
            "items": self.items,
            "max_held": self.max_held,
            "mean_held": self.held_sum / self.takes if self.takes else 0.0,
        }


class _End:
    """After a stage's last item."""


@dataclass
class _Failed:
    error: BaseException


class PipelineStopped(Exception):
    """Raised inside a stage's thread when `close()` asks it to stop."""


class _Buffer:
    """At most `capacity` items between a stage's thread and its consumer."""

    def __init__(
        self,
        capacity: int,
        stats: StageStats,
        stats_lock: threading.Lock,
        stopping: threading.Event,
    ) -> None:
        self.capacity, self.stats, self.stats_lock, self.stopping = (
            capacity,
            stats,
            stats_lock,
            stopping,
        )
        self.items: deque[Any] = deque()
        self.changed = threading.Condition()
        self.next_turn = 0  # the place in order of the next item to enter

    def put(self, item: Any, turn: int, always: bool = False) -> None:
        """Add `item`, the stage's `turn`-th (from 0), once every earlier one is in, blocking
        while the buffer is full (`always`: the end or a failure, which holds no data and
        must reach the consumer even past the capacity)."""
        with self.changed:
            start = time.perf_counter()
            while turn != self.next_turn or (len(self.items) >= self.capacity and not always):
                if self.stopping.is_set():
                    raise PipelineStopped
                self.changed.wait(0.1)
            self.items.append(item)
            self.next_turn += 1
            with self.stats_lock:
                self.stats.blocked_s += time.perf_counter() - start
                if not always:
                    self.stats.max_held = max(self.stats.max_held, len(self.items))
            self.changed.notify_all()

    def get(self, stats: StageStats | None) -> Any:
        """The oldest item, waiting while there is none (booked to `stats.starved_s`)."""
        with self.changed:
            start = time.perf_counter()
            while not self.items:
                if self.stopping.is_set():
                    raise PipelineStopped
                self.changed.wait(0.1)
            if stats is not None:
                with self.stats_lock:
                    stats.starved_s += time.perf_counter() - start
            item = self.items.popleft()
            self.changed.notify_all()
            return item

    def held(self) -> int:
        """Minibatches waiting (the end marker or a failure is none)."""
        with self.changed:
            return sum(not isinstance(item, _End | _Failed) for item in self.items)


class StagePipeline:
    """Runs `schedule`'s items through `stages`; `take()` gives them in schedule order."""

    def __init__(self, schedule: Iterator[Any], stages: list[Stage]) -> None:
        self.schedule, self.stages = schedule, stages
        self.stopping = threading.Event()
        self.stats = [StageStats() for _ in stages]
        self.lock = threading.Lock()  # guards the stats against take_stats
        self.buffers = [
            _Buffer(stage.capacity, stats, self.lock, self.stopping) if stage.capacity > 0 else None
            for stage, stats in zip(stages, self.stats, strict=True)
        ]
        # Per stage: the lock its workers take items from upstream under, the turns handed
        # out so far, and whether the end (or a failure) has been taken.
        self.taking = [threading.Lock() for _ in stages]
        self.turns = [0] * len(stages)
        self.ended = [False] * len(stages)
        self.threads = [
            threading.Thread(
                target=self._run,
                args=(i,),
                name=f"pipeline-{stage.name}" + (f"-{w}" if stage.workers > 1 else ""),
                daemon=True,
            )
            for i, stage in enumerate(stages)
            if stage.capacity > 0
            for w in range(stage.workers)
        ]
        self.finished = False
        self._started = threading.Barrier(len(self.threads) + 1)
        for thread in self.threads:
            thread.start()
        self._started.wait()  # every stage has run its `start`

    def take(self) -> Any:
        """The next item out of the last stage; raises a stage's exception, or StopIteration
        after the schedule's last item."""
        if self.finished:
            raise StopIteration
        held = [buffer.held() if buffer is not None else 0 for buffer in self.buffers]
        with self.lock:  # (never while holding a buffer's: put() takes them the other way round)
            for count, stats in zip(held, self.stats, strict=True):
                stats.held_sum += count
                stats.takes += 1
        item = self._pull(len(self.stages) - 1, consumer=True)
        if isinstance(item, _End):
            self.finished = True
            self.close()
            raise StopIteration
        return item

    def take_stats(self) -> dict[str, dict[str, float]]:
        """Each stage's figures since the previous call, by stage name."""
        with self.lock:
            out = {
                s.name: stats.as_dict() for s, stats in zip(self.stages, self.stats, strict=True)
            }
            for stats in self.stats:
                stats.busy_s = stats.blocked_s = stats.starved_s = 0.0
                stats.items = stats.max_held = stats.held_sum = stats.takes = 0
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every stage at its next item and wait (at most `timeout_s` each) for its thread."""
        self.stopping.set()
        for thread in self.threads:
            if thread is not threading.current_thread():
                thread.join(timeout_s)

    # ------------------------------------------------------------------ internals

    def _pull(self, index: int, consumer: bool = False) -> Any:
        """The next item out of stage `index` (-1: the schedule), in the calling thread."""
        if index < 0:
            return next(self.schedule, _End())
        buffer = self.buffers[index]
        if buffer is not None:
            # The stage's thread runs ahead; a thread downstream waits for it (its own
            # starved time), the consumer's wait is the consumer's to measure.
            waiting = None if consumer else self.stats[index + 1]
            item = buffer.get(waiting)
            if isinstance(item, _Failed):
                raise item.error
            return item
        return self._process(index, self._pull(index - 1))

    def _process(self, index: int, item: Any) -> Any:
        if isinstance(item, _End):
            return item
        start = time.perf_counter()
        out = self.stages[index].work(item)
        with self.lock:
            self.stats[index].busy_s += time.perf_counter() - start
            self.stats[index].items += 1
        return out

    def _take_turn(self, index: int) -> tuple[Any, int] | None:
        """The next item from upstream of stage `index` and its turn; None once one of the
        stage's workers has taken the end or failed. A failure upstream comes back as the
        item."""
        start = time.perf_counter()
        with self.taking[index]:
            waited = time.perf_counter() - start  # another worker was taking: starved too
            if self.ended[index]:
                return None
            try:
                item = self._pull(index - 1)
            except PipelineStopped:
                raise
            except BaseException as error:  # noqa: BLE001  delivered in its turn
                item = _Failed(error)
            turn = self.turns[index]
            self.turns[index] += 1
            self.ended[index] = isinstance(item, _End | _Failed)
        with self.lock:
            self.stats[index].starved_s += waited
        return item, turn

    def _run(self, index: int) -> None:
        buffer = self.buffers[index]
        assert buffer is not None
        turn = None
        try:
            try:
                self.stages[index].start()
            finally:
                self._started.wait()
            while not self.stopping.is_set():
                taken = self._take_turn(index)
                if taken is None:
                    return
                item, turn = taken
                if isinstance(item, _End | _Failed):
                    buffer.put(item, turn, always=True)
                    return
                buffer.put(self._process(index, item), turn)
        except PipelineStopped:
            return
        except BaseException as error:  # noqa: BLE001  delivered to the consumer by take()
            with self.taking[index]:  # the stage's workers take no more items
                self.ended[index] = True
                if turn is None:  # its `start` failed: the failure takes the next turn
                    turn = self.turns[index]
                    self.turns[index] += 1
            buffer.put(_Failed(error), turn, always=True)
