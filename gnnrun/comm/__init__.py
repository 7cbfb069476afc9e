"""Collectives the algorithms use, with a count of the bytes each rank sends.

gloo's list-form all_to_all does not take tensors of different sizes, so
every variable-size exchange goes through `all_to_all_single` with split
sizes, the sizes being exchanged first. On GPU ranks the process group has a
backend per device (`cpu:gloo,cuda:nccl`): a collective over CUDA tensors goes
through NCCL, one over CPU tensors (sizes, sampling requests, metrics) through gloo.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from gnnrun.comm.bytes import ByteCounter
from gnnrun.comm.requests import RequestService


@dataclass
class PendingExchange:
    """An all-to-all-v in flight; `wait()` returns the tensors received, one per rank."""

    received: list[torch.Tensor]
    work: Any = None
    sending: torch.Tensor | None = None  # kept alive until the exchange completes
    incoming_counts: torch.Tensor | None = None  # rows from each rank (known at once)
    blocked: Callable[[], AbstractContextManager] = contextlib.nullcontext

    def wait(self) -> list[torch.Tensor]:
        if self.work is not None:
            with self.blocked():
                self.work.wait()
            self.work = self.sending = None
        return self.received


class Communicator:
    """This rank's view of the process group (a 1-rank stand-in when not distributed)."""

    def __init__(
        self, blocked: Callable[[], AbstractContextManager] | None = None, group: Any = None
    ) -> None:
        """`blocked()` is entered around every wait on another rank (the trainer passes
        PhaseTimer.communication, to tell communication time from compute). `group`: the
        process group to talk in (None: the default one)."""
        self.distributed = dist.is_available() and dist.is_initialized()
        self.group = group
        self.rank = dist.get_rank(group) if self.distributed else 0
        self.world_size = dist.get_world_size(group) if self.distributed else 1
        self.bytes = ByteCounter()
        self.blocked = blocked or contextlib.nullcontext

    @property
    def ranks_on_this_machine(self) -> int:
        """The ranks that share this rank's machine, itself included (the launcher's
        LOCAL_WORLD_SIZE; every rank, where no launcher said)."""
        return int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))

    def private_channel(self) -> Communicator:
        """A communicator over the same ranks on a process group of its own (collective:
        every rank calls it, in the same order), for a thread whose collectives must
        neither wait behind nor interleave with this one's. Its bytes are counted apart
        and its waits are not reported to `blocked`."""
        if not self.distributed:
            return Communicator()
        backend = dist.get_backend(self.group)
        # A GPU job's default group is NCCL beside gloo; the pipeline's threads move CPU tensors.
        group = dist.new_group(backend="gloo" if "gloo" in backend else backend)
        return Communicator(group=group)

    def request_service(
        self, handler: Callable[[torch.Tensor], list[torch.Tensor]]
    ) -> RequestService | None:
        """A `RequestService` answering the other ranks' requests with `handler` (collective:
        every rank calls it, in the same order); None when not distributed."""
        return RequestService(handler) if self.distributed else None

    def exchange(self, outgoing: list[torch.Tensor], purpose: str) -> list[torch.Tensor]:
        """All-to-all-v: send outgoing[r] to rank r, receive one tensor from every rank.

        All tensors share dtype and trailing shape; only the first dimension
        varies. The tensor a rank sends to itself is passed through.
        """
        return self.exchange_start(outgoing, purpose).wait()

    def exchange_start(
        self,
        outgoing: list[torch.Tensor],
        purpose: str,
        incoming_counts: torch.Tensor | None = None,
    ) -> PendingExchange:
        """`exchange`, returning at once: the sizes go synchronously (a few bytes per
        rank), the payload asynchronously; `wait()` on the result gives what arrived.

        A second exchange with the same row counts as an earlier one (say, rows
        that go with ids) passes the earlier one's `incoming_counts` and skips the
        size exchange, a synchronous collective.
        """
        if not self.distributed:
            return PendingExchange([outgoing[0]])
        trailing = outgoing[0].shape[1:]
        counts = torch.tensor([t.shape[0] for t in outgoing], dtype=torch.int64)
        size_bytes = 0
        if incoming_counts is None:
            incoming_counts = torch.empty_like(counts)
            with self.blocked():
                dist.all_to_all_single(incoming_counts, counts, group=self.group)
            size_bytes = counts.numel() * 8
        row = int(torch.tensor(trailing).prod()) if len(trailing) else 1
        send = torch.cat([t.reshape(-1) for t in outgoing])
        # GPU tensors travel over NCCL, CPU ones over gloo (the process group has both).
        recv = torch.empty(int(incoming_counts.sum()) * row, dtype=send.dtype, device=send.device)
        incoming = (incoming_counts * row).tolist()
        work = dist.all_to_all_single(
            recv, send, incoming, (counts * row).tolist(), group=self.group, async_op=True
        )
        remote = int(counts.sum() - counts[self.rank]) * row * send.element_size()
        self.bytes.add(purpose, remote + size_bytes)
        parts = [part.view(-1, *trailing) for part in recv.split(incoming)]
        return PendingExchange(parts, work, send, incoming_counts, self.blocked)

    def broadcast_start(self, tensor: torch.Tensor, src: int, purpose: str) -> PendingExchange:
        """Broadcast `tensor` from rank `src` into `tensor` on every other rank, returning at
        once; `wait()` on the result gives [tensor] once it has arrived (or been sent).

        Counted where it arrives: every rank but `src` adds the tensor's bytes, so a
        rank's count is what it received; over all ranks it equals what the roots sent
        (P - 1 copies of each block).
        """
        if not self.distributed:
            return PendingExchange([tensor])
        work = dist.broadcast(tensor, src, group=self.group, async_op=True)
        if self.rank != src:
            self.bytes.add(purpose, tensor.numel() * tensor.element_size())
        return PendingExchange([tensor], work, blocked=self.blocked)

    def all_reduce_mean(self, tensors: list[torch.Tensor], purpose: str = "allreduce") -> None:
        """Average tensors across ranks in place, as one flat bucket."""
        self._all_reduce_bucket(tensors, purpose, average=True)

    def all_reduce_sum_(self, tensors: list[torch.Tensor], purpose: str = "allreduce") -> None:
        """Sum tensors across ranks in place, as one flat bucket."""
        self._all_reduce_bucket(tensors, purpose, average=False)

    def _all_reduce_bucket(self, tensors: list[torch.Tensor], purpose: str, average: bool) -> None:
        if not self.distributed or not tensors:
            return
        flat = torch.cat([t.reshape(-1) for t in tensors])
        with self.blocked():
            dist.all_reduce(flat, group=self.group)
        if average:
            flat /= self.world_size
        # A ring all-reduce sends about 2 (P-1)/P of the bucket per rank.
        self.bytes.add(
            purpose,
            2 * (self.world_size - 1) * flat.numel() * flat.element_size() // self.world_size,
        )
        offset = 0
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()

    def all_reduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            with self.blocked():
                dist.all_reduce(values, group=self.group)
        return values

    def all_reduce_max(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise maximum over ranks, into `values` (returned)."""
        if self.distributed:
            with self.blocked():
                dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.group)
        return values

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `tensor` (same shape and dtype on all), in rank order."""
        if not self.distributed:
            return [tensor]
        every = [torch.zeros_like(tensor) for _ in range(self.world_size)]
        with self.blocked():
            dist.all_gather(every, tensor, group=self.group)
        return every

    def all_gather_object(self, value: Any) -> list[Any]:
        """Every rank's picklable `value`, in rank order."""
        if not self.distributed:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        with self.blocked():
            dist.all_gather_object(gathered, value, group=self.group)
        return gathered

    def exchange_rows(self, rows: torch.Tensor, counts: torch.Tensor, purpose: str) -> torch.Tensor:
        """All-to-all-v of one tensor whose rows are grouped by destination rank, `counts`
        [world] of them to each: the rows received, grouped by the rank they came from.

        `exchange` without the copy into and out of per-rank lists, for exchanges whose
        memory is budgeted (the distributed preparation and partitioning)."""
        if not self.distributed:
            return rows
        incoming = torch.zeros(self.world_size, dtype=torch.int64)
        with self.blocked():
            dist.all_to_all_single(incoming, counts, group=self.group)
        received = torch.empty((int(incoming.sum()), *rows.shape[1:]), dtype=rows.dtype)
        with self.blocked():
            dist.all_to_all_single(
                received,
                rows,
                output_split_sizes=incoming.tolist(),
                input_split_sizes=counts.tolist(),
                group=self.group,
            )
        row = rows[0].numel() * rows.element_size() if rows.shape[0] else 0
        self.bytes.add(purpose, int(counts.sum() - counts[self.rank]) * row + counts.numel() * 8)
        return received

    def all_to_all_start(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_splits: list[int],
        input_splits: list[int],
    ) -> Any:
        """A flat all-to-all-v whose split sizes both sides already know, returning at once:
        the backend's work handle (`wait()`, `get_future()`), or None when not distributed.
        The caller counts its bytes (DRPA counts what it sends, its own share included)."""
        if not self.distributed:
            return None
        return dist.all_to_all_single(
            output, input, output_splits, input_splits, group=self.group, async_op=True
        )

    def barrier(self) -> None:
        if self.distributed:
            with self.blocked():
                dist.barrier(group=self.group)

    def max_int(self, value: int) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        with self.blocked():
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t.item())
