"""A multilevel edge cut of METIS quality that runs on the ranks: `partitioner=multilevel`.

Every rank holds its range of vertices of the symmetric graph (a `RankGraph`: its rows'
neighbours as global ids, edge weights, and a weight per vertex for every balance
constraint METIS is given: vertices, in-degree, train / val / test membership; see
gnnrun.partition.metis.vertex_weights). Then, as ParMETIS and KaMinPar do:

1. **Coarsen**: size-constrained label propagation. Every vertex starts as its own cluster
   (named by its id); in sub-rounds (a hash of the id picks the vertices that move) each
   vertex proposes the neighbouring cluster it shares the most edge weight with, the rank
   owning that cluster accepts proposals in the order (gain, hash) while the cluster stays
   under a weight cap in every constraint, and the ranks exchange the labels of the
   vertices their neighbours need. The clusters are contracted into a coarse graph
   (summed vertex and edge weights), itself spread over the ranks by cluster id, and
   coarsened again until it has at most max(30 k, n / (20 log2 k)) vertices (METIS's own
   target, capped by `max_coarse_vertices`) or stops shrinking.
2. **Initial partition**: rank 0 gathers the coarsest graph and runs METIS on it (the same
   constraints and imbalance), then sends each rank its vertices' parts.
3. **Uncoarsen**: each level takes its clusters' parts and is refined by balance-constrained
   label propagation: a vertex proposes the part with the most edge weight to it when that
   beats its own; proposals into a part are accepted best gain first (whole buckets of
   (gain, hash), from all-reduced histograms, the last bucket split finer) while the part
   stays under `imbalance` x its even share in every constraint (or under the heaviest
   part, where some part is over it already: a move never makes the balance worse). On
   the finest level a part over the caps first sheds its cheapest vertices to parts with
   room, a constraint at a time.

Every decision depends on global ids, hashes and global sums only, never on which rank
holds a vertex, so the assignment is the same for a seed whatever the number of ranks,
and the same as one process makes on the prepared dataset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnrun.config import check
from gnnrun.data.chunked import ChunkedGraph
from gnnrun.data.chunked_ranks import RankFigures, RoundPlan, exchange_edges
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import sorted_unique
from gnnrun.partition.metis import MetisPartitionerConfig, metis_adjacency, vertex_weights
from gnnrun.partition.registry import Assignment, register_partitioner

if TYPE_CHECKING:
    from gnnrun.comm import Communicator


@dataclass
class MultilevelPartitionerConfig(MetisPartitionerConfig):
    name: str = "multilevel"
    # Each part's share of every balance constraint may reach this multiple of the even
    # share (METIS's default: 1.03).
    imbalance: float = 1.03
    # The most vertices the coarsest graph keeps: rank 0 gathers it and partitions it with
    # METIS (about 100 bytes per vertex and per edge there).
    max_coarse_vertices: int = 1_000_000
    coarsen_iterations: int = 6  # label-propagation sweeps per level while coarsening
    refine_iterations: int = 8  # sweeps per level while refining

    def validate(self) -> None:
        super().validate()
        check(
            1.0 < self.imbalance <= 2.0,
            f"partitioner.imbalance={self.imbalance} must lie in (1, 2]: each part may hold "
            "this multiple of its even share (1.03 is METIS's default)",
        )
        check(
            self.max_coarse_vertices >= 30 * self.num_parts,
            f"partitioner.max_coarse_vertices={self.max_coarse_vertices} must be at least 30 "
            f"per part ({30 * self.num_parts} for {self.num_parts} parts)",
        )
        check(
            self.coarsen_iterations >= 1 and self.refine_iterations >= 0,
            "partitioner.coarsen_iterations must be at least 1, refine_iterations at least 0",
        )


BATCHES = 8  # sub-rounds per sweep: a vertex moves in the one its hash picks
HASH_BUCKETS = 16  # ties in gain are broken by hash in this many buckets
FINE_BUCKETS = 256  # and the bucket where a part fills up, in this many more
SIGNED_GAIN_BUCKETS = 65  # log2 buckets of a gain from -2^32 to 2^32
MAX_LEVELS = 30
CLUSTER_GROWTH = 3
PURPOSE = "multilevel"


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (as gnnrun.partition.random): a well-spread hash of uint64."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _hash(ids: np.ndarray, *salt: int) -> np.ndarray:
    """A seeded hash of ids (uint64), different for every salt."""
    key = np.uint64(np.random.default_rng([*salt, 0x6D6C7674]).integers(0, 2**63))
    return _mix(np.asarray(ids, dtype=np.int64).astype(np.uint64) ^ key)


class RankGraph:
    """One rank's rows of a level of the symmetric graph: sorted global `ids` in the rank's
    range, their neighbours (global ids, CSR), edge weights and vertex weights [rows, C].
    `bounds[r]` is the first id rank r owns; ids may be sparse (a coarse level keeps the
    ids of its clusters' names)."""

    def __init__(
        self,
        comm: Communicator,
        bounds: np.ndarray,
        ids: np.ndarray,
        indptr: np.ndarray,
        nbr: np.ndarray,
        ew: np.ndarray,
        vw: np.ndarray,
    ) -> None:
        self.comm, self.bounds = comm, bounds
        self.ids, self.indptr, self.nbr, self.ew, self.vw = ids, indptr, nbr, ew, vw
        self.rank, self.world = comm.rank, comm.world_size
        self.row_of_edge = np.repeat(np.arange(ids.size, dtype=np.int64), np.diff(indptr))
        # Neighbours' values come from concat(own values, ghost values): `pos` per edge.
        remote = self.owner(nbr) != self.rank
        self.ghosts = sorted_unique(nbr[remote])
        self.pos = np.where(
            remote, ids.size + np.searchsorted(self.ghosts, nbr), np.searchsorted(ids, nbr)
        )
        # Ghosts are sorted by id, so grouped by owner in rank order: ask each owner once
        # which of its rows this rank needs, and remember what the others need of ours.
        asked = self.split_sorted(self.ghosts)
        self.send_rows = [np.searchsorted(ids, got) for got in exchange(comm, asked)]

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.bounds, ids, side="right") - 1

    def split_sorted(self, sorted_ids: np.ndarray) -> list[np.ndarray]:
        cuts = np.searchsorted(sorted_ids, self.bounds)
        return [sorted_ids[cuts[r] : cuts[r + 1]] for r in range(self.world)]

    def with_ghosts(self, values: np.ndarray) -> np.ndarray:
        """`values` of the rows followed by the ghosts' (from their ranks): index with `pos`."""
        got = exchange(self.comm, [values[rows] for rows in self.send_rows])
        return np.concatenate([values, *got])

    def sum_all(self, values: np.ndarray) -> np.ndarray:
        import torch

        return self.comm.all_reduce_sum(torch.from_numpy(np.ascontiguousarray(values))).numpy()

    def count(self) -> int:
        return int(self.sum_all(np.array([self.ids.size], dtype=np.int64))[0])


