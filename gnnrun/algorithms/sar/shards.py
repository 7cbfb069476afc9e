"""Full-batch aggregation over edge-cut parts without halo copies: SAR's sequential
aggregation and rematerialization (Mostafa, MLSys 2022), and the domain-parallel
baseline that shares its code.

A rank owns the solid vertices of its part, and its layers run on a Block over
those vertices alone: the *local shard*, the edges among them. Its other
in-edges are grouped by the part that owns their source, one *remote shard*
per peer: the rows it needs from that peer, listed once at start-up and sent
to the peer (which so learns which of its rows to send), and a CSR from those
rows to their destinations here (`ShardPlan`). The aggregation ops hand such a
Block to its `sharded` aggregation (gnnrun.ops.block.ShardedAggregation):

`SequentialAggregation` (algorithm=sar) aggregates the local shard, then the
remote shards of peers rank+1, rank+2, ... (mod P) one at a time: ring step k
receives the rows this rank needs from rank+k (and sends rank-k the rows it
needs from here), adds them into the output and drops them. With `prefetch`,
step k+1's rows arrive while step k is aggregated: two remote shards at most
are alive at once. The autograd functions keep only local tensors:

- sum and mean (GraphSAGE, GCN): a layer is linear in the aggregated rows, so
  the gradient of a remote row is the sum of its destinations' output
  gradients, computed here and sent back to the row's owner shard by shard;
  nothing is fetched again.
- GAT: the edge softmax streams across shards as online softmax does: per
  destination and head a running maximum, and the denominator and weighted sum
  relative to it, rescaled when a shard raises the maximum; no two shards'
  attention coefficients exist at once. The backward pass fetches each remote
  shard's rows (projected features and source attention terms) again
  (rematerialization), recomputes its coefficients from the saved final
  maximum and denominator, and takes the softmax's gradient from
  sum_j alpha_j (g . h_j) = g . out, which is local.

`DomainParallelAggregation` (algorithm=domain_parallel) fetches every remote
row a layer needs at once, before aggregating, and keeps them for the backward
pass: plain domain-parallel full-batch training, the memory baseline.

Both measure the remote rows alive at once per layer, forward and backward,
and their bytes, from the lifetimes of the buffers the rows arrive in
(`RemoteRows`: weak references to the received tensors, not what the code means to
keep), and count the rows each purpose moved (`RowCounts`); the Communicator
counts the bytes. A strategy hands each shard's rows to a callback (`Visit`)
rather than yielding them, so that no loop variable or cached tuple of the
caller keeps one shard alive while the next is received.

A ring step is one Communicator exchange, an all_to_all_single in which each
rank's only non-empty slices go to rank-k and come from rank+k. Every rank
takes part in every step, in the same order, so a shard with no edges needs no
special case and no rank can wait on a peer that skipped; the row counts are
known from the plan, so no size round precedes the rows; and the exchange
counts bytes per purpose and books its waits as communication.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from gnnrun.comm import Communicator, PendingExchange
from gnnrun.ops.aggregate import local_aggregate, transposed_csr
from gnnrun.ops.block import Block
from gnnrun.partition.book import Part
from gnnrun.partition.edge_cut import local_ids

# ------------------------------------------------------------------------ the plan


@dataclass
class Shard:
    """The in-edges of this rank's vertices whose sources one peer owns."""

    peer: int
    rows: torch.Tensor  # the peer's local ids of the sources, in the order they arrive
    dst: torch.Tensor  # local ids of the destinations with such an edge, increasing
    csr: Block  # in-CSR from the arrived rows (sources) to `dst` (its rows)

    @property
    def num_rows(self) -> int:
        return int(self.rows.numel())

    @property
    def num_edges(self) -> int:
        return self.csr.num_edges

    def aggregate(self, rows: torch.Tensor) -> torch.Tensor:
        """Per entry of `dst`, the sum of the arrived `rows` of its in-edges."""
        return local_aggregate(self.csr, rows, "sum")

    def row_gradients(self, grad_out: torch.Tensor) -> torch.Tensor:
        """The gradient of a sum aggregation for each row: its destinations' gradients summed."""
        return local_aggregate(transposed(self.csr), grad_out[self.dst], "sum")

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(position of the source among the rows, local id of the destination) per edge."""
        return edge_list(self.csr, self.dst)

    def to(self, device: torch.device) -> Shard:
        return Shard(self.peer, self.rows.to(device), self.dst.to(device), self.csr.to(device))


@dataclass
class ShardPlan:
    """This rank's shards: what it receives from each peer and what it sends each peer."""

    rank: int
    world_size: int
    num_local: int
    remote: list[Shard]  # by peer; this rank's own entry has no edges
    send_rows: list[torch.Tensor]  # by peer: the local ids of the rows the peer needs
    in_degrees: torch.Tensor  # of every local vertex in the whole graph
    out_degrees: torch.Tensor  # of every local vertex in the whole graph

    def to(self, device: torch.device) -> ShardPlan:
        """The plan's index arrays on `device` (a GPU rank's), for the rows there."""
        return ShardPlan(
            self.rank,
            self.world_size,
            self.num_local,
            [shard.to(device) for shard in self.remote],
            [rows.to(device) for rows in self.send_rows],
            self.in_degrees.to(device),
            self.out_degrees.to(device),
        )

    @classmethod
    def from_part(
        cls, part: Part, halo_local: np.ndarray, comm: Communicator
    ) -> tuple[ShardPlan, Block]:
        """The plan of an edge-cut part and its local shard, after one exchange with the peers.

        `halo_local`: each halo vertex's local id in its owner's part. The exchange
        tells every peer which of its rows this rank needs, and how many edges leave
        each of them here: their sum over ranks is the out-degree GCN normalises by.
        """
        num_local, world = part.num_solid, comm.world_size
        indptr = torch.from_numpy(np.array(part["indptr"], dtype=np.int64))
        src = torch.from_numpy(np.array(part["indices"], dtype=np.int64))
        dst = torch.repeat_interleave(torch.arange(num_local), indptr[1:] - indptr[:-1])
        local = src < num_local
        local_shard = _csr_of(src[local], dst[local], num_local)
        remote = _remote_shards(
            src[~local] - num_local, dst[~local], np.asarray(part["halo_owner"]), halo_local, world
        )
        send_rows, out_degrees = _exchange_needs(remote, local_shard, comm)
        plan = cls(
            comm.rank,
            world,
            num_local,
            remote,
            send_rows,
            in_degrees=indptr[1:] - indptr[:-1],
            out_degrees=out_degrees,
        )
        return plan, local_shard

    def ahead(self, step: int) -> int:
        """The peer whose rows this rank receives at ring step `step`."""
        return (self.rank + step) % self.world_size

    def behind(self, step: int) -> int:
        """The peer this rank sends its rows to at ring step `step`."""
        return (self.rank - step) % self.world_size

    def step_from(self, peer: int) -> int:
        """The ring step at which this rank receives `peer`'s rows (ahead's inverse)."""
        return (peer - self.rank) % self.world_size

    @property
    def steps(self) -> range:
        return range(1, self.world_size)

    def remote_rows(self) -> int:
        return sum(s.num_rows for s in self.remote)


