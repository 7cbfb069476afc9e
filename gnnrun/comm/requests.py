"""Requests to other ranks that their own threads answer: no rank waits for another's loop.

An all-to-all pairs every rank's call with every other rank's, so a rank whose
trainer is slow holds up every other rank's sampler at its next exchange: the
ranks' samplers run in lock-step. A `RequestService` instead runs a server
thread on every rank that answers the other ranks' requests as they come,
whatever its own rank is doing (DistDGL's sampler servers, over
torch.distributed's point-to-point messages):

    client (any rank)                        server thread (the owner)
    send  header [0, n, parts, tag]          recv header from any rank, payload
          + n int64 payload              ->  parts = handler(payload)
    recv  header [len(part) ...] + parts  <- send header, parts (on the ask's tag)

Requests go over one gloo group and replies over another, so that a server's
receive from any rank never takes a reply meant for its own rank's client.
A rank's own requests never go through its server: the caller answers them in
place (`ask` leaves its own entry to the caller).

Several threads of a rank may ask at once (the pipeline's sample workers): each
ask's reply comes on a tag of its own, and a request's header and payload are
sent together, so that no two asks take each other's messages. The bytes sent
and received are booked per asking thread (`take_bytes`), so that each thread
learns its own asks' traffic.

Closing: every rank sends a stop header to every other rank's server, and a
server stops once it has heard all of them, so a server keeps answering until
the last rank that might ask has closed; `close()` waits for that (it is a
barrier over the ranks).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from gnnrun.comm.bytes import ByteCounter

_REQUEST, _STOP, _FAILED = 0, -1, -2
# Tags of a request's two messages (on the requests group); a reply's come on its ask's
# own tag (on the replies group), from _FIRST_REPLY_TAG on, taken in turn and reused after
# _REPLY_TAGS asks (far more than are ever in flight at once).
_HEADER, _PAYLOAD = 1, 2
_FIRST_REPLY_TAG, _REPLY_TAGS = 16, 1 << 20

# A reply part's dtype and trailing shape (the leading size travels in the header).
PartLayout = tuple[torch.dtype, tuple[int, ...]]


class RequestFailed(RuntimeError):
    """A rank's server could not answer (its handler raised; it printed why)."""


