"""DistGNN-MB (`algorithm=hec`): local sampling, Historical Embedding Caches, Asynchronous Embedding Push.

Each rank samples its minibatches on its own METIS part alone: halo vertices
(owned by other ranks) are not expanded and their features are not fetched.
At every layer l, what a halo vertex contributes is its embedding from this
rank's cache for layer l (layer 0 caches input features); a halo vertex that
misses is dropped from the minibatch (its edges go). The owners fill the
caches: at every layer of every minibatch each rank pushes what its minibatch
computed for its solid vertices that are halo vertices on other ranks
(`db_halo`, Algorithm 1), drawn at random weighted by degree (Algorithm 2)
when there are more than the push budget allows. What a layer consumes is
pushed and loaded after dropout, as the layer sees it.

The budget of a push from rank p to rank q is a fixed number of rows, known
to both sides from the partition alone, so that a push is one asynchronous
all-to-all of fixed-capacity buffers, each headed by the count of rows it
carries: nothing waits for a size exchange. `push_budget=limit` is the paper's
budget, `push_limit` rows (fewer when q has fewer halo vertices owned by p).
`push_budget=usable` (the default) also caps it at what q can use: a line
lives lifespan + 1 minibatches, so ceil(h / (lifespan + 1)) rows per
minibatch, h being q's halo vertices owned by p, already keep a line alive for
every one of them; more only re-sends lines that are still valid (and pads the
buffers of small graphs, whose halos are smaller than push_limit). From the
second epoch on it is also at most q's halo lookups of p's vertices per
minibatch at that layer in the epoch before, which q tells p at the end of
each epoch: q cannot read more lines in a minibatch than it looks up.

The delay d (`algorithm.delay_minibatches`), defined once: an embedding computed
at minibatch k is usable in the remote caches from minibatch k + max(d, 1). With
d >= 1 the push is an asynchronous all-to-all-v started at k and completed at
k + d, just before that minibatch searches the same layer's cache, so d
minibatches of compute overlap it (the paper's d). With d = 0 the exchange completes at once (no
overlap), for the next minibatch. So a rank loading at minibatch j gets the
latest embedding pushed at j - max(d, 1) or before. Minibatches are numbered
on across epochs and pushes cross epoch boundaries (Algorithm 2 stops pushing d
minibatches before an epoch ends, which leaves a dataset with few minibatches
per epoch with no pushes at all). A checkpoint waits for the pushes in flight
and keeps what they carried with the caches, so a resumed run stores them when
they fall due, as an uninterrupted run does.

Evaluation uses the exact distributed sampler of `minibatch` (owners sample
their vertices and send their features), so accuracies measure the trained
model the same way for both algorithms.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnrun.algorithms.minibatch.minibatch import DistributedMinibatch, SampledConfig, step_key
from gnnrun.algorithms.minibatch.sources import GraphSource, PartitionGraphSource
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.comm import PendingExchange
from gnnrun.config import check
from gnnrun.errors import GnnrunError
from gnnrun.ops.block import Block
from gnnrun.ops.hec import HistoricalEmbeddingCache
from gnnrun.ops.rows import take_rows
from gnnrun.ops.sampling import sample_neighbors

PUSH_BUDGETS = ("usable", "limit")


@dataclass
class HistoricalEmbeddingCacheConfig(SampledConfig):
    """hec (DistGNN-MB): halo embeddings come from a per-layer cache filled by pushes.

    Defaults are the paper's settings for every experiment (section 5).
    """

    cache_size: int = 1_000_000  # cs: cache lines per layer (input features included)
    lifespan: int = 2  # ls: a line older than this many minibatches is purged
    push_limit: int = 2000  # nc: embeddings pushed per layer to each remote rank per minibatch
    # limit: push_limit rows per push (the paper's); usable: also at most what the peer
    # can use, its halo from this rank / (lifespan + 1) and its lookups per minibatch
    # (module docstring)
    push_budget: str = "usable"
    # d: a push started at minibatch k is stored remotely at minibatch k + d
    delay_minibatches: int = 1

    def validate(self) -> None:
        super().validate()
        check(self.mode == "minibatch", "algorithm.mode: hec trains on minibatches")
        check(self.cache_size >= 0, "algorithm.cache_size must be >= 0 (0: local-only training)")
        check(self.lifespan >= 0, "algorithm.lifespan must be >= 0")
        check(
            self.push_limit >= 0,
            "algorithm.push_limit must be >= 0 (0: no pushes, the caches stay empty: "
            "local-only training)",
        )
        check(
            self.push_budget in PUSH_BUDGETS,
            f"algorithm.push_budget {self.push_budget!r}: choose usable or limit",
        )
        check(self.delay_minibatches >= 0, "algorithm.delay_minibatches must be >= 0")


class LocalPartSource(GraphSource):
    """Minibatches from this rank's part alone: halo vertices have no neighbours
    (their rows are empty) and no features (zero rows, which the layer-0 cache fills).

    Solid vertices are sampled exactly as the exact sampler samples them (same
    CSR rows, randomness keyed by global id): only halo subtrees are missing.
    """

    def __init__(self, exact: PartitionGraphSource, rank: int) -> None:
        self.exact, self.rank = exact, rank

    def sample_rows(self, rows, fanouts, key, hop):
        exact = self.exact
        offsets, neighbours = sample_neighbors(
            exact.indptr, exact.indices, rows, fanouts[0], key, hop
        )
        return offsets, exact.nodes[neighbours]

    def features(self, nodes):
        exact = self.exact
        out = torch.zeros(nodes.numel(), exact.feat.shape[1])
        solid = exact.owner[nodes] == self.rank
        out[solid] = torch.from_numpy(take_rows(exact.feat, exact.local[nodes[solid]].numpy()))
        return out


@dataclass
class Push:
    """One layer's embeddings on their way to the other ranks' caches: per rank, a
    buffer of ids headed by their count, and the rows, both padded to the budget."""

    started: int  # the minibatch that computed them
    ids: PendingExchange
    rows: PendingExchange

    @classmethod
    def arrived(cls, started: int, ids: torch.Tensor, rows: torch.Tensor) -> Push:
        """A push whose ids and rows are already here (kept by a checkpoint)."""
        header = torch.tensor([ids.numel()], dtype=torch.int64, device=ids.device)
        return cls(started, PendingExchange([torch.cat([header, ids])]), PendingExchange([rows]))

    def wait(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The ids and rows that arrived, padding dropped."""
        ids, rows = [], []
        for counted, padded in zip(self.ids.wait(), self.rows.wait(), strict=True):
            count = int(counted[0])
            ids.append(counted[1 : 1 + count])
            rows.append(padded[:count])
        return torch.cat(ids), torch.cat(rows)