def alone() -> Communicator:
    """A communicator of this process alone, even inside a process group (a launcher that
    partitions before its ranks start must not wait for them)."""
    from gnnrun.comm import Communicator

    comm = Communicator()
    comm.distributed, comm.rank, comm.world_size = False, 0, 1
    return comm


def exchange(comm: Communicator, pieces: list[np.ndarray]) -> list[np.ndarray]:
    """pieces[r] to rank r; what every rank sent this one, in rank order."""
    import torch

    sent = [torch.from_numpy(np.ascontiguousarray(p)) for p in pieces]
    return [t.numpy() for t in comm.exchange(sent, PURPOSE)]


def send_by(comm: Communicator, to_rank: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
    """Each row of `rows` to rank `to_rank[i]`; what arrives, by sender in rank order."""
    order = np.argsort(to_rank, kind="stable")
    cuts = np.searchsorted(to_rank[order], np.arange(comm.world_size + 1))
    rows = rows[order]
    return exchange(comm, [rows[cuts[r] : cuts[r + 1]] for r in range(comm.world_size)])


def lookup(graph: RankGraph, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """values[id] for ids of `graph` that any rank holds (`values` aligned with graph.ids)."""
    keys = sorted_unique(wanted)
    asked = exchange(graph.comm, graph.split_sorted(keys))
    answers = exchange(graph.comm, [values[np.searchsorted(graph.ids, a)] for a in asked])
    return np.concatenate(answers)[np.searchsorted(keys, wanted)]


# ------------------------------------------------------------------------------ coarsening


def cluster(g: RankGraph, caps: np.ndarray, seed: int, level: int, iterations: int) -> np.ndarray:
    """Size-constrained label propagation: the cluster (a global id) of each row."""
    labels = g.ids.copy()
    weight = g.vw.copy()  # of the clusters named by this rank's ids (aligned with g.ids)
    total = g.count()
    for sweep in range(iterations):
        batch = _hash(g.ids, seed, level, sweep) % np.uint64(BATCHES)
        moved = 0
        for b in range(BATCHES):
            everyone = g.with_ghosts(labels)
            movers = batch == np.uint64(b)
            edges = movers[g.row_of_edge]
            rows, to = g.row_of_edge[edges], everyone[g.pos[edges]]
            # Edge weight from each mover to each neighbouring cluster.
            keys, first, conn = _sum_by(rows, to, g.ew[edges])
            rows, to = keys
            own = labels[rows] == to
            home = np.zeros(g.ids.size, dtype=np.int64)
            home[rows[own]] = conn[own]
            # The best other cluster per row: most weight, ties by the cluster's hash (one
            # score: the weight above 21 bits of hash), the pairs being sorted by row.
            other = ~own
            rows, to, conn = rows[other], to[other], conn[other]
            tie = (_hash(to, seed, level, sweep, 1) >> np.uint64(43)).astype(np.int64)
            score = (conn << 21) | tie
            starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if rows.size else rows
            top = np.maximum.reduceat(score, starts) if rows.size else score
            is_top = score == np.repeat(top, np.diff(np.r_[starts, rows.size]))
            best = is_top & np.r_[True, (rows[1:] != rows[:-1]) | ~is_top[:-1]]
            rows, to, gain = rows[best], to[best], conn[best] - home[rows[best]]
            first_best = np.r_[True, rows[1:] != rows[:-1]] if rows.size else rows.astype(bool)
            rows, to, gain = rows[first_best], to[first_best], gain[first_best]
            keep = gain > 0
            rows, to, gain = rows[keep], to[keep], gain[keep]
            accepted = _approve_joins(g, weight, caps, rows, to, gain, seed, level, sweep)
            rows, to = rows[accepted], to[accepted]
            # Leaving a cluster makes it lighter: tell its owner.
            left = labels[rows]
            got = np.concatenate(
                send_by(g.comm, g.owner(left), np.column_stack([left, g.vw[rows]]))
            ).reshape(-1, 1 + g.vw.shape[1])
            np.subtract.at(weight, np.searchsorted(g.ids, got[:, 0]), got[:, 1:])
            labels[rows] = to
            moved += rows.size
        if int(g.sum_all(np.array([moved]))[0]) <= total // 1000:
            break
    return labels


def _sum_by(rows: np.ndarray, to: np.ndarray, w: np.ndarray):
    """((rows, to) distinct pairs sorted, index of each pair's first edge, summed w). Both
    are global ids (below 2^31: their pair fits one int64 key, one sort)."""
    if rows.size and max(int(rows.max()), int(to.max())) < 2**31:
        order = np.argsort((rows << 31) | to)
    else:
        order = np.lexsort((to, rows))
    rows, to, w = rows[order], to[order], w[order]
    start = np.r_[True, (rows[1:] != rows[:-1]) | (to[1:] != to[:-1])] if rows.size else []
    first = np.flatnonzero(start)
    sums = np.add.reduceat(w, first) if first.size else np.zeros(0, np.int64)
    return (rows[first], to[first]), first, sums


def _approve_joins(
    g: RankGraph,
    weight: np.ndarray,
    caps: np.ndarray,
    rows: np.ndarray,
    to: np.ndarray,
    gain: np.ndarray,
    seed: int,
    level: int,
    sweep: int,
) -> np.ndarray:
    """Which proposals (row joins cluster `to`) the clusters' owners accept: per cluster,
    best gain first (ties by the vertex's hash), while it stays under `caps`."""
    c = g.vw.shape[1]
    payload = np.column_stack([to, g.ids[rows], gain, np.arange(rows.size), g.vw[rows]])
    to_rank = g.owner(to)
    order = np.argsort(to_rank, kind="stable")
    got = send_by(g.comm, to_rank, payload)
    sizes = [p.shape[0] for p in got]
    asked = np.concatenate(got).reshape(-1, 4 + c)
    cl, vid, gn, w = asked[:, 0], asked[:, 1], asked[:, 2], asked[:, 4:]
    rank_order = np.lexsort((_hash(vid, seed, level, sweep, 2), -gn, cl))
    cl, w = cl[rank_order], w[rank_order]
    at = np.searchsorted(g.ids, cl)
    cum = np.cumsum(w, axis=0)
    starts = np.flatnonzero(np.r_[True, cl[1:] != cl[:-1]]) if cl.size else np.zeros(0, int)
    before = np.repeat(cum[starts] - w[starts], np.diff(np.r_[starts, cl.size]), axis=0)
    inflow = cum - before
    fits = np.all((inflow == 0) | (weight[at] + inflow <= caps), axis=1)
    np.add.at(weight, at[fits], w[fits])
    answer = np.empty(cl.size, dtype=np.int64)
    answer[rank_order] = fits
    pieces = np.split(answer, np.cumsum(sizes)[:-1])
    back = np.concatenate(exchange(g.comm, pieces))
    accepted = np.zeros(rows.size, dtype=bool)
    accepted[order] = back.astype(bool)
    return accepted


def contract(g: RankGraph, labels: np.ndarray) -> RankGraph:
    """The graph of the clusters: a vertex per label (held by the label's owner), its
    members' weights summed; an edge per pair of adjacent clusters, weights summed."""
    c = g.vw.shape[1]
    got = send_by(g.comm, g.owner(labels), np.column_stack([labels, g.vw]))
    members = np.concatenate(got).reshape(-1, 1 + c)
    ids = sorted_unique(members[:, 0])
    vw = np.zeros((ids.size, c), dtype=np.int64)
    np.add.at(vw, np.searchsorted(ids, members[:, 0]), members[:, 1:])
    everyone = g.with_ghosts(labels)
    cu, cv = labels[g.row_of_edge], everyone[g.pos]
    cross = cu != cv
    cu, cv, ew = cu[cross], cv[cross], g.ew[cross]
    (cu, cv), _, ew = _sum_by(cu, cv, ew)  # fewer rows to send
    got = send_by(g.comm, g.owner(cu), np.column_stack([cu, cv, ew]))
    edges = np.concatenate(got).reshape(-1, 3)
    (cu, cv), _, ew = _sum_by(edges[:, 0], edges[:, 1], edges[:, 2])
    indptr = np.zeros(ids.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.searchsorted(ids, cu), minlength=ids.size), out=indptr[1:])
    return RankGraph(g.comm, g.bounds, ids, indptr, cv, ew, vw)


# --------------------------------------------------------------------- initial partition


def partition_coarsest(
    g: RankGraph, caps: np.ndarray, num_parts: int, cfg: MultilevelPartitionerConfig
) -> np.ndarray:
    """METIS on the whole coarsest graph, on rank 0; each rank's rows' parts."""
    c = g.vw.shape[1]
    deg = np.diff(g.indptr)
    rows = np.column_stack([g.ids, deg, g.vw])
    got_rows = exchange(g.comm, [rows] + [rows[:0]] * (g.world - 1))
    edges = np.column_stack([g.nbr, g.ew])
    got_edges = exchange(g.comm, [edges] + [edges[:0]] * (g.world - 1))
    answer = [np.zeros(0, np.int64)] * g.world
    if g.rank == 0:
        every = np.concatenate(got_rows).reshape(-1, 2 + c)
        adj = np.concatenate(got_edges).reshape(-1, 2)
        ids, vw = every[:, 0], every[:, 2:]  # ranks' ranges in order, each sorted: sorted
        indptr = np.zeros(ids.size + 1, dtype=np.int64)
        np.cumsum(every[:, 1], out=indptr[1:])
        indices = np.searchsorted(ids, adj[:, 0])
        parts = _best_metis(indptr, indices, vw, adj[:, 1], caps, num_parts, cfg)
        cuts = np.searchsorted(ids, g.bounds)
        answer = [parts[cuts[r] : cuts[r + 1]] for r in range(g.world)]
    return exchange(g.comm, answer)[0]


def _best_metis(indptr, indices, vw, ew, caps, num_parts, cfg) -> np.ndarray:
    """METIS with every constraint; where it leaves a part over the caps (multi-constraint
    METIS gives up on small dense graphs, as coarse graphs are), also METIS balancing
    vertices alone: the one over the caps by less, then the smaller cut."""
    best = None
    for columns in (slice(None), slice(0, 1)):
        parts = run_metis_weighted(
            indptr, indices, vw[:, columns], ew, num_parts, cfg.imbalance, cfg.seed
        )
        weights = np.zeros((num_parts, vw.shape[1]), dtype=np.int64)
        np.add.at(weights, parts, vw)
        excess = float((np.maximum(weights - caps, 0).max(axis=0) / caps).sum())
        src = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        cut = int(ew[parts[src] != parts[indices]].sum())
        if best is None or (excess, cut) < best[:2]:
            best = (excess, cut, parts)
        if excess == 0:
            break
    assert best is not None
    return best[2]


def run_metis_weighted(
    indptr: np.ndarray,
    indices: np.ndarray,
    vweights: np.ndarray,
    eweights: np.ndarray,
    num_parts: int,
    imbalance: float,
    seed: int,
) -> np.ndarray:
    import pymetis

    if num_parts == 1:
        return np.zeros(indptr.size - 1, dtype=np.int64)
    options = pymetis.Options(seed=seed, ufactor=max(1, round((imbalance - 1) * 1000)))
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(
            np.ascontiguousarray(indptr, np.int64), np.ascontiguousarray(indices, np.int64)
        ),
        vweights=np.ascontiguousarray(vweights, dtype=np.int64).ravel(),
        eweights=np.ascontiguousarray(eweights, dtype=np.int64),
        options=options,
    )
    return np.frombuffer(result.vertex_part, dtype=np.int64).copy()


