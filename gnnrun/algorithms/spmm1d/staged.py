"""MG-GCN's staged 1D product: this rank's rows of Â times a dense matrix split by rows.

Rank i holds row block i of the dense matrix B and of Â, the latter cut into P
column tiles (gnnrun.partition.block1d). C_i = sum over j of Â_ij B_j is
computed in P stages: in stage j, rank j broadcasts B_j and every rank adds
Â_ij B_j into C_i. Rank j's own stage needs no receive: it multiplies its local
tile by its own block while the block is on its way to the others.

With `overlap`, the broadcast of stage j + 1 is issued before the product of
stage j, so that it travels while the tile is multiplied; stage j + 1 receives
into the other of two buffers (double buffering), which the product of stage
j - 1 has finished reading by then. On CPU ranks the broadcasts are gloo's
asynchronous collectives, progressing in gloo's threads; on GPU ranks they run
on NCCL's own stream, each product on the current stream, and waiting on a
broadcast only orders the two streams (the host does not block). Without
`overlap`, each broadcast is issued after the previous stage's product and
waited for at once: the reference for what the overlap hides.

The backward pass multiplies by Â's transpose the same way (`transposed`): its
rows are this rank's columns of Â, stored in the partition when Â is not
symmetric (GCN's normalisation of an undirected graph is).

Phases (gnnrun.timers, reported beside the epoch's additive ones):
`spmm1d_compute` the tile products, `spmm1d_wait` the time blocked on broadcasts
(also booked to `comm`), and on CPU `spmm1d_bcast` each broadcast's time from
issue to arrival, summed (overlapped with compute when `overlap` is on).

`events`, None unless a test sets it to a list, records the order of what a
product does: ("issue", j) when stage j's broadcast is issued, ("product", j) when
stage j's tile product has completed, and ("done", purpose) at the end of each product.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from gnnrun.comm import Communicator, PendingExchange
from gnnrun.ops.spmm import accumulate_product_
from gnnrun.timers import PhaseTimer

# (slot 0 or 1, rows, width) -> the tensor a stage receives into.
Receive = Callable[[int, int, int], torch.Tensor]


@dataclass
class _Stage:
    block: torch.Tensor  # the dense block this stage multiplies
    pending: PendingExchange | None = None  # its broadcast (None: nothing in flight)
    issued: float = 0.0
    arrived: list[float] = field(default_factory=list)  # set from gloo's thread on arrival


class StagedProduct:
    """This rank's rows of Â (and of Â's transpose) times a row-distributed dense matrix."""

    def __init__(
        self,
        tiles: list[torch.Tensor],
        transposed_tiles: list[torch.Tensor],
        block_rows: list[int],
        comm: Communicator,
        timer: PhaseTimer,
        overlap: bool,
    ) -> None:
        self.tiles, self.transposed_tiles = tiles, transposed_tiles
        self.block_rows, self.comm, self.timer, self.overlap = block_rows, comm, timer, overlap
        self.stages = len(block_rows)
        self.events: list | None = None  # the order of issues and products, when a list

    def multiply(
        self,
        local: torch.Tensor,
        out: torch.Tensor,
        receive: Receive,
        purpose: str,
        transposed: bool = False,
    ) -> torch.Tensor:
        """out = (Â or Â^T rows of this rank) @ B, B's rows of this rank being `local`
        (contiguous); stage j receives into `receive(j % 2, rows of block j, width)`."""
        tiles = self.transposed_tiles if transposed else self.tiles
        out.zero_()
        sends: list[_Stage] = []
        following = self._start(0, local, receive, purpose)
        for j in range(self.stages):
            current = following
            if self.overlap and j + 1 < self.stages:
                following = self._start(j + 1, local, receive, purpose)
            if j == self.comm.rank and self.overlap:
                sends.append(current)  # our own block: multiply now, let the send finish later
            else:
                self._wait(current)
            with self.timer.phase("spmm1d_compute"):
                accumulate_product_(out, tiles[j], current.block)
            if self.events is not None:
                self.events.append(("product", j))
            if not self.overlap and j + 1 < self.stages:
                following = self._start(j + 1, local, receive, purpose)
        for stage in sends:
            self._wait(stage)
        if self.events is not None:
            self.events.append(("done", purpose))
        return out

    def _start(self, j: int, local: torch.Tensor, receive: Receive, purpose: str) -> _Stage:
        """Issue stage j's broadcast: rank j sends `local`, the others receive."""
        if self.events is not None:
            self.events.append(("issue", j))
        if self.stages == 1:
            return _Stage(local)
        mine = j == self.comm.rank
        block = local if mine else receive(j % 2, self.block_rows[j], local.shape[1])
        stage = _Stage(block, issued=time.perf_counter())
        stage.pending = self.comm.broadcast_start(block, j, purpose)
        if block.device.type == "cpu":
            stamp = stage.arrived
            stage.pending.work.get_future().then(lambda _: stamp.append(time.perf_counter()))
        return stage

    def _wait(self, stage: _Stage) -> None:
        if stage.pending is None:
            return
        with self.timer.phase("spmm1d_wait"):
            stage.pending.wait()
        if stage.block.device.type == "cpu":
            # gloo may run the callback just after wait() returns: then it arrived by now.
            arrived = stage.arrived[0] if stage.arrived else time.perf_counter()
            self.timer.seconds["spmm1d_bcast"] += arrived - stage.issued