def _csr_of(src: torch.Tensor, dst: torch.Tensor, num_dst: int) -> Block:
    """A Block of edges given in destination order, over `num_dst` destinations."""
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=indptr[1:])
    return Block(indptr, src.contiguous(), num_dst)


def _remote_shards(
    halo: torch.Tensor,
    dst: torch.Tensor,
    halo_owner: np.ndarray,
    halo_local: np.ndarray,
    world: int,
) -> list[Shard]:
    """One shard per peer from the edges whose sources are halo vertices (`halo`: the
    source's halo index, `dst`: the local destination; in destination order)."""
    halo_owner = halo_owner.astype(np.int64)
    # A peer's rows arrive in halo order (increasing original id); `position` is each
    # halo vertex's place among its owner's rows.
    position = torch.from_numpy(local_ids(halo_owner, world))
    rows_by_peer = torch.from_numpy(
        np.asarray(halo_local, dtype=np.int64)[np.argsort(halo_owner, kind="stable")]
    ).split(np.bincount(halo_owner, minlength=world).tolist())
    owner = torch.from_numpy(halo_owner)[halo]
    by_owner = torch.argsort(owner, stable=True)  # keeps each peer's edges in destination order
    edges_per_peer = torch.bincount(owner, minlength=world).tolist()
    src_by_peer = position[halo][by_owner].split(edges_per_peer)
    dst_by_peer = dst[by_owner].split(edges_per_peer)
    shards = zip(rows_by_peer, src_by_peer, dst_by_peer, strict=True)
    return [_shard(peer, *shard) for peer, shard in enumerate(shards)]


