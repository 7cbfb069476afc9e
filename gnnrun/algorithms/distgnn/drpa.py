"""DistGNN's Delayed Remote Partial Aggregates (DRPA) between the clones of split vertices.

On a vertex-cut part every edge lives in exactly one part, so aggregating over
a part's own edges gives a split vertex only a *partial* sum. DRPA completes it
over a 1-level tree per split vertex: the leaves send their partial sums to
the root (phase 1), the root adds them up and sends each leaf what the other
clones contributed (phase 2). Both phases are one all-to-all-v each, batched
over every split vertex of the layer; a gather before and a scatter-add after
are DistGNN's pre- and post-processing.

What a clone adds to its own partial sum is its *remote* sum: the partial sums
of its other clones. With `delay` r (cd-r), the remote sums used at epoch t are
those sent at epoch t - r, so an exchange started in epoch t has r epochs of
compute to hide behind, split between its phases: phase 2 starts at the end of
epoch t + ceil(r / 2) - 1 (every rank at the same point, so the collectives
pair up), and the remote sums are waited for when they are due. Until the first
exchange arrives a clone has only its local sum (0c). The share of the
exchanges' time in flight that no rank spent waiting for them is reported per
epoch as `comm_hidden`. With `bins` b, only the split vertices with `vertex id % b ==
epoch % b` exchange at an epoch; the others keep the remote sum they last
received. `delay=0, bins=1` is cd-0 (exact); no exchange at all is 0c.

That reading (`semantics="fresh"`) is fresher than DistGNN's released code,
offered as `semantics="released"`: there a leaf's aggregate is *replaced* by
the vertex's total as its root summed it `delay` epochs ago (so phase 2 sends
totals), a root adds its leaves' partial sums, and only the bin whose exchange
falls due at an epoch is completed; the other split vertices keep their local
sums that epoch.

The remote sums are added to the partial sums in place, and each bin keeps the
result of its last exchange as it arrived (rows in link order): with most
clones split, every copy of the sums costs about as much as the local
aggregation itself, so none is made that the sums do not need.

The gradient of an aggregation is an aggregation over the transposed graph, so
partial gradients can be completed the same way. By default (`autograd`) the
backward pass is the gradient of the forward pass as it ran: remote sums that
arrived from an earlier epoch are constants, so only an exchange made in this
same epoch (delay 0) completes gradients, synchronously. `delayed` completes
gradients like the forward pass, with their own delayed state; it feeds each
clone's gradient back to the others `delay` epochs late, and that loop makes
training oscillate (docs/algorithms/distgnn.md). Every call is one *slot*
(direction, call number within the epoch); all ranks make the same calls in
the same order, which is what pairs up their collectives.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gnnrun.comm import Communicator
from gnnrun.errors import GnnrunError
from gnnrun.partition.book import Part
from gnnrun.timers import PhaseTimer

# Version of `state_dict`'s layout: 2 keeps each bin's last exchange as it arrived.
STATE_FORMAT = 2


class CloneTree:
    """This rank's side of the 1-level trees of its split vertices.

    From the part's `clone_links` (rows: my local id, other part, other local id,
    sorted by other part, then vertex id, in the same order on both sides):
    a leaf clone has one link, to its root; a root clone one link per leaf.
    """

    def __init__(self, part: Part, rank: int, world_size: int, bins: int = 1) -> None:
        links = np.asarray(part["clone_links"], dtype=np.int64).reshape(-1, 3)
        nodes = np.asarray(part["nodes"], dtype=np.int64)
        root_part = np.asarray(part["root_part"], dtype=np.int64)
        mine, other = links[:, 0], links[:, 1]
        leaf = root_part[mine] != rank
        # Local ids of this rank's split clones; every link row refers to one of them.
        self.split_local = torch.from_numpy(np.unique(mine))

        def links_of(chosen: np.ndarray) -> BinLinks:
            return BinLinks.build(mine, other, leaf, chosen, world_size)

        self.bins = [links_of(nodes[mine] % bins == b) for b in range(bins)]
        self.everything = links_of(np.ones(mine.size, dtype=bool))

    def to(self, device: torch.device) -> CloneTree:
        """The tree's index arrays on `device` (a GPU rank's), where the partial sums are."""
        self.split_local = self.split_local.to(device)
        self.bins = [links.to(device) for links in self.bins]
        self.everything = self.everything.to(device)
        return self

    @property
    def device(self) -> torch.device:
        return self.split_local.device

    @property
    def num_split(self) -> int:
        return int(self.split_local.numel())


@dataclass
class BinLinks:
    """The link rows of one bin of split vertices, by direction, with each phase's counts."""

    leaf_local: torch.Tensor  # local id of each leaf link's clone, grouped by root part
    leaf_counts: list[int]  # leaf links per root part: phase-1 send, phase-2 receive
    root_counts: list[int]  # root links per leaf part: phase-1 receive, phase-2 send
    roots_local: torch.Tensor  # local ids of the bin's root clones
    root_of_link: torch.Tensor  # for each root link, its root's position in roots_local
    result_local: torch.Tensor  # local ids of an exchange's result rows: leaf links, then roots

    @classmethod
    def build(cls, mine, other, leaf, chosen, world_size) -> BinLinks:
        leaves, roots = leaf & chosen, ~leaf & chosen
        roots_local, root_of_link = np.unique(mine[roots], return_inverse=True)
        return cls(
            leaf_local=torch.from_numpy(mine[leaves]),
            leaf_counts=np.bincount(other[leaves], minlength=world_size).tolist(),
            root_counts=np.bincount(other[roots], minlength=world_size).tolist(),
            roots_local=torch.from_numpy(roots_local),
            root_of_link=torch.from_numpy(root_of_link.reshape(-1)),
            result_local=torch.from_numpy(np.concatenate([mine[leaves], roots_local])),
        )

    @property
    def num_leaf_links(self) -> int:
        return int(self.leaf_local.numel())

    def to(self, device: torch.device) -> BinLinks:
        return BinLinks(
            self.leaf_local.to(device),
            self.leaf_counts,
            self.root_counts,
            self.roots_local.to(device),
            self.root_of_link.to(device),
            self.result_local.to(device),
        )