# ------------------------------------------------------------------------------ refinement


def part_weights(g: RankGraph, parts: np.ndarray, num_parts: int) -> np.ndarray:
    c = g.vw.shape[1]
    local = np.zeros((num_parts, c), dtype=np.int64)
    np.add.at(local, parts, g.vw)
    return g.sum_all(local)


def refine(
    g: RankGraph,
    parts: np.ndarray,
    caps: np.ndarray,
    num_parts: int,
    seed: int,
    level: int,
    iterations: int,
) -> np.ndarray:
    """Balance-constrained label propagation over parts (see the module's docstring)."""
    parts = parts.astype(np.int64)
    k = num_parts
    # Coarser levels refine within the balance they were given (a part over the caps there
    # is repaired on the finest level, where single vertices move and cost the least).
    shed = level == 0
    for sweep in range(iterations):
        weights = part_weights(g, parts, k)
        if shed and np.any(weights > caps):
            parts = _shed(g, parts, weights, caps, k, seed, level, sweep)
            weights = part_weights(g, parts, k)
        # A move may fill a part up to the cap, or to the heaviest part's weight where
        # some part is over it: it never makes the balance worse.
        ceiling = np.maximum(caps, weights.max(axis=0))
        batch = _hash(g.ids, seed, level, sweep, 3) % np.uint64(BATCHES)
        moved = 0
        for b in range(BATCHES):
            rows = np.flatnonzero(batch == np.uint64(b))
            conn = _connections(g, parts, rows, k)
            own = conn[np.arange(rows.size), parts[rows]]
            room = _room(weights, g.vw[rows], ceiling)
            score = np.where(room, conn, -1)
            score[np.arange(rows.size), parts[rows]] = -1
            target = _argmax_rotated(score, g.ids[rows], seed, level, sweep)
            gain = score[np.arange(rows.size), target] - own
            keep = gain > 0
            rows, target, gain = rows[keep], target[keep], gain[keep]
            accepted = _approve_into(g, weights, ceiling, rows, target, gain, k, seed, level, sweep)
            rows, target = rows[accepted], target[accepted]
            delta = np.zeros((k, g.vw.shape[1]), dtype=np.int64)
            np.add.at(delta, target, g.vw[rows])
            np.subtract.at(delta, parts[rows], g.vw[rows])
            weights = weights + g.sum_all(delta)
            parts[rows] = target
            moved += rows.size
        if int(g.sum_all(np.array([moved]))[0]) == 0:
            break
    weights = part_weights(g, parts, k)
    if shed and np.any(weights > caps):
        parts = _shed(g, parts, weights, caps, k, seed, level, iterations)
    return parts