def _shard(peer: int, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> Shard:
    """A shard from its edges (source position among `rows`, local destination), in
    destination order."""
    targets, compact = torch.unique(dst, return_inverse=True)
    csr = _csr_of(src, compact.reshape(-1), int(targets.numel()))
    csr.num_src = int(rows.numel())
    return Shard(peer, rows, targets, csr)


def _exchange_needs(
    remote: list[Shard], local_shard: Block, comm: Communicator
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Send every peer the ids of its rows this rank needs with their edge counts here;
    return what each peer needs from here, and the whole-graph out-degrees."""
    needs = [
        torch.stack([s.rows, torch.bincount(s.csr.indices, minlength=s.num_rows)], 1)
        for s in remote
    ]
    received = comm.exchange(needs, "shard_plan") if comm.distributed else needs
    out_degrees = torch.bincount(local_shard.indices, minlength=local_shard.num_dst)
    send_rows = []
    for peer, asked in enumerate(received):
        asked = asked.reshape(-1, 2)
        if peer == comm.rank:
            asked = asked[:0]
        out_degrees.index_add_(0, asked[:, 0], asked[:, 1])
        send_rows.append(asked[:, 0].contiguous())
    return send_rows, out_degrees


def transposed(block: Block) -> Block:
    """The block's out-CSR as a Block (sources become destinations), kept on the block."""
    cached = getattr(block, "_transposed_block", None)
    if cached is not None:
        return cached
    indptr_t, indices_t = transposed_csr(block)
    result = Block(indptr_t, indices_t, block.num_dst)
    object.__setattr__(block, "_transposed_block", result)
    return result


def edge_list(
    block: Block, dst_ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) of every edge of `block`; destinations mapped through
    `dst_ids` when the block's rows are a subset of the local vertices. Kept on the block."""
    cached = getattr(block, "_edge_list", None)
    if cached is not None:
        return cached
    dst = block.dst_of_edges()
    result = (block.indices.long(), dst if dst_ids is None else dst_ids[dst])
    object.__setattr__(block, "_edge_list", result)
    return result


# ------------------------------------------------------------------- accounting


class RemoteRows:
    """Remote rows alive at once, from the lifetimes of the tensors they arrive in.

    Each tensor of received rows, the one a strategy hands on, is registered when
    its buffer is made (`received`), with a weak reference: it counts as alive until
    the tensor is freed, whoever holds it (a loop variable, a cached tuple, a list
    kept for the backward pass, autograd), not while the code means to keep it. The
    count only rises when a buffer is made, so the peaks are taken then: per layer,
    the rows of that layer's tensors alive at once (forward or backward), and over
    all layers, their bytes.

    Not counted: a view of the rows that a caller makes and keeps instead (the
    callers keep the tensor itself), and the backend's own reference to the
    buffer, which gloo's worker thread drops a moment after the exchange completes
    (the buffer's storage, watched instead, is then freed at a time that depends
    on the thread scheduling).
    """

    def __init__(self) -> None:
        # (tensor, layer, rows, bytes) of every received tensor that may still be alive.
        self._buffers: list[tuple[weakref.ref, int, int, int]] = []
        self.peak: dict[int, int] = {}  # per layer: rows
        self.layer_peak_bytes: dict[int, int] = {}  # per layer: bytes
        self.peak_bytes = 0  # every layer's together

    def received(self, layer: int, rows: torch.Tensor) -> None:
        """`rows`, remote rows for `layer`, now exist (their buffer is made)."""
        size = rows.numel() * rows.element_size()
        self._buffers.append((weakref.ref(rows), layer, int(rows.shape[0]), size))
        alive = self._alive()
        mine = [(n, b) for _, at, n, b in alive if at == layer]
        self.peak[layer] = max(self.peak.get(layer, 0), sum(n for n, _ in mine))
        self.layer_peak_bytes[layer] = max(
            self.layer_peak_bytes.get(layer, 0), sum(b for _, b in mine)
        )
        self.peak_bytes = max(self.peak_bytes, sum(b for _, _, _, b in alive))

    def _alive(self) -> list[tuple[weakref.ref, int, int, int]]:
        self._buffers = [buffer for buffer in self._buffers if buffer[0]() is not None]
        return self._buffers

    def alive_rows(self) -> int:
        """Remote rows of every layer alive now."""
        return sum(n for _, _, n, _ in self._alive())

    def alive_bytes(self) -> int:
        return sum(b for _, _, _, b in self._alive())

    def peaks(self) -> list[int]:
        """The peak of every layer seen since the last reset, input layer first."""
        return [self.peak[layer] for layer in sorted(self.peak)]

    def reset(self) -> None:
        """Peaks start again from what is alive now."""
        self.peak, self.layer_peak_bytes = {}, {}
        for _, layer, rows, size in self._alive():
            self.peak[layer] = self.peak.get(layer, 0) + rows
            self.layer_peak_bytes[layer] = self.layer_peak_bytes.get(layer, 0) + size
        self.peak_bytes = self.alive_bytes()


@dataclass
class RowCounts:
    """Rows each purpose sent and received (the Communicator counts their bytes)."""

    sent: dict[str, int] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)

    def add(self, purpose: str, sent: int, received: int) -> None:
        self.sent[purpose] = self.sent.get(purpose, 0) + sent
        self.received[purpose] = self.received.get(purpose, 0) + received

    def reset(self) -> dict[str, dict[str, int]]:
        counts = {"sent": self.sent, "received": self.received}
        self.sent, self.received = {}, {}
        return counts


# ------------------------------------------------------------------ aggregations

# rows_of(local ids) -> the rows of those vertices that peers receive (gathered on demand,
# so that no copy of every local row is made).
RowsOf = Callable[[torch.Tensor], torch.Tensor]
# gradient_of(shard, its rows or None) -> the gradient of each of the shard's rows.
RowGradients = Callable[[Shard, torch.Tensor | None], torch.Tensor]
# What a forward pass keeps of the remote rows for the backward pass (domain parallel).
Kept = list[tuple[Shard, torch.Tensor]]
# visit(shard, its rows): called once per remote shard. The rows are passed, not
# returned or yielded, so that the strategy decides when they are released: what the
# caller does not keep is freed when visit returns (a loop variable, or the tuple a
# generator or zip hands out, would keep one shard alive while the next is received).
Visit = Callable[[Shard, torch.Tensor], None]


class _ShardedAggregation:
    """What both strategies share: the plan, the ring's exchanges, the counts, the calls
    into the autograd functions. A strategy says how remote rows arrive in the forward
    pass and how the gradients of remote rows go back to their owners."""

    purpose: str  # prefix of the Communicator purposes: <purpose>_forward, _backward, ...
    keeps_rows: bool  # whether the forward pass keeps remote rows for the backward pass

    def __init__(self, plan: ShardPlan, comm: Communicator) -> None:
        self.plan, self.comm = plan, comm
        self.remote_rows = RemoteRows()
        self.rows = RowCounts()
        self._calls = 0

    def begin_pass(self) -> None:
        """A forward pass of the model starts: its aggregations are layers 0, 1, ..."""
        self._calls = 0

    def _next_layer(self) -> int:
        self._calls += 1
        return self._calls - 1

    # The ShardedAggregation protocol (gnnrun.ops.block).

    def aggregate(self, block: Block, x: torch.Tensor, reduce: str) -> torch.Tensor:
        flat = x.reshape(x.shape[0], math.prod(x.shape[1:]))
        keep = torch.is_grad_enabled() and x.requires_grad
        total = _ShardedSum.apply(flat, block, self, self._next_layer(), keep)
        total = total.reshape(x.shape[0], *x.shape[1:])
        if reduce == "sum":
            return total
        degree = self.plan.in_degrees.clamp(min=1).to(x.dtype)
        return total / degree.reshape(-1, *([1] * (x.dim() - 1)))

    def gat_aggregate(
        self,
        block: Block,
        feat_src: torch.Tensor,
        el: torch.Tensor,
        er: torch.Tensor,
        negative_slope: float,
    ) -> torch.Tensor:
        keep = torch.is_grad_enabled() and any(t.requires_grad for t in (feat_src, el, er))
        return _ShardedGAT.apply(
            feat_src, el, er, block, self, self._next_layer(), float(negative_slope), keep
        )

    # The ring.

    def _exchange(
        self, rows: torch.Tensor, to: int, expected: int, source: int, purpose: str
    ) -> PendingExchange:
        """Send `rows` to rank `to` while `expected` rows arrive from rank `source`."""
        world = self.plan.world_size
        outgoing = [rows[:0]] * world
        outgoing[to] = rows
        incoming = torch.zeros(world, dtype=torch.int64)
        incoming[source] = expected
        self.rows.add(purpose, int(rows.shape[0]), expected)
        return self.comm.exchange_start(outgoing, purpose, incoming_counts=incoming)

    def _fetch(self, step: int, rows_of: RowsOf, purpose: str) -> PendingExchange:
        """Ring step `step`: the rows of the peer ahead arrive, this rank's go to the one behind."""
        plan = self.plan
        ahead, behind = plan.ahead(step), plan.behind(step)
        send = rows_of(plan.send_rows[behind])
        return self._exchange(send, behind, plan.remote[ahead].num_rows, ahead, purpose)

    def _give_back(self, step: int, grad_rows: torch.Tensor, purpose: str) -> PendingExchange:
        """Ring step `step` reversed: the gradients of the rows that came from the peer ahead
        go back to it; those of the rows this rank sent the one behind come back."""
        plan = self.plan
        ahead, behind = plan.ahead(step), plan.behind(step)
        expected = int(plan.send_rows[behind].numel())
        return self._exchange(grad_rows, ahead, expected, behind, purpose)

    def _add_returned(self, step: int, pending: PendingExchange, grad: torch.Tensor) -> None:
        behind = self.plan.behind(step)
        returned = pending.wait()[behind]
        grad.index_add_(0, self.plan.send_rows[behind], returned.reshape(-1, *grad.shape[1:]))

    # What a strategy decides.

    def forward_shards(self, rows_of: RowsOf, layer: int, keep: bool, visit: Visit) -> None:
        """`visit` every remote shard with its rows (what `rows_of` gives at their owners);
        `keep`: the caller keeps them for the backward pass where the strategy does."""
        raise NotImplementedError

    def remote_gradients(
        self,
        layer: int,
        kept: Kept,
        refetch: RowsOf | None,
        gradient_of: RowGradients,
        grad: torch.Tensor,
    ) -> None:
        """Compute every remote shard's row gradients, send them to the rows' owners, and add
        those of this rank's rows that come back into `grad`. The rows `gradient_of` needs
        (GAT's; a sum needs none) are those `kept` by the forward pass, or else what `refetch`
        gives at their owners, fetched again; None: no rows."""
        raise NotImplementedError


class SequentialAggregation(_ShardedAggregation):
    """SAR: one remote shard at a time (two with prefetch); nothing remote is kept."""

    purpose = "sar"
    keeps_rows = False

    def __init__(self, plan: ShardPlan, comm: Communicator, prefetch: bool = False) -> None:
        super().__init__(plan, comm)
        self.prefetch = prefetch

    def forward_shards(self, rows_of, layer, keep, visit):
        self._stream(rows_of, layer, f"{self.purpose}_forward", visit)

    def _stream(self, rows_of: RowsOf, layer: int, purpose: str, visit: Visit) -> None:
        """`visit` the remote shards in ring order with their rows, each released before the
        next one's buffer is made; with prefetch the next one is already on its way."""
        plan = self.plan
        window = 2 if self.prefetch else 1
        steps = deque(plan.steps)
        in_flight: deque[tuple[Shard, PendingExchange]] = deque()
        while steps or in_flight:
            while steps and len(in_flight) < window:
                step = steps.popleft()
                shard = plan.remote[plan.ahead(step)]
                in_flight.append((shard, self._fetch(step, rows_of, purpose)))
                # Its buffer exists from here.
                self.remote_rows.received(layer, in_flight[-1][1].received[shard.peer])
            shard, pending = in_flight.popleft()
            visit(shard, pending.wait()[shard.peer])
            # The exchange held the shard's only reference: it goes before the next fetch.
            del pending

    def remote_gradients(self, layer, kept, refetch, gradient_of, grad):
        plan = self.plan
        returning: deque[tuple[int, PendingExchange]] = deque()

        def give_back(shard: Shard, rows: torch.Tensor | None) -> None:
            step = plan.step_from(shard.peer)
            grad_rows = gradient_of(shard, rows)
            returning.append((step, self._give_back(step, grad_rows, f"{self.purpose}_backward")))
            # With prefetch one return stays in flight behind the next shard's compute.
            while len(returning) > (1 if self.prefetch else 0):
                self._add_returned(*returning.popleft(), grad)

        if refetch is None:
            for step in plan.steps:
                give_back(plan.remote[plan.ahead(step)], None)
        else:
            self._stream(refetch, layer, f"{self.purpose}_refetch", give_back)
        while returning:
            self._add_returned(*returning.popleft(), grad)


class DomainParallelAggregation(_ShardedAggregation):
    """The baseline: a layer's remote rows fetched at once and kept for the backward pass."""

    purpose = "domain_parallel"
    keeps_rows = True

    def forward_shards(self, rows_of, layer, keep, visit):
        plan = self.plan
        outgoing = [rows_of(ids) for ids in plan.send_rows]
        incoming = torch.tensor([s.num_rows for s in plan.remote], dtype=torch.int64)
        purpose = f"{self.purpose}_forward"
        self.rows.add(purpose, sum(int(o.shape[0]) for o in outgoing), plan.remote_rows())
        pending = self.comm.exchange_start(outgoing, purpose, incoming)
        for peer in _peers(plan):  # their buffer exists from here
            self.remote_rows.received(layer, pending.received[peer])
        received = pending.wait()
        for peer in _peers(plan):
            visit(plan.remote[peer], received[peer])

    def remote_gradients(self, layer, kept, refetch, gradient_of, grad):
        plan = self.plan
        outgoing = [grad[:0]] * plan.world_size
        for shard, rows in kept:
            outgoing[shard.peer] = gradient_of(shard, rows)
        kept.clear()
        incoming = torch.tensor([r.numel() for r in plan.send_rows], dtype=torch.int64)
        purpose = f"{self.purpose}_backward"
        self.rows.add(purpose, sum(int(o.shape[0]) for o in outgoing), int(incoming.sum()))
        returned = self.comm.exchange_start(outgoing, purpose, incoming).wait()
        for peer in _peers(plan):
            grad.index_add_(0, plan.send_rows[peer], returned[peer].reshape(-1, *grad.shape[1:]))


def _peers(plan: ShardPlan) -> list[int]:
    """Every other rank, in ring order from this one."""
    return [plan.ahead(step) for step in plan.steps]


# ---------------------------------------------------------- autograd functions


class _ShardedSum(torch.autograd.Function):
    """out[v] = the sum of x[u] over v's in-edges, local and remote; x [num_local, F]."""

    @staticmethod
    def forward(ctx, x, block: Block, agg: _ShardedAggregation, layer: int, keep: bool):
        out = local_aggregate(block, x, "sum")
        kept: Kept = []

        def add(shard: Shard, rows: torch.Tensor) -> None:
            if shard.num_edges:
                out.index_add_(0, shard.dst, shard.aggregate(rows.reshape(-1, x.shape[1])))
            if keep and agg.keeps_rows:
                kept.append((shard, rows))

        agg.forward_shards(partial(x.index_select, 0), layer, keep, add)
        ctx.block, ctx.agg, ctx.layer, ctx.kept = block, agg, layer, kept
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        grad_out = grad_out.contiguous()
        grad = local_aggregate(transposed(ctx.block), grad_out, "sum")

        def gradient_of(shard: Shard, rows) -> torch.Tensor:
            return shard.row_gradients(grad_out)

        ctx.agg.remote_gradients(ctx.layer, ctx.kept, None, gradient_of, grad)
        ctx.kept = None
        return grad, None, None, None, None


class _ShardedGAT(torch.autograd.Function):
    """GAT's aggregation (gnnrun.ops.attention) over local and remote in-edges, the edge
    softmax streamed across shards. Remote rows travel as [feat | el] in one row."""

    @staticmethod
    def forward(ctx, feat, el, er, block: Block, agg, layer: int, slope: float, keep: bool):
        softmax = StreamingEdgeSoftmax(er, feat.shape[2], slope)
        softmax.add(feat, el, *edge_list(block))
        kept: Kept = []

        def add(shard: Shard, rows: torch.Tensor) -> None:
            if shard.num_edges:
                softmax.add(*_split_gat_rows(rows, feat.shape), *shard.edges())
            if keep and agg.keeps_rows:
                kept.append((shard, rows))

        agg.forward_shards(_gat_rows_of(feat, el), layer, keep, add)
        out = softmax.result()
        ctx.save_for_backward(feat, el, er, softmax.max, softmax.denominator, out)
        ctx.block, ctx.agg, ctx.layer, ctx.slope, ctx.kept = block, agg, layer, slope, kept
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        feat, el, er, row_max, denominator, out = ctx.saved_tensors
        grads = EdgeSoftmaxGradients(er, row_max, denominator, out, grad_out, ctx.slope)
        grad_feat, grad_el = grads.of_rows(feat, el, *edge_list(ctx.block))
        grad = _gat_rows(grad_feat, grad_el)

        def gradient_of(shard: Shard, rows: torch.Tensor) -> torch.Tensor:
            feat_rows, el_rows = _split_gat_rows(rows, feat.shape)
            return _gat_rows(*grads.of_rows(feat_rows, el_rows, *shard.edges()))

        refetch = None if ctx.agg.keeps_rows else _gat_rows_of(feat, el)
        ctx.agg.remote_gradients(ctx.layer, ctx.kept, refetch, gradient_of, grad)
        ctx.kept = None
        grad_feat, grad_el = _split_gat_rows(grad, feat.shape)
        return grad_feat, grad_el, grads.er, None, None, None, None, None


def _gat_rows(feat: torch.Tensor, el: torch.Tensor) -> torch.Tensor:
    """[rows, heads * dim + heads]: what a remote GAT source row carries."""
    return torch.cat([feat.flatten(1), el], 1)


def _gat_rows_of(feat: torch.Tensor, el: torch.Tensor) -> RowsOf:
    return lambda ids: _gat_rows(feat.index_select(0, ids), el.index_select(0, ids))


def _split_gat_rows(rows: torch.Tensor, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    heads, dim = shape[1], shape[2]
    rows = rows.reshape(-1, heads * (dim + 1))
    return rows[:, : heads * dim].reshape(-1, heads, dim), rows[:, heads * dim :]


# --------------------------------------------------------- the streamed softmax


# Bytes of one [edges, heads, dim] temporary of a chunk of edges. A chunk holds a few
# at once, so this bounds the transient memory of a shard of any size, which would
# otherwise rival the activations SAR saves (2^18 edges of 4 heads x 128 would take
# 512 MiB per temporary); a smaller chunk only adds a loop step per 16k such edges.
CHUNK_BYTES = 32 << 20


def _chunks(
    src: torch.Tensor, dst: torch.Tensor, feat: torch.Tensor
) -> Iterator[tuple[int, int, slice]]:
    """Consecutive runs of edges (in destination order) whose rows of `feat` fill at most
    CHUNK_BYTES: each run's lowest and one past its highest destination, and its slice."""
    size = max(1, CHUNK_BYTES // max(1, math.prod(feat.shape[1:]) * feat.element_size()))
    for start in range(0, src.numel(), size):
        edges = slice(start, min(start + size, src.numel()))
        yield int(dst[edges.start]), int(dst[edges.stop - 1]) + 1, edges


class StreamingEdgeSoftmax:
    """GAT's aggregation over edges that come shard by shard, in destination order.

    Per destination v and head: the running maximum m of the scores seen so far,
    and relative to it the denominator s = sum_j exp(e_j - m) and the weighted sum
    sum_j exp(e_j - m) h_j. A shard that raises m rescales both by exp(m_old - m),
    so the result, weighted sum / s, is the softmax over every edge however the
    edges were split; only one shard's scores exist at a time (and of a large
    shard, one chunk of edges; it rescales only the destinations it spans).
    """

    def __init__(self, er: torch.Tensor, dim: int, slope: float) -> None:
        self.er, self.slope = er, slope
        self.max = torch.full_like(er, float("-inf"))
        self.denominator = torch.zeros_like(er)
        self.weighted = er.new_zeros((*er.shape, dim))

    def add(self, feat: torch.Tensor, el: torch.Tensor, src: torch.Tensor, dst: torch.Tensor):
        """The edges src -> dst (src: rows of `feat` and `el`; dst: local destinations,
        non-decreasing)."""
        for low, high, edges in _chunks(src, dst, feat):
            self._add(feat, el, src[edges], dst[edges] - low, slice(low, high))

    def _add(self, feat, el, src, dst, span: slice) -> None:
        """Edges whose destinations, counted from span.start, all lie in `span`."""
        row_max, denominator, weighted = self.max[span], self.denominator[span], self.weighted[span]
        scores = torch.nn.functional.leaky_relu(el[src] + self.er[span][dst], self.slope)
        index = dst.unsqueeze(1).expand_as(scores)
        new_max = row_max.scatter_reduce(0, index, scores, "amax", include_self=True)
        # exp(-inf - -inf) is nan: a destination with no edge yet has nothing to rescale.
        rescale = torch.where(row_max == float("-inf"), 0.0, torch.exp(row_max - new_max))
        weights = torch.exp(scores - new_max[dst])
        denominator.mul_(rescale).index_add_(0, dst, weights)
        weighted.mul_(rescale.unsqueeze(-1))
        weighted.index_add_(0, dst, weights.unsqueeze(-1) * feat[src])
        row_max.copy_(new_max)

    def result(self) -> torch.Tensor:
        """[num_dst, heads, dim]; 0 for a destination without edges."""
        denominator = torch.where(self.denominator > 0, self.denominator, 1.0)
        return self.weighted / denominator.unsqueeze(-1)


class EdgeSoftmaxGradients:
    """The backward pass of GAT's aggregation, shard by shard, from the forward pass's
    final maximum and denominator (so each shard's coefficients are the global ones).

    With alpha_j = exp(e_j - m) / s and out = sum_j alpha_j h_j, for an edge j -> v:
    dL/dh_j += alpha_j g_v; dL/de_j = alpha_j (g_v . h_j - g_v . out_v), the second
    term being sum_i alpha_i (g_v . h_i); e_j = leaky_relu(el_j + er_v).
    """

    def __init__(self, er, row_max, denominator, out, grad_out, slope: float) -> None:
        self.er_in, self.max, self.denominator, self.slope = er, row_max, denominator, slope
        self.grad_out = grad_out.contiguous()
        self.grad_dot_out = (self.grad_out * out).sum(-1)
        self.er = torch.zeros_like(er)  # accumulates dL/der over every shard

    def of_rows(self, feat, el, src, dst) -> tuple[torch.Tensor, torch.Tensor]:
        """dL/dfeat and dL/del of the source rows of the edges src -> dst (in destination
        order); dL/der is added to `self.er`."""
        grad_feat, grad_el = torch.zeros_like(feat), torch.zeros_like(el)
        for _, _, edges in _chunks(src, dst, feat):
            self._add_chunk(feat, el, src[edges], dst[edges], grad_feat, grad_el)
        return grad_feat, grad_el

    def _add_chunk(self, feat, el, src, dst, grad_feat, grad_el) -> None:
        pre = el[src] + self.er_in[dst]
        scores = torch.nn.functional.leaky_relu(pre, self.slope)
        alpha = torch.exp(scores - self.max[dst]) / self.denominator[dst]
        grad_dst = self.grad_out[dst]
        grad_feat.index_add_(0, src, alpha.unsqueeze(-1) * grad_dst)
        grad_scores = alpha * ((grad_dst * feat[src]).sum(-1) - self.grad_dot_out[dst])
        grad_pre = grad_scores * torch.where(pre > 0, 1.0, self.slope)
        self.er.index_add_(0, dst, grad_pre)
        grad_el.index_add_(0, src, grad_pre)