@dataclass
class Exchange:
    """One DRPA exchange of one bin: started at `epoch`, in phase 1, then 2, then done.

    It holds only its bin's rows: the leaves' partial sums in flight, the roots'
    own partial sums, and at the end the remote sums it delivers.
    """

    epoch: int
    direction: str  # fwd | bwd | exact: names its timer phases (rat_<direction>_pre, ...)
    links: BinLinks
    roots_own: torch.Tensor | None  # [roots, width] the roots' partial sums at the start
    received: torch.Tensor | None  # phase 1: the leaves' partial sums at their roots
    work: Any = None
    sending: torch.Tensor | None = None  # kept alive until `work` is waited for
    # Phase 2 on: [leaf links + roots, width], the remote sums of `links.result_local`;
    # the leaves' rows arrive from their roots, the roots' rows are summed here.
    remote: torch.Tensor | None = None
    done: bool = False
    totals: bool = False  # phase 2 sends leaves the vertex's total (released semantics)
    timed: Any = None  # the phase's completion callback, which adds to in_flight_s
    in_flight_s: float = 0.0  # each phase from its post until it completed, summed
    waited_s: float = 0.0  # what this rank spent blocked on it

    @property
    def in_phase1(self) -> bool:
        return self.remote is None


@dataclass
class _Slot:
    """The delayed state of one call site: the remote sums in use and the exchanges in flight."""

    # Per bin, its last exchange's (local ids, remote sums): what the clones add.
    latest: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    in_flight: list[Exchange] = field(default_factory=list)