def _room(weights: np.ndarray, vw: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """[rows, k]: whether each part can take each row: under the cap in every constraint
    the row weighs in (one it adds nothing to does not stop it, even over the cap)."""
    after = weights[None, :, :] + vw[:, None, :]
    return np.all((vw[:, None, :] == 0) | (after <= caps), axis=2)


def _connections(g: RankGraph, parts: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """[rows, k]: each row's edge weight into each part."""
    everyone = g.with_ghosts(parts)
    starts, ends = g.indptr[rows], g.indptr[rows + 1]
    lengths = ends - starts
    offsets = np.cumsum(lengths) - lengths  # each row's first position among the gathered
    positions = np.repeat(starts - offsets, lengths) + np.arange(lengths.sum())
    row = np.repeat(np.arange(rows.size), lengths)
    flat = np.bincount(
        row * k + everyone[g.pos[positions]], weights=g.ew[positions], minlength=rows.size * k
    )
    return flat.reshape(rows.size, k).astype(np.int64)


def _argmax_rotated(score: np.ndarray, ids: np.ndarray, *salt: int) -> np.ndarray:
    """Per row the column of the largest score, ties to the first after a hashed start
    (so that ties do not all go to part 0)."""
    k = score.shape[1]
    if score.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    shift = (_hash(ids, *salt, 4) % np.uint64(k)).astype(np.int64)
    columns = (np.arange(k)[None, :] + shift[:, None]) % k
    rotated = np.take_along_axis(score, columns, axis=1)
    return columns[np.arange(score.shape[0]), np.argmax(rotated, axis=1)]


def _slots(gain: np.ndarray, ids: np.ndarray, *salt: int) -> np.ndarray:
    """A priority slot per move, 0 first: by gain (signed log2 buckets), then hash."""
    magnitude = np.minimum(np.floor(np.log2(np.abs(gain) + 1)).astype(np.int64) + 1, 32)
    bucket = np.where(gain > 0, 32 + magnitude, np.where(gain < 0, 32 - magnitude, 32))
    spread = (_hash(ids, *salt, 5) % np.uint64(HASH_BUCKETS)).astype(np.int64)
    return (SIGNED_GAIN_BUCKETS - 1 - bucket) * HASH_BUCKETS + spread


def _approve_into(
    g: RankGraph,
    weights: np.ndarray,
    caps: np.ndarray,
    rows: np.ndarray,
    target: np.ndarray,
    gain: np.ndarray,
    k: int,
    *salt: int,
) -> np.ndarray:
    """The moves each part takes: whole priority slots, best first, while it stays under
    `caps` in every constraint (from all ranks' summed histograms: the same on every rank)."""
    c = g.vw.shape[1]
    nslots = SIGNED_GAIN_BUCKETS * HASH_BUCKETS
    slot = _slots(gain, g.ids[rows], *salt)
    hist = np.zeros((k, nslots, c), dtype=np.int64)
    np.add.at(hist, (target, slot), g.vw[rows])
    hist = g.sum_all(hist)
    inflow = np.cumsum(hist, axis=1)
    fits = np.all((inflow == 0) | (weights[:, None, :] + inflow <= caps), axis=2)
    # A prefix of slots per part: the first that does not fit stops the part.
    taken = np.cumprod(fits, axis=1).sum(axis=1)
    accepted = slot < taken[target]
    # That first slot may hold many moves (a few gains are common): split it by another
    # hash into FINE_BUCKETS and take those of its buckets that still fit, in order.
    at_edge = slot == taken[target]
    before = np.concatenate([np.zeros((k, 1, c), np.int64), inflow], axis=1)
    before = before[np.arange(k), np.minimum(taken, nslots)]  # [k, c]: the whole slots'
    fine = (_hash(g.ids[rows], *salt, 8) % np.uint64(FINE_BUCKETS)).astype(np.int64)
    hist = np.zeros((k, FINE_BUCKETS, c), dtype=np.int64)
    np.add.at(hist, (target[at_edge], fine[at_edge]), g.vw[rows[at_edge]])
    inflow = before[:, None, :] + np.cumsum(g.sum_all(hist), axis=1)
    fits = np.all((inflow == 0) | (weights[:, None, :] + inflow <= caps), axis=2)
    taken_fine = np.cumprod(fits, axis=1).sum(axis=1)
    return accepted | (at_edge & (fine < taken_fine[target]))


def _shed(
    g: RankGraph,
    parts: np.ndarray,
    weights: np.ndarray,
    caps: np.ndarray,
    k: int,
    seed: int,
    level: int,
    sweep: int,
) -> np.ndarray:
    """Move vertices out of parts over the cap, cheapest first, to parts with room: a
    constraint at a time (the most over first), the others kept under the cap or, where
    some part is over it already, under the heaviest part (never made worse), so that
    one constraint no part can meet does not block the others."""
    c = g.vw.shape[1]
    nslots = SIGNED_GAIN_BUCKETS * HASH_BUCKETS
    for attempt in range(2):
        excess = (np.maximum(weights - caps, 0) / caps).max(axis=0)
        for j in np.argsort(-excess, kind="stable"):
            over = np.maximum(weights[:, j] - caps[j], 0)  # [k]
            if not over.any():
                continue
            limit = np.maximum(caps, weights.max(axis=0))
            limit[j] = caps[j]
            candidates = np.flatnonzero((over[parts] > 0) & (g.vw[:, j] > 0))
            conn = _connections(g, parts, candidates, k)
            own = conn[np.arange(candidates.size), parts[candidates]]
            fit = _room(weights, g.vw[candidates], limit)
            fit[np.arange(candidates.size), parts[candidates]] = False
            target = _argmax_rotated(
                np.where(fit, conn, np.iinfo(np.int64).min // 2), g.ids[candidates],
                seed, level, sweep, attempt, int(j),
            )  # fmt: skip
            has = fit[np.arange(candidates.size), target]
            rows, target = candidates[has], target[has]
            gain = conn[has][np.arange(rows.size), target] - own[has]
            source = parts[rows]
            # The source side: whole slots, best first, up to and including the first
            # where the excess is gone.
            salt = (seed, level, sweep, attempt, int(j))
            slot = _slots(gain, g.ids[rows], *salt, 6)
            out_hist = np.zeros((k, nslots), dtype=np.int64)
            np.add.at(out_hist, (source, slot), g.vw[rows, j])
            covered = np.cumsum(g.sum_all(out_hist), axis=1) >= over[:, None]
            needed = np.where(covered.any(axis=1), np.argmax(covered, axis=1) + 1, nslots)
            chosen = slot < needed[source]
            rows, target, gain = rows[chosen], target[chosen], gain[chosen]
            accepted = _approve_into(g, weights, limit, rows, target, gain, k, *salt, 7)
            rows, target = rows[accepted], target[accepted]
            delta = np.zeros((k, c), dtype=np.int64)
            np.add.at(delta, target, g.vw[rows])
            np.subtract.at(delta, parts[rows], g.vw[rows])
            weights = weights + g.sum_all(delta)
            parts[rows] = target
    return parts


# ---------------------------------------------------------------------------- the whole


def caps_of(g: RankGraph, totals: np.ndarray, num_parts: int, imbalance: float) -> np.ndarray:
    """The most of each constraint a part of level `g` may hold: `imbalance` x the even
    share, or the even share and one of the level's heaviest vertices where that is more
    (a vertex that outweighs the tolerance alone cannot be placed within it)."""
    import torch

    heaviest = g.vw.max(axis=0) if g.ids.size else np.zeros(g.vw.shape[1], np.int64)
    heaviest = g.comm.all_reduce_max(torch.from_numpy(heaviest.copy())).numpy()
    even = totals / num_parts
    return np.maximum(np.floor(even * imbalance), np.ceil(even) + heaviest).astype(np.int64)


def coarse_target(num_nodes: int, cfg: MultilevelPartitionerConfig) -> int:
    """METIS's own coarsening target (kmetis: max(n / (20 log2 k), 30 k)), capped."""
    k = cfg.num_parts
    return min(cfg.max_coarse_vertices, max(30 * k, int(num_nodes / (20 * math.log2(k)))))


def multilevel(g: RankGraph, cfg: MultilevelPartitionerConfig) -> tuple[np.ndarray, dict]:
    """The part of each of the rank's rows, and figures for the manifest."""
    k = cfg.num_parts
    n = g.count()
    if k == 1:
        return np.zeros(g.ids.size, dtype=np.int32), {"levels": 0}
    totals = g.sum_all(g.vw.sum(axis=0))
    target = coarse_target(n, cfg)
    largest = np.ceil(totals / target)
    levels: list[tuple[RankGraph, np.ndarray]] = []  # (fine graph, its rows' clusters)
    sizes = [n]
    while sizes[-1] > target and len(levels) < MAX_LEVELS:
        # Clusters grow gradually (at most CLUSTER_GROWTH x the level's mean vertex per
        # level): larger ones at once are made of ties, not structure, and lose the cut.
        growth = CLUSTER_GROWTH * totals / sizes[-1]
        cluster_caps = np.maximum(np.minimum(np.ceil(growth), largest), 1).astype(np.int64)
        labels = cluster(g, cluster_caps, cfg.seed, len(levels), cfg.coarsen_iterations)
        coarse = contract(g, labels)
        size = coarse.count()
        if size > 0.95 * sizes[-1]:  # no longer shrinking: partition this one
            break
        levels.append((g, labels))
        g = coarse
        sizes.append(size)
    parts = partition_coarsest(g, caps_of(g, totals, k, cfg.imbalance), k, cfg)
    for level in range(len(levels) - 1, -1, -1):
        fine, labels = levels[level]
        parts = lookup(g, parts, labels)
        g = fine
        caps = caps_of(g, totals, k, cfg.imbalance)
        parts = refine(g, parts, caps, k, cfg.seed, level, cfg.refine_iterations)
    info = {"levels": len(levels), "coarse_vertices": sizes, "constraints": int(totals.size)}
    return parts.astype(np.int32), info


@register_partitioner("multilevel", "edge_cut", MultilevelPartitionerConfig)
def multilevel_partition(dataset: GraphDataset, cfg: MultilevelPartitionerConfig) -> Assignment:
    """In one process on a prepared dataset: the ranks' algorithm with one rank."""
    indptr, indices = metis_adjacency(dataset)
    n = dataset.num_nodes
    weights = vertex_weights(dataset, cfg)
    g = RankGraph(
        alone(), np.array([0, n]), np.arange(n, dtype=np.int64), indptr,
        indices.astype(np.int64), np.ones(indices.size, dtype=np.int64), weights,
    )  # fmt: skip
    parts, info = multilevel(g, cfg)
    return Assignment(parts, info)


# ---------------------------------------------------------------- on the ranks, from chunks

# Bytes a rank holds at its peak per stored edge of its share of the symmetric graph,
# beside the process: measured 350-430 on synthetic-medium (1 and 2 ranks; rank 0 also
# runs METIS on the coarsest graph). Each level keeps the neighbour, its weight, its
# place among the ghosts and its row (8 each); the coarser levels, the sorts of a
# contraction and the first build from the received pairs come on top.
BYTES_PER_EDGE = 448
BYTES_PER_VERTEX = 160  # ids, weights per constraint, labels, parts, cluster weights


def rank_graph_from_chunks(
    comm: Communicator,
    graph: ChunkedGraph,
    cfg: MultilevelPartitionerConfig,
    plan: RoundPlan,
    share: tuple[int, int],
    figures: RankFigures,
    spill: Path,
) -> RankGraph:
    """This rank's range [N r / W, N (r + 1) / W) of the symmetric graph, with the vertex
    weights `vertex_weights` gives a prepared dataset: the listed edges go to the rank of
    each end a round at a time (spilled to `spill`), then are sorted, self-loops and
    duplicates gone, as `gnnrun data prepare` and METIS's input drop them."""
    n, world, rank = graph.num_nodes, comm.world_size, comm.rank
    bounds = np.array([n * r // world for r in range(world + 1)], dtype=np.int64)
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    with open(spill, "wb") as out:
        exchange_edges(
            comm, graph, plan, share,
            lambda dst: np.searchsorted(bounds, dst, side="right") - 1,
            lambda received: out.write(received.tobytes()), figures, mirror=True,
        )  # fmt: skip
    pairs = np.fromfile(spill, dtype=np.int64).reshape(-1, 2)
    spill.unlink()
    row, nbr = pairs[:, 0] - lo, pairs[:, 1]
    del pairs
    incoming = nbr >= 0  # an in-edge (every stored edge on an undirected graph)
    nbr = np.where(incoming, nbr, -1 - nbr)
    span = hi - lo
    in_degree = np.bincount(sorted_unique(row[incoming] * n + nbr[incoming]) // n, minlength=span)
    keys = sorted_unique(row * n + nbr)
    del row, nbr, incoming
    rows = keys // n
    indptr = np.zeros(span + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=span), out=indptr[1:])
    nbr = keys - rows * n
    del keys, rows
    columns = [np.ones(span, dtype=np.int64)]
    if cfg.balance_edges:
        columns.append(in_degree.astype(np.int64))
    if cfg.balance_splits:
        for split in ("train_idx", "val_idx", "test_idx"):
            column = np.zeros(span, dtype=np.int64)
            for ids in graph.read_split(split):
                column[ids[(ids >= lo) & (ids < hi)] - lo] = 1
            columns.append(column)
    vw = np.stack(columns, axis=1)
    import torch

    totals = comm.all_reduce_sum(torch.from_numpy(vw.sum(axis=0))).numpy()
    vw = np.ascontiguousarray(vw[:, totals > 0])  # METIS rejects empty constraints
    ew = np.ones(nbr.size, dtype=np.int64)
    return RankGraph(comm, bounds, np.arange(lo, hi, dtype=np.int64), indptr, nbr, ew, vw)
