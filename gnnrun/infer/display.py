"""Progress of layer-wise inference: one bar per rank for the layer it is computing.

Ranks are separate processes; each writes its (layer, steps done, steps)
into its own row of a small memory-mapped board in the work directory, and
rank 0 redraws the bars from it a few times a second.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from gnnrun.progress import bars

BOARD = "progress.npy"


def create_board(work_dir: Path, ranks: int) -> None:
    """The board, before any rank starts (ranks only open it)."""
    np.save(Path(work_dir) / BOARD, np.zeros((ranks, 3), dtype=np.int64))


class ProgressBoard:
    def __init__(self, work_dir: Path, rank: int) -> None:
        self.rows = np.load(Path(work_dir) / BOARD, mmap_mode="r+")
        self.rank = rank

    def update(self, layer: int, done: int, total: int) -> None:
        self.rows[self.rank] = (layer, done, total)


class InferenceDisplay:
    """Rank 0's bars; a context manager around its layers."""

    def __init__(self, work_dir: Path, ranks: int, layers: int, poll_s: float = 0.25) -> None:
        self.board = np.load(Path(work_dir) / BOARD, mmap_mode="r")
        self.layers, self.poll_s = layers, poll_s
        self.progress = bars()
        self.tasks = [self.progress.add_task(f"rank {r}", total=None) for r in range(ranks)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> InferenceDisplay:
        self.progress.start()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.progress.stop()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            for rank, (layer, done, total) in enumerate(np.array(self.board)):
                self.progress.update(
                    self.tasks[rank],
                    description=f"layer {layer + 1}/{self.layers} rank {rank}",
                    completed=int(done),
                    total=int(total) or None,
                )

    def layer_done(self, layer: int, seconds: float, vertices: int) -> None:
        """One line above the bars for each layer this rank finished."""
        rate = vertices / seconds if seconds > 0 else float("inf")
        self.progress.console.print(
            f"layer {layer + 1}/{self.layers}: {seconds:.2f} s on rank 0 ({rate:,.0f} vertices/s)",
            highlight=False,
        )
