"""Per-epoch wall-clock split into the papers' phases."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator

# Minibatch creation (sampling + feature fetch), forward, backward, other
# communication, gradient all-reduce, optimizer step, evaluation: they add up
# to the epoch. Algorithms may time finer phases inside them (DistGNN's local
# aggregation `lat` and remote aggregation `rat_pre` / `rat_wait` / `rat_post`
# within fwd and bwd); those are reported too, but are not added to the epoch.
PHASES = ("mbc", "fwd", "bwd", "comm", "ared", "opt", "eval")


class PhaseTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def reset(self) -> dict[str, float]:
        out = {name: self.seconds.get(name, 0.0) for name in PHASES}
        out.update({name: self.seconds[name] for name in sorted(self.seconds) if name not in out})
        self.seconds = defaultdict(float)
        return out