class DelayedRemoteAggregates:
    """Completes partial aggregates of split vertices; set as a vertex-cut Block's `completion`.

    `delay=None` never exchanges during training (0c). `exact()` switches to a
    synchronous exchange of every split vertex (evaluation, degrees). cd-0
    (`delay=0`, one bin) keeps no state between calls; cd-r keeps, per slot,
    the last remote sum of every split clone and the exchanges in flight.
    `backward` chooses how gradients complete under cd-r: `autograd` (the
    gradient of the forward pass as it ran: only this epoch's exchange, when
    the delay is 0, completes them), `delayed` (the same way as the forward
    pass) or `exact` (synchronously, every split vertex, as DistGNN's
    released code does).
    """

    def __init__(
        self,
        tree: CloneTree,
        comm: Communicator,
        timer: PhaseTimer,
        delay: int | None,
        num_bins: int = 1,
        backward: str = "autograd",
        semantics: str = "fresh",
    ) -> None:
        if len(tree.bins) != num_bins:
            raise ValueError("the clone tree was built for another number of bins")
        self.tree, self.comm, self.timer = tree, comm, timer
        self.delay, self.num_bins = delay, num_bins
        self.backward, self.semantics = backward, semantics
        forward = "local" if delay is None else "delayed" if self.keeps_state else "now"
        # How each direction completes: now (synchronously, every split vertex),
        # this_bin (synchronously, this epoch's bin), delayed, or local (not at all).
        differentiated = "this_bin" if delay == 0 else "local"  # sums exchanged this epoch
        self._how = {
            "fwd": forward,
            "bwd": {"autograd": differentiated, "delayed": forward, "exact": "now"}[backward],
        }
        self.epoch = 0
        # Phase 2 of an exchange started at epoch t starts at the end of this epoch.
        self._phase2_after = 0 if not delay else -(-delay // 2) - 1
        self._in_flight_s = self._waited_s = 0.0  # training exchanges finished this epoch
        self._calls = {"fwd": 0, "bwd": 0}
        self._slots: dict[tuple[str, int], _Slot] = {}
        self._exact = False
        self._replaced: list[torch.Tensor] = []  # released: leaf rows the last call replaced

    def completes(self, direction: str) -> str:
        """How training calls in `direction` (fwd, bwd) complete: now, this_bin, delayed
        or local."""
        return self._how[direction]

    @property
    def keeps_state(self) -> bool:
        """Whether remote sums outlive an epoch (delayed or binned exchanges)."""
        return self.delay is not None and (self.delay > 0 or self.num_bins > 1)

    # ------------------------------------------------------------------ driving

    def bins_in_use(self, epoch: int) -> tuple[int, ...]:
        """The bins whose remote sums are in use at `epoch`.

        Bin k first exchanges at epoch k and its sums arrive `delay` epochs later;
        `fresh` keeps using them, `released` uses only the bin falling due.
        """
        if self.delay is None or epoch < self.delay:
            return ()
        if self.semantics == "released":
            return ((epoch - self.delay) % self.num_bins,)
        return tuple(range(min(self.num_bins, epoch - self.delay + 1)))

    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._calls = {"fwd": 0, "bwd": 0}

    def end_epoch(self) -> dict[str, float]:
        """Move the exchanges whose phase 1 has had its share of the delay to phase 2, and
        finish those whose phase 2 has arrived: their send buffers (a copy of every
        exchanged row) need not wait until the remote sums are due. Returns the share of
        in-flight time hidden behind compute for the exchanges finished this epoch."""
        for slot in self._slots.values():
            for exchange in slot.in_flight:
                if exchange.in_phase1:
                    if exchange.epoch + self._phase2_after <= self.epoch:
                        self._start_phase2(exchange)
                elif exchange.work is None or exchange.work.is_completed():
                    self._finish(exchange)
        stats = {}
        if self._in_flight_s > 0:
            stats["comm_hidden"] = max(0.0, 1.0 - self._waited_s / self._in_flight_s)
        self._in_flight_s = self._waited_s = 0.0
        return stats

    @contextlib.contextmanager
    def exact(self) -> Iterator[None]:
        """Within: every call exchanges all split vertices synchronously (cd-0), no state kept."""
        saved, self._exact = self._exact, True
        try:
            yield
        finally:
            self._exact = saved

    def __call__(self, partial: torch.Tensor) -> torch.Tensor:
        """partial + the remote sums in use, in place: `partial` must be a fresh sum."""
        return _Complete.apply(partial, self)

    def local_phase(self) -> contextlib.AbstractContextManager:
        """Times the local aggregation that precedes a completion (DistGNN's LAT)."""
        return self.timer.phase("lat_exact" if self._exact else "lat_fwd")

    def complete_now(self, partial: torch.Tensor) -> torch.Tensor:
        """Full sums of `partial` (no autograd, no state): for degrees and other one-off sums."""
        with self.exact():
            return self._complete("exact", partial.clone())

    # ----------------------------------------------------------------- a slot

    def _complete(self, direction: str, values: torch.Tensor) -> torch.Tensor:
        """Adds the remote sums this call uses to `values`, in place."""
        tree = self.tree
        how = "now" if self._exact else self._how[direction]
        if how == "local":
            return values  # 0c
        if how in ("now", "this_bin"):
            links = tree.everything if how == "now" else tree.bins[self.epoch % self.num_bins]
            exchange = self._start(links, values, "exact" if self._exact else direction)
            self._finish(exchange)
            with self.timer.phase(f"rat_{exchange.direction}_post"):
                return values.index_add_(0, exchange.links.result_local, exchange.remote)
        key = (direction, self._calls[direction])
        self._calls[direction] += 1
        slot = self._slots.setdefault(key, _Slot())
        exchange = self._start(tree.bins[self.epoch % self.num_bins], values, direction)
        exchange.totals = self.semantics == "released"
        slot.in_flight.append(exchange)
        due = [e for e in slot.in_flight if e.epoch + self.delay <= self.epoch]
        slot.in_flight = [e for e in slot.in_flight if e.epoch + self.delay > self.epoch]
        for exchange in due:
            self._finish(exchange)
            if self.semantics == "fresh":
                slot.latest[exchange.epoch % self.num_bins] = (
                    exchange.links.result_local,
                    exchange.remote,
                )
        with self.timer.phase(f"rat_{direction}_post"):
            if self.semantics == "released":
                for exchange in due:  # a leaf takes its root's total, a root adds its leaves'
                    links, leaves = exchange.links, exchange.links.num_leaf_links
                    values.index_copy_(0, links.leaf_local, exchange.remote[:leaves])
                    values.index_add_(0, links.roots_local, exchange.remote[leaves:])
                    self._replaced.append(links.leaf_local)
            for local_ids, sums in slot.latest.values():
                values.index_add_(0, local_ids, sums)
            return values

    # ------------------------------------------------------------- the phases

    def _start(self, links: BinLinks, values: torch.Tensor, direction: str) -> Exchange:
        """Phase 1: every leaf sends its partial sum to its root (asynchronously)."""
        with self.timer.phase(f"rat_{direction}_pre"):
            values = values.detach()
            send = values.index_select(0, links.leaf_local)
            roots_own = values.index_select(0, links.roots_local)
            received = values.new_empty((sum(links.root_counts), *values.shape[1:]))
        exchange = Exchange(self.epoch, direction, links, roots_own, received, sending=send)
        self._post(exchange, received, send, links.root_counts, links.leaf_counts)
        return exchange

    def _start_phase2(self, exchange: Exchange) -> None:
        """The root adds up its leaves' partial sums and sends each leaf the others' share."""
        links = exchange.links
        own, received = exchange.roots_own, exchange.received
        self._wait(exchange)
        with self.timer.phase(f"rat_{exchange.direction}_post"):
            remote = own.new_empty((links.num_leaf_links + own.shape[0], *own.shape[1:]))
            # A root's remote sum: its leaves' partial sums.
            roots_remote = remote[links.num_leaf_links :].zero_()
            roots_remote.index_add_(0, links.root_of_link, received)
        with self.timer.phase(f"rat_{exchange.direction}_pre"):
            # A leaf's remote sum: the vertex's total less the leaf's own partial sum
            # (or the total, which replaces the leaf's aggregate under `released`).
            total = own.add_(roots_remote)
            send = total.index_select(0, links.root_of_link)
            if not exchange.totals:
                send.sub_(received)
        exchange.roots_own = exchange.received = None
        exchange.remote, exchange.sending = remote, send
        self._post(
            exchange, remote[: links.num_leaf_links], send, links.leaf_counts, links.root_counts
        )

    def _finish(self, exchange: Exchange) -> None:
        if exchange.done:
            return
        if exchange.in_phase1:
            self._start_phase2(exchange)
        self._wait(exchange)
        exchange.done = True
        if not self._exact:
            self._in_flight_s += exchange.in_flight_s
            self._waited_s += exchange.waited_s

    def _post(self, exchange: Exchange, out, inp, out_counts, in_counts) -> None:
        """Starts one phase's all-to-all; its time in flight is added when it completes."""
        exchange.work = self._all_to_all(out, inp, out_counts, in_counts)
        if exchange.work is not None:
            posted = time.perf_counter()

            def landed(_future) -> None:
                exchange.in_flight_s += time.perf_counter() - posted

            # A backend without futures leaves comm_hidden unreported.
            with contextlib.suppress(RuntimeError, NotImplementedError):
                exchange.timed = exchange.work.get_future().then(landed)

    def _all_to_all(self, out, inp, out_counts, in_counts):
        if not self.comm.distributed:
            return None  # one rank: no split vertices, nothing to send
        row = int(np.prod(inp.shape[1:])) if inp.dim() > 1 else 1
        purpose = "drpa_exact" if self._exact else "drpa"  # evaluation and degrees: exact
        self.comm.bytes.add(purpose, inp.numel() * inp.element_size())
        return self.comm.all_to_all_start(
            out.view(-1),
            inp.reshape(-1),
            [c * row for c in out_counts],
            [c * row for c in in_counts],
        )

    def _wait(self, exchange: Exchange) -> None:
        if exchange.work is not None:
            start = time.perf_counter()
            with self.timer.phase(f"rat_{exchange.direction}_wait"), self.comm.blocked():
                exchange.work.wait()
            exchange.waited_s += time.perf_counter() - start
            if exchange.timed is not None:
                exchange.timed.wait()  # its callback has added the time in flight
            exchange.work = exchange.sending = exchange.timed = None

    # ------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Per slot, the remote sums in use and the finished exchanges not yet due; with
        the settings that shaped them, which a resumed run must share."""
        slots = {}
        for key, slot in self._slots.items():
            for exchange in slot.in_flight:
                self._finish(exchange)
            # On the CPU: a run resumes on GPU or CPU ranks alike.
            slots[key] = {
                "latest": {b: sums.cpu() for b, (_, sums) in slot.latest.items()},
                "pending": [(e.epoch, e.remote.cpu()) for e in slot.in_flight],
            }
        return {"format": STATE_FORMAT, "settings": self._settings(), "slots": slots}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved_settings = state.get("settings") if state.get("format") == STATE_FORMAT else None
        if saved_settings is None:
            raise GnnrunError(
                "the checkpoint's cdr state was written by an older gnnrun (before "
                "2026-11-23) and cannot be resumed: start again without train.resume"
            )
        # `delay_epochs` was `delay` before 2026-11-24; `semantics` came on 2026-11-25.
        saved_settings = {
            "semantics": "fresh",
            **{("delay_epochs" if k == "delay" else k): v for k, v in saved_settings.items()},
        }
        if saved_settings.get("backward") == "local" and self.delay != 0:
            # `autograd`'s name before 2026-11-23 (it then never completed gradients,
            # which is what autograd does at every delay but 0): the same run goes on.
            saved_settings = {**saved_settings, "backward": "autograd"}
        if saved_settings != self._settings():
            changed = ", ".join(
                f"algorithm.{name}={saved_settings.get(name)} (now {value})"
                for name, value in self._settings().items()
                if saved_settings.get(name) != value
            )
            raise GnnrunError(
                f"the checkpoint's cdr state was made with {changed}: resume with the "
                "checkpoint's settings, or start again without train.resume"
            )
        bins, device = self.tree.bins, self.tree.device
        self._slots = {}
        for key, saved in state["slots"].items():
            slot = _Slot(
                {b: (bins[b].result_local, sums.to(device)) for b, sums in saved["latest"].items()}
            )
            for epoch, remote in saved["pending"]:
                remote = remote.to(device)
                links = bins[epoch % self.num_bins]
                slot.in_flight.append(
                    Exchange(
                        epoch,
                        key[0],
                        links,
                        None,
                        None,
                        remote=remote,
                        done=True,
                        totals=self.semantics == "released",
                    )
                )
            self._slots[key] = slot

    def _settings(self) -> dict[str, Any]:
        return {
            "delay_epochs": self.delay,
            "bins": self.num_bins,
            "backward": self.backward,
            "semantics": self.semantics,
        }


class _Complete(torch.autograd.Function):
    """y = partial + remote sums; the gradient is completed across clones the same way.

    The forward pass adds into `partial` (a fresh sum nobody else holds). The
    backward pass must not: autograd may hand the same gradient tensor to
    several functions (an addition passes its gradient to both operands).
    """

    @staticmethod
    def forward(ctx, partial: torch.Tensor, drpa: DelayedRemoteAggregates) -> torch.Tensor:
        ctx.drpa = drpa
        ctx.mark_dirty(partial)
        drpa._replaced = []
        out = drpa._complete("fwd", partial)
        ctx.replaced = drpa._replaced
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        drpa = ctx.drpa
        if drpa.completes("bwd") == "local":
            if ctx.replaced:  # a replaced leaf's aggregate did not depend on its own sum
                grad = grad.clone()
                for rows in ctx.replaced:
                    grad[rows] = 0
            return grad, None
        return drpa._complete("bwd", grad.clone()), None
