"""Per-epoch wall-clock split into the papers' phases, adding up to the epoch.

The trainer times each step's phases: minibatch creation, forward, backward,
gradient all-reduce, optimizer step, plus `sync` for the work at the start and
end of an epoch (the step plan, exchanges still in flight, the loss's
all-reduce). Time a rank spends blocked in a collective (`communication()`,
which the Communicator wraps around every wait) is moved out of the phase it
happened in into `comm`, except inside `ared`, which is communication by
definition, and `eval`, which is reported apart from the training epoch; so
the additive phases below sum to the epoch (`eval` aside), and `comm` shows
what the training phases waited on the network. Algorithms may time finer phases
inside them (DistGNN's `lat_*` and `rat_*`, DistGNN-MB's `hec`): those are
reported too, include any communication within them, and are not added up.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator

import torch

PHASES = ("mbc", "fwd", "bwd", "comm", "ared", "opt", "sync", "eval")
# Phases that keep the collectives inside them (see the module docstring).
KEEPS_COMMUNICATION = ("ared", "comm", "eval")


class PhaseTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: list[str] = []  # phases entered and not yet left, outermost first
        self._communicating = False

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time `name`: an additive phase when no other is open, a finer one inside one."""
        self._open.append(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self._open.pop()

    @contextlib.contextmanager
    def communication(self) -> Iterator[None]:
        """Time spent blocked in a collective: booked to `comm` instead of its phase."""
        if self._communicating:  # a collective made of collectives counts once
            yield
            return
        self._communicating = True
        start = time.perf_counter()
        try:
            yield
        finally:
            self._communicating = False
            seconds = time.perf_counter() - start
            outer = self._open[0] if self._open else None
            if outer not in KEEPS_COMMUNICATION:
                self.seconds["comm"] += seconds
                if outer is not None:
                    self.seconds[outer] -= seconds

    def reset(self) -> dict[str, float]:
        out = {name: self.seconds.get(name, 0.0) for name in PHASES}
        out.update({name: self.seconds[name] for name in sorted(self.seconds) if name not in out})
        self.seconds = defaultdict(float)
        return out


class DeviceBusy:
    """Seconds the rank's compute device spent on the training steps of an epoch, from each
    step's forward to its optimizer step (the gradient all-reduce included): what the
    pipeline must keep fed. On a GPU, CUDA events around each step's kernels, read once
    the epoch ends (reading them earlier would wait for the GPU); on a CPU, the steps' wall
    time. The share of the epoch it covers is the GPU-busy share; the rest is the device
    waiting (for minibatches, for the host launching kernels)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._seconds = 0.0

    def start(self) -> None:
        """A step's device work starts (its forward)."""
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._began = time.perf_counter()

    def stop(self) -> None:
        """The step's device work is all issued (its optimizer step)."""
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._start, end))
        else:
            self._seconds += time.perf_counter() - self._began

    def take(self) -> float:
        """The epoch's busy seconds (synchronising with a GPU), and start afresh."""
        if self._events:
            self._events[-1][1].synchronize()
        seconds = self._seconds + sum(s.elapsed_time(e) for s, e in self._events) / 1000
        self._events, self._seconds = [], 0.0
        return seconds
