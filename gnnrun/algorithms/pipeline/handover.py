"""The host buffers a minibatch's input rows are gathered into, reused from minibatch to
minibatch.

DistDGLv2 (section 4.2.1) collects each minibatch's input features, local rows and
rows from the network, into one pinned buffer that the GPU then copies from: one
host copy per byte. The fetch stage takes a buffer here (`take`), gathers this
rank's rows into it and receives the other ranks' rows into it; the device stage
copies it to the device (on a GPU from pinned memory, asynchronously, on its own
CUDA stream), puts the rows in the blocks' order there, and gives the buffer back
(`give_back`) with the event that marks the end of that copy.

A buffer is never handed out again while anything may still read it: it comes
back only once the device stage has issued the last read, and on a GPU `take`
waits for the event of that read before reusing it (the copy was issued one or
more minibatches earlier, so it is normally long done). The pool needs no fixed
size: it holds as many buffers as minibatches are between the two stages at
once (at most the fetch stage's capacity plus the one being filled and the one
being copied). Each buffer is sized to the largest minibatch seen so far and
grown when a larger one comes; pinned memory is slow to allocate, which is
why it is kept.

On a CPU rank the same path runs with ordinary memory: the "device copy" is
nothing, and the reordering is the one copy after the gather. A CPU rank of a
one-rank run gathers the rows in order, so it uses no buffer here: the rows go
straight into the minibatch's own tensor.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

# A new buffer is made this much larger than the minibatch that asked for it, so that the
# next slightly larger minibatch (their sizes vary by a few percent) fits without growing.
HEADROOM = 1.125


@dataclass
class Lease:
    """A buffer lent to one minibatch: `rows` is the view its input rows go into."""

    rows: torch.Tensor
    storage: torch.Tensor  # the whole buffer (bytes)


@dataclass
class HandOverStats:
    """Since the pool was made."""

    buffers: int = 0  # made (a grown buffer counts again)
    grown: int = 0  # free buffers too small for a minibatch, replaced by a larger one
    bytes_allocated: int = 0  # their sizes, summed
    takes: int = 0
    bytes_handed: int = 0  # bytes of the rows the takes asked for
    most_lent: int = 0  # the most buffers lent at once


class HandOverBuffers:
    def __init__(self, pin: bool) -> None:
        self.pin = pin  # page-locked host memory, so that a copy to the GPU is asynchronous
        self._free: list[tuple[torch.Tensor, Any]] = []  # (buffer, event of its last read)
        self._largest = 0  # bytes of the largest minibatch seen
        self._lent = 0
        self._lock = threading.Lock()
        self.stats = HandOverStats()

    def take(self, rows: int, row_shape: tuple[int, ...], dtype: torch.dtype) -> Lease:
        """A buffer for `rows` rows of `row_shape` and `dtype`: a free one that holds them,
        else a new one (the free one that is too small goes)."""
        itemsize = torch.empty(0, dtype=dtype).element_size()
        need = rows * math.prod(row_shape) * itemsize
        with self._lock:
            self._largest = max(self._largest, need)
            self.stats.takes += 1
            self.stats.bytes_handed += need
            self._lent += 1
            self.stats.most_lent = max(self.stats.most_lent, self._lent)
            fits = [i for i, (buffer, _) in enumerate(self._free) if buffer.numel() >= need]
            if fits:
                buffer, last_read = self._free.pop(fits[0])
            else:
                if self._free:  # too small for the minibatches that come: make a larger one
                    self._free.pop(0)
                    self.stats.grown += 1
                buffer, last_read = None, None
                size = math.ceil(self._largest * HEADROOM / itemsize) * itemsize
                self.stats.buffers += 1
                self.stats.bytes_allocated += size
        if last_read is not None:
            last_read.synchronize()  # the device's copy out of it has finished
        if buffer is None:
            buffer = torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
        view = buffer[:need].view(dtype).view(rows, *row_shape)
        return Lease(view, buffer)

    def give_back(self, lease: Lease, last_read: Any = None) -> None:
        """`lease`'s buffer is free again once `last_read` (a CUDA event recorded after the
        device's copy out of it; None: nothing reads it any more) has completed."""
        with self._lock:
            self._lent -= 1
            self._free.append((lease.storage, last_read))

    def take_stats(self) -> dict[str, int]:
        with self._lock:
            return dict(vars(self.stats))