@ALGORITHMS.register("hec", HistoricalEmbeddingCacheConfig)
class HistoricalEmbeddingCacheTraining(DistributedMinibatch):
    shares_parts = False  # its caches are per part: one part per rank
    # The cache keeps and pushes layer outputs; its bf16 form is not built yet.
    precisions = ("fp32",)
    # The cache's halo rows would need the typed input encoded per layer 0.
    heterogeneous = False
    # Its local sampling would need the step's target edges left out of every part.
    tasks = ("node",)
    # DistGNN-MB is a CPU system; on a GPU rank the caches live in the GPU's memory.
    devices = ("cpu", "cuda")

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        algo = cfg.algorithm
        self.cache_size, self.lifespan = algo.cache_size, algo.lifespan
        self.push_limit, self.delay = algo.push_limit, algo.delay_minibatches
        self.local_source = LocalPartSource(self.source, comm.rank)
        part = self.part
        nodes = torch.from_numpy(np.array(part["nodes"], dtype=np.int64))
        self.halos = nodes[part.num_solid :]
        self.degree = torch.from_numpy(np.diff(np.asarray(part["indptr"], dtype=np.int64)))
        self.halo_on = self._build_db_halo(part.num_solid)
        halo_owner = torch.from_numpy(np.array(part["halo_owner"], dtype=np.int64))
        # Rows per push to / from each rank: at most the cap the partition sets, and
        # under push_budget=usable at most the receiver's lookups per minibatch.
        self.send_cap = torch.tensor(
            [0 if mask is None else self._cap(int(mask.sum())) for mask in self.halo_on]
        )
        self.receive_cap = torch.tensor(
            [
                0 if q == comm.rank else self._cap(int((halo_owner == q).sum()))
                for q in range(comm.world_size)
            ]
        )
        layers = cfg.model.layers
        self.caches: list[HistoricalEmbeddingCache | None] = [None] * layers
        self.in_flight: list[deque[Push]] = [deque() for _ in range(layers)]
        self.send_budget = self.send_cap.repeat(layers, 1)  # [layer, rank]
        self.receive_budget = self.receive_cap.repeat(layers, 1)
        self.hits, self.lookups = [0] * layers, [0] * layers
        self.lookups_by_owner = torch.zeros(layers, comm.world_size, dtype=torch.int64)
        # What a layer's lookups and pushes index, where its rows are: on a GPU rank the
        # caches, their searches and the pushes (NCCL) are on the GPU.
        device = self.device
        self.halos, self.degree = self.halos.to(device), self.degree.to(device)
        self.halo_on = [None if mask is None else mask.to(device) for mask in self.halo_on]
        self.owner, self.local = self.source.owner.to(device), self.source.local.to(device)
        self.steps = 0
        # Tests set a list here to see every layer's sources and every push, load and miss:
        # (kind, minibatch, layer, peer rank, ids, rows); the peer of a push is its target.
        self.trace: list[tuple[str, int, int, int, torch.Tensor, torch.Tensor]] | None = None

    def _cap(self, halo: int) -> int:
        """Rows per push from an owner to a rank holding `halo` of its vertices as halos."""
        budget = min(self.push_limit, halo)
        if self.cfg.algorithm.push_budget == "usable":
            budget = min(budget, -(-halo // (self.lifespan + 1)))
        return budget

    def _build_db_halo(self, num_solid: int) -> list[torch.Tensor | None]:
        """Algorithm 1's db_halo: for each other rank, which of my solid vertices are
        halo vertices there (a mask over my solid vertices' local ids)."""
        halo_owner = torch.from_numpy(np.array(self.part["halo_owner"], dtype=np.int64))
        mine_there = self.comm.exchange(
            [self.halos[halo_owner == q] for q in range(self.comm.world_size)], "db_halo"
        )
        masks: list[torch.Tensor | None] = []
        for q, ids in enumerate(mine_there):
            if q == self.comm.rank:
                masks.append(None)
                continue
            mask = torch.zeros(num_solid, dtype=torch.bool)
            mask[self.source.local[ids]] = True
            masks.append(mask)
        return masks

    # ------------------------------------------------------------------ training

    def training_source(self) -> GraphSource:
        return self.local_source

    def begin_epoch(self, epoch: int) -> int:
        layers = len(self.caches)
        self.hits, self.lookups = [0] * layers, [0] * layers
        self.lookups_by_owner.zero_()
        self.steps = 0
        return super().begin_epoch(epoch)

    def end_epoch(self, losses: list[float]) -> dict[str, Any]:
        stats = super().end_epoch(losses)
        counts = torch.tensor([self.hits, self.lookups], dtype=torch.float64)
        self.comm.all_reduce_sum(counts)
        stats["hit_rate"] = [
            float(h / n) if n else None for h, n in zip(counts[0], counts[1], strict=True)
        ]
        stats["push_rows"] = self.send_budget.sum(dim=1).tolist()  # per layer, to all ranks
        if self.cfg.algorithm.push_budget == "usable" and self.steps:
            self._follow_lookups()
        return stats

    def _follow_lookups(self) -> None:
        """Next epoch, push each rank at most the halo lookups per minibatch it made of
        my vertices this epoch, per layer (each rank tells each owner)."""
        demand = -(-self.lookups_by_owner // self.steps)  # [layer, owner], rounded up
        self.receive_budget = torch.minimum(self.receive_cap, demand)
        told = self.comm.exchange(list(demand.t().contiguous()), "hec_budget")
        self.send_budget = torch.minimum(self.send_cap, torch.stack(told, dim=1))

    def forward(self, model, blocks, x, epoch, step, steps):
        now = epoch * steps + step
        self.steps += 1
        push = self.cache_size > 0 and self.push_limit > 0

        def layer_input(layer: int, block: Block, h: torch.Tensor) -> tuple[Block, torch.Tensor]:
            return self._layer_input(layer, block, h, now, push)

        return model(blocks, x, layer_input=layer_input)

    def _layer_input(
        self, layer: int, block: Block, h: torch.Tensor, now: int, push: bool
    ) -> tuple[Block, torch.Tensor]:
        cache = self.caches[layer]
        if cache is None:
            cache = self.caches[layer] = HistoricalEmbeddingCache(
                self.halos, self.cache_size, h.shape[1]
            )
        arrived = self._arrivals(layer, now)
        with self.timer.phase("hec"):
            for stamp, ids, rows in arrived:
                cache.store(ids, rows, stamp)
            halo = self.owner[block.src_ids] != self.comm.rank
            self._record("sources", now, layer, self.comm.rank, block.src_ids, h[:0])
            positions = halo.nonzero().squeeze(1)
            tags = block.src_ids[positions]
            lines = cache.search(tags, now, self.lifespan)
            hit = lines >= 0
            self.hits[layer] += int(hit.sum())
            self.lookups[layer] += int(positions.numel())
            self.lookups_by_owner[layer] += torch.bincount(
                self.owner[tags], minlength=self.comm.world_size
            ).cpu()
            if bool(hit.any()):
                loaded = cache.load(lines[hit])
                # Input features carry no gradient and can take the rows in place; a
                # hidden layer's output is saved for its backward pass and cannot.
                if h.requires_grad:
                    h = h.index_put((positions[hit],), loaded)
                else:
                    h.index_put_((positions[hit],), loaded)
                self._record("load", now, layer, self.comm.rank, tags[hit], loaded)
            if not bool(hit.all()):
                self._record("miss", now, layer, self.comm.rank, tags[~hit], h[:0])
                missed = torch.zeros(block.num_src, dtype=torch.bool, device=block.device)
                missed[positions[~hit]] = True
                block = block.without_sources(missed)
            outgoing = self._select_pushes(layer, block.src_ids, halo, h, now) if push else None
        if outgoing is not None:
            pending = self._start_push(layer, now, *outgoing)
            if self.delay == 0:
                for stamp, ids, rows in self._complete([pending], now + 1):
                    with self.timer.phase("hec"):
                        cache.store(ids, rows, stamp)
            else:
                self.in_flight[layer].append(pending)
        return block, h

    def _start_push(
        self, layer: int, now: int, ids: list[torch.Tensor], rows: list[torch.Tensor]
    ) -> Push:
        """Sends each rank its ids (after their count) and rows in buffers of its budget."""
        id_buffers, row_buffers = [], []
        for q, budget in enumerate(self.send_budget[layer].tolist()):
            count = ids[q].numel()
            header = torch.tensor([count], dtype=torch.int64, device=ids[q].device)
            id_buffers.append(torch.cat([header, ids[q], ids[q].new_zeros(budget - count)]))
            row_buffers.append(
                torch.cat([rows[q], rows[q].new_zeros(budget - count, rows[q].shape[1])])
            )
        receive = self.receive_budget[layer]
        return Push(
            now,
            self.comm.exchange_start(id_buffers, "hec_push", incoming_counts=receive + 1),
            self.comm.exchange_start(row_buffers, "hec_push", incoming_counts=receive),
        )

    def _arrivals(self, layer: int, now: int) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        """The pushes of this layer due at minibatch `now` (started `delay` minibatches ago)."""
        due = []
        queue = self.in_flight[layer]
        while queue and queue[0].started + self.delay <= now:
            due.append(queue.popleft())
        return self._complete(due, now)

    def _complete(
        self, pushes: list[Push], stamp: int
    ) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        out = []
        with self.timer.phase("hec_wait"):
            for push in pushes:
                out.append((stamp, *push.wait()))
        return out

    def _select_pushes(
        self, layer: int, src_ids: torch.Tensor, halo: torch.Tensor, h: torch.Tensor, now: int
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per rank: my solid vertices of this layer that are halo vertices there, at most
        the rank's budget of them, drawn without replacement with probability by degree."""
        world, rank = self.comm.world_size, self.comm.rank
        solid = (~halo).nonzero().squeeze(1)
        local = self.local[src_ids[solid]]
        ids, rows = [], []
        for q in range(world):
            chosen = solid[:0] if q == rank else solid[self.halo_on[q][local]]
            budget = int(self.send_budget[layer, q])
            if budget == 0:  # the rank looked up none of my vertices at this layer
                chosen = solid[:0]
            elif chosen.numel() > budget:
                weights = self.degree[self.local[src_ids[chosen]]].clamp(min=1).double()
                key = step_key(self.cfg.train.seed, now, layer * world + q)
                generator = torch.Generator().manual_seed(key)
                # Drawn on the CPU: the same picks on CPU and GPU ranks.
                pick = torch.multinomial(
                    weights.cpu(), budget, replacement=False, generator=generator
                )
                chosen = chosen[torch.sort(pick).values.to(chosen.device)]
            ids.append(src_ids[chosen])
            rows.append(h[chosen].detach())
            self._record("push", now, layer, q, ids[-1], rows[-1])
        return ids, rows

    def _record(
        self, kind: str, now: int, layer: int, peer: int, ids: torch.Tensor, rows: torch.Tensor
    ) -> None:
        if self.trace is not None:
            self.trace.append((kind, now, layer, peer, ids.clone(), rows.detach().clone()))

    # --------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        # On the CPU: a run resumes on CPU or GPU ranks alike.
        in_flight = [
            [(push.started, *(t.cpu() for t in push.wait())) for push in queue]
            for queue in self.in_flight
        ]
        caches = [
            None if c is None else {name: t.cpu() for name, t in c.state_dict().items()}
            for c in self.caches
        ]
        return {
            "caches": caches,
            "in_flight": in_flight,
            "budgets": (self.send_budget, self.receive_budget),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["caches"]) != len(self.caches):
            raise GnnrunError(self._mismatch(f"{len(state['caches'])} layers"))
        for layer, saved in enumerate(state["caches"]):
            if saved is None:
                continue
            cache = HistoricalEmbeddingCache(self.halos, self.cache_size, saved["data"].shape[1])
            try:
                cache.load_state_dict(saved)
            except ValueError as exc:
                raise GnnrunError(self._mismatch(str(exc))) from None
            self.caches[layer] = cache
        if "budgets" in state:  # written before 2026-11-25: the partition's caps
            self.send_budget, self.receive_budget = state["budgets"]
        for queue, saved in zip(self.in_flight, state["in_flight"], strict=True):
            queue.clear()
            for started, ids, rows in saved:
                queue.append(Push.arrived(started, ids.to(self.device), rows.to(self.device)))

    def _mismatch(self, what: str) -> str:
        return (
            f"the checkpoint's embedding caches do not fit this run ({what}): resume with the "
            "model, partition and algorithm.cache_size of the checkpoint, or start again "
            "without train.resume"
        )