class RequestService:
    """This rank's server thread, and its side as a client of the other ranks' servers.

    `handler(payload)` answers one request (an int64 tensor) with a list of
    tensors. Collective to create: every rank creates its services in the same
    order. Any number of threads may `ask` at once.
    """

    def __init__(self, handler: Callable[[torch.Tensor], list[torch.Tensor]]) -> None:
        self.handler = handler
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        # CPU tensors only (a GPU job's default group is NCCL beside gloo).
        self.requests = dist.new_group(backend="gloo")
        self.replies = dist.new_group(backend="gloo")
        self._bytes = threading.local()  # each asking thread's ByteCounter
        self._sending = threading.Lock()  # a request's header and payload go out together
        self._tags = itertools.count()
        self.served = 0  # requests answered by this rank's server (for tests and figures)
        self._thread: threading.Thread | None = None
        if self.world_size > 1:
            self._thread = threading.Thread(target=self._serve, name="request-server", daemon=True)
            self._thread.start()

    def ask(
        self,
        payloads: Sequence[torch.Tensor | None],
        layout: Sequence[PartLayout],
        purposes: tuple[str, str],
        into: dict[int, list[torch.Tensor]] | None = None,
    ) -> PendingAnswers:
        """Send payloads[r] (int64, 1-D) to rank r's server, for every other rank r with a
        payload, and return at once; `wait()` on the result gives each one's reply parts by
        rank (the caller does its own share meanwhile). `layout`: each part's dtype and
        trailing shape. `into[r]`: tensors to receive rank r's parts into (so that they land
        where they are needed, say a pinned buffer: no copy afterwards); their size must be
        that of the reply. Bytes: what this rank sends under purposes[0], what it receives
        under purposes[1] (summed over ranks, the traffic of a collective exchange)."""
        asked = [r for r, p in enumerate(payloads) if p is not None and r != self.rank]
        sending, works = [], []
        with self._sending:
            reply_tag = _FIRST_REPLY_TAG + next(self._tags) % _REPLY_TAGS
            for r in asked:
                payload = payloads[r].to(torch.int64).contiguous()
                header = torch.tensor(
                    [_REQUEST, payload.numel(), len(layout), reply_tag], dtype=torch.int64
                )
                for tensor, tag in ((header, _HEADER), (payload, _PAYLOAD)):
                    works.append(dist.isend(tensor, r, group=self.requests, tag=tag))
                    sending.append(tensor)
                self.thread_bytes().add(purposes[0], (payload.numel() + header.numel()) * 8)
        return PendingAnswers(
            self, asked, layout, purposes[1], into or {}, works, sending, reply_tag
        )

    def thread_bytes(self) -> ByteCounter:
        """The bytes the calling thread's asks sent and received, by purpose."""
        counter = getattr(self._bytes, "counter", None)
        if counter is None:
            counter = self._bytes.counter = ByteCounter()
        return counter

    def take_bytes(self) -> dict[str, int]:
        """The calling thread's bytes since its previous call, by purpose."""
        return self.thread_bytes().reset()

    def close(self, timeout_s: float = 300.0) -> None:
        """Tell every other rank's server that this rank asks no more, and wait (at most
        `timeout_s`) until every other rank has said the same to this one's: the server
        thread must be gone before the process group is (a thread still receiving then
        aborts the process). Ranks that train together close within a step of each other.
        A rank that is failing passes a short one: it leaves the daemon thread behind rather
        than hold up its error while the others wait for it elsewhere."""
        if self._thread is None:
            return
        stop = torch.tensor([_STOP, 0, 0, 0], dtype=torch.int64)
        stops = [
            dist.isend(stop, r, group=self.requests, tag=_HEADER)
            for r in range(self.world_size)
            if r != self.rank
        ]
        self._thread.join(timeout_s)
        self._thread = None
        # A send still in flight when the process group goes away aborts the process: each
        # stop is taken by a server that runs until every rank's stop has come.
        for work in stops:
            try:
                work.wait(timedelta(seconds=timeout_s))
            except RuntimeError:  # that rank is gone: its own error is the one reported
                return

    def _serve(self) -> None:
        try:
            self._answer_until_stopped()
        except RuntimeError:
            # A peer's process ended without a stop (it failed): that rank's error is the
            # one to report, and this rank's own collectives report it here.
            return

    def _answer_until_stopped(self) -> None:
        # Replies go out without waiting for the client to take them: a server that waited
        # could wait on a client that waits on another server that waits on ... (a cycle
        # of four ranks hung). Each reply's tensors are kept until its send completes.
        sending: list[tuple[dist.Work, torch.Tensor]] = []
        stopped = 0
        while stopped < self.world_size - 1:
            header = torch.empty(4, dtype=torch.int64)
            client = dist.recv(header, None, group=self.requests, tag=_HEADER)
            kind, size, num_parts, reply_tag = header.tolist()
            if kind == _STOP:
                stopped += 1
                continue
            payload = torch.empty(size, dtype=torch.int64)
            if size:
                dist.recv(payload, client, group=self.requests, tag=_PAYLOAD)
            try:
                parts = [part.contiguous() for part in self.handler(payload)]
                if len(parts) != num_parts:
                    raise RuntimeError(f"{len(parts)} reply parts for {num_parts} expected")
                sizes = torch.tensor([part.shape[0] for part in parts], dtype=torch.int64)
            except Exception as error:  # noqa: BLE001  the client raises; this rank goes on
                print(f"rank {self.rank}: a request from rank {client} failed: {error!r}")
                parts, sizes = [], torch.full((num_parts,), _FAILED, dtype=torch.int64)
            sending = [(work, t) for work, t in sending if not work.is_completed()]
            for tensor in [sizes, *(p for p in parts if p.numel())]:  # in order, on one tag
                sending.append(
                    (dist.isend(tensor, client, group=self.replies, tag=reply_tag), tensor)
                )
            self.served += 1
        for work, _ in sending:
            work.wait()


class PendingAnswers:
    """Requests on their way; `wait()` receives the answers, by rank."""

    def __init__(self, service, asked, layout, purpose, into, works, sending, tag) -> None:
        self.service, self.asked, self.layout, self.purpose = service, asked, layout, purpose
        self.into, self.works, self.sending, self.tag = into, works, sending, tag

    def wait(self) -> dict[int, list[torch.Tensor]]:
        for work in self.works:
            work.wait()
        self.works = self.sending = []
        replies, answers, failed = self.service.replies, {}, []
        for r in self.asked:
            header = torch.empty(len(self.layout), dtype=torch.int64)
            dist.recv(header, r, group=replies, tag=self.tag)
            if int(header[0]) == _FAILED:
                failed.append(r)  # the others' answers are still taken: their sends must end
                continue
            given = self.into.get(r)
            parts = []
            for i, ((dtype, trailing), rows) in enumerate(
                zip(self.layout, header.tolist(), strict=True)
            ):
                part = torch.empty((rows, *trailing), dtype=dtype) if given is None else given[i]
                if tuple(part.shape) != (rows, *trailing):
                    raise RequestFailed(
                        f"rank {r} answered {rows} rows where {part.shape[0]} were expected"
                    )
                if part.numel():
                    dist.recv(part, r, group=replies, tag=self.tag)
                self.service.thread_bytes().add(self.purpose, part.numel() * part.element_size())
                parts.append(part)
            answers[r] = parts
        if failed:
            ranks = ", ".join(map(str, failed))
            plural = "s" if len(failed) > 1 else ""
            raise RequestFailed(
                f"rank{plural} {ranks} could not answer a request (their log says why)"
            )
        return answers
