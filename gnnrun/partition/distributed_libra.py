"""Libra on the job's ranks, from chunked input: the vertex-cut partition one process makes.

`gnnrun partition dataset=chunked ... partitioner=libra` runs here. One-process Libra
(gnnrun.partition.libra) streams the edges in `partitioner.rounds` rounds of
`partitioner.streams` parallel streams; an edge's round and stream come from a seeded
hash of its endpoints, and a stream's decisions depend on the replica masks and part
loads of its round's start and its own edges alone. So rank r runs the streams s with
s mod W = r, and the ranks exchange the state between rounds; the result is the
assignment of one process, whatever W is. Each rank

1. reads its share of the listed edges, a round of the memory plan at a time, drops
   self-loops, makes each undirected edge one pair (u <= v: one decision per vertex
   pair), and sends each pair to the rank running its stream; what arrives is spilled;
2. loads its pairs (about 1/W of them), sorts them into stream order and drops
   duplicates; for the `lower_degree` rule each vertex's degree is summed at the
   vertex's owner (rank r owns the vertex ids [N r / W, N (r + 1) / W) and keeps their
   replica masks, 8 bytes each, and degrees, 8 more);
3. for each round: asks the owners for the masks (and degrees) of its round's
   endpoints, runs its streams (the native kernel, as one process does), and sends the
   bits its streams added to the owners (who OR them in before answering) and its
   load increments to every rank, with the next round's questions;
4. at the owners, turns the final masks into the clone table: each vertex's parts, its
   root part (the (v mod k)-th of its k parts, as gnnrun.partition.vertex_cut does), its
   local id in each part (a count over the lower ids: the counts of the lower ranges
   fix where a range starts), node_owner.npy / node_local.npy for its range, and the
   members and clone links of each part, sent to the rank writing that part;
5. sends each of its edges (both directions of an undirected pair) to the rank writing
   its part (part p: rank p mod W), spilled there;
6. writes its parts from the spills, with the features and labels of the parts'
   vertices copied from the row files: the arrays gnnrun.partition.vertex_cut writes
   in one process, byte for byte.

No rank holds the whole graph, a mask per vertex of the graph, or all features: a rank
holds its share of the pairs (step 2-3: about 25 bytes per pair and a part id), 16
bytes per vertex of its range, one round's endpoints, and afterwards the part it builds.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.data.chunked import ChunkedGraph, open_chunked
from gnnrun.data.chunked_ranks import (
    BYTES_PER_SOLID,
    GIB,
    MIB,
    ROWS_PER_STEP,
    RankFigures,
    check_ids,
    npy_record,
    plan_rounds,
    read_listed,
    say,
    split_ids,
    steps,
    write_part_rows,
)
from gnnrun.data.graph import check_edge_keys, index_dtype, sorted_unique
from gnnrun.errors import GnnrunError
from gnnrun.io import (
    mapped_rows,
)
from gnnrun.partition.book import part_dir_name
from gnnrun.partition.distributed import finish_rank
from gnnrun.partition.edge_cut import imbalance
from gnnrun.partition.libra import group_bounds, libra_stream, stream_keys, stream_order

# Spill files in the partition's temporary folder.
PAIRS = ".libra-pairs-rank{rank}.bin"  # the pairs of this rank's streams, [u, v] int64
EDGES = ".libra-edges-part{part}.bin"  # a part's edges, [dst, src] int64
MEMBERS = ".libra-members-part{part}.bin"  # a part's vertices, [vertex, root part, clones]
LINKS = ".libra-links-part{part}.bin"  # [my local, other part, other local, vertex]
# Bytes a rank holds per pair of its streams while it runs them: u, v and the group
# (int64), the part (int8), and the sort that puts them in stream order.
BYTES_PER_PAIR = 72
# Kinds of the rows of a round's first exchange (`_run_rounds`).
BITS, ASK, LOAD = 0, 1, 2
# Bytes an owner holds per vertex of its range: the replica mask and the degree.
BYTES_PER_OWNED = 16


def _send(comm, rows: np.ndarray, to_rank: np.ndarray, world: int, purpose: str) -> np.ndarray:
    """Rows of int64 to the ranks `to_rank`; the rows received, grouped by sender."""
    import torch

    order = np.argsort(to_rank, kind="stable")
    counts = np.bincount(to_rank, minlength=world).astype(np.int64)
    payload = torch.from_numpy(np.ascontiguousarray(rows[order], dtype=np.int64))
    return comm.exchange_rows(payload, torch.from_numpy(counts), purpose).numpy()


class Owners:
    """Which rank owns a vertex id: rank r the range [N r / W, N (r + 1) / W)."""

    def __init__(self, n: int, world: int) -> None:
        self.bounds = np.array([n * r // world for r in range(world + 1)], dtype=np.int64)

    def of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.bounds, ids, side="right") - 1

    def range(self, rank: int) -> tuple[int, int]:
        return int(self.bounds[rank]), int(self.bounds[rank + 1])


def partition_on_rank(cfg, rank: int, tmp_dir: str) -> dict[str, Any]:
    """One rank's share of a distributed Libra partition into `tmp_dir` (in its process
    group): steps 1-6 of the module docstring."""
    import torch

    from gnnrun.comm import Communicator
    from gnnrun.memory import PeakMemory, resident_mb

    start = time.perf_counter()
    comm = Communicator()
    world = comm.world_size
    tmp = Path(tmp_dir)
    pcfg = cfg.partitioner
    graph = open_chunked(cfg.dataset.path)
    n, num_parts = graph.num_nodes, pcfg.num_parts
    streams = pcfg.streams
    mine = [p for p in range(num_parts) if p % world == rank]
    figures = RankFigures(rank, world)
    peak = PeakMemory()
    owners = Owners(n, world)
    lo, hi = owners.range(rank)

    baseline = torch.tensor([resident_mb() * MIB], dtype=torch.float64)
    comm.all_reduce_max(baseline)
    figures.baseline_mb = float(baseline.item()) / MIB
    total = graph.num_edges
    share = (total * rank // world, total * (rank + 1) // world)
    directions = 2 if graph.undirected else 1
    # The busiest rank's figures on every rank, so that all plan the same rounds: its pairs
    # (the streams it runs, a stream's share rounded up) or its parts' edges, whichever is
    # more, and its range or its parts' vertices (a vertex cut replicates: twice, say).
    pairs = math.ceil(total / streams * 1.1) * math.ceil(streams / world)
    part_edges = math.ceil(total * directions / num_parts * 1.1) * math.ceil(num_parts / world)
    plan = plan_rounds(
        None if pcfg.memory_gb is None else int(pcfg.memory_gb * GIB),
        int(baseline.item()),
        share_edges=math.ceil(total / world),
        directions=directions,
        part_edges=max(part_edges, math.ceil(pairs * BYTES_PER_PAIR / 72)),
        part_vertices=math.ceil(n / world) * BYTES_PER_OWNED // BYTES_PER_SOLID
        + math.ceil(2 * n / num_parts) * math.ceil(num_parts / world),
        row_bytes=graph.feat_dim * 4 + 8,
    )
    figures.rounds, figures.round_edges = plan.rounds, plan.round_edges
    runs = len(range(rank, streams, world))
    say(
        rank,
        f"{share[1] - share[0]:,} edges to read in {plan.rounds} rounds of "
        f"{plan.round_edges:,}; runs {runs} of the {streams} streams (those = {rank} mod {world})",
    )

    # 1. The pairs, to the rank running their stream.
    t = time.perf_counter()
    pairs_path = tmp / PAIRS.format(rank=rank)
    _route_pairs(comm, graph, pcfg, plan, share, pairs_path, figures)
    figures.seconds["exchange_s"] = time.perf_counter() - t

    # 2. This rank's pairs in stream order, duplicates dropped; the owners' degrees.
    t = time.perf_counter()
    u, v, group = _stream_pairs(pairs_path, n, pcfg)
    pairs_path.unlink()
    masks = np.zeros(hi - lo, dtype=np.int64)
    degree = None
    if pcfg.rule == "lower_degree":
        ends = np.sort(np.concatenate([u, v]))
        starts = np.flatnonzero(np.r_[True, ends[1:] != ends[:-1]]) if ends.size else ends
        ids, counts = ends[starts], np.diff(np.r_[starts, ends.size])
        del ends, starts
        got = _send(comm, np.stack([ids, counts], axis=1), owners.of(ids), world, "degree")
        degree = np.bincount(got[:, 0] - lo, weights=got[:, 1], minlength=hi - lo)
        degree = degree.astype(np.int64)
        del ids, counts, got

    # 3. The rounds.
    parts = _run_rounds(comm, u, v, group, masks, degree, owners, pcfg, figures)
    figures.seconds["libra_s"] = time.perf_counter() - t

    # 4. The clone table at the owners; node_owner / node_local; members and links.
    t = time.perf_counter()
    split = _clone_table(comm, masks, lo, n, num_parts, world, tmp, figures)
    del masks, degree
    figures.seconds["clone_table_s"] = time.perf_counter() - t

    # 5. The edges, to the ranks writing their parts.
    t = time.perf_counter()
    _route_part_edges(comm, u, v, parts, graph.undirected, plan, num_parts, mine, tmp, figures)
    del u, v, group, parts
    figures.seconds["part_edges_s"] = time.perf_counter() - t

    # 6. The parts.
    t = time.perf_counter()
    records: dict[str, Any] = {}
    part_figures: dict[int, dict[str, Any]] = {}
    for p in mine:
        files, part_figures[p] = _write_part(
            cfg, graph, p, tmp, plan, int(baseline.item()), figures
        )
        records |= files
        figures.parts_written += 1
        say(
            rank,
            f"part {p} written: {part_figures[p]['vertices']:,} vertices, "
            f"{part_figures[p]['edges']:,} edges",
        )
    figures.seconds["parts_s"] = time.perf_counter() - t
    finish_rank(comm, tmp, n, records, figures, peak, start)
    return {
        "records": records,
        "parts": part_figures,
        "split_vertices": split,
        "figures": figures.__dict__,
    }


def _route_pairs(comm, graph: ChunkedGraph, pcfg, plan, share, path: Path, figures) -> None:
    """Step 1: read [share) a round at a time; each pair to the rank running its stream."""
    n, world = graph.num_nodes, figures.world
    total = comm.max_int(plan.rounds)
    with open(path, "wb") as spill:
        for round_ in range(total):
            a = min(share[1], share[0] + round_ * plan.round_edges)
            src, dst = read_listed(graph, a, min(share[1], a + plan.round_edges))
            figures.edges_read += int(src.size)
            check_ids(graph, src, dst)
            kept = src != dst
            src, dst = src[kept], dst[kept]
            if graph.undirected:  # one decision per vertex pair: the pair with u <= v
                src, dst = np.minimum(src, dst), np.maximum(src, dst)
            _, group = stream_keys(src, dst, n, pcfg.seed, pcfg.streams, pcfg.rounds)
            to_rank = (group % pcfg.streams) % world
            received = _send(comm, np.stack([src, dst], axis=1), to_rank, world, "edges")
            spill.write(received.tobytes())
            sent = int(np.count_nonzero(to_rank != figures.rank))
            figures.edges_sent += sent
            figures.bytes_sent += sent * 16
            figures.edges_received += int(received.shape[0])
            figures.bytes_received += int(received.nbytes)
            if total <= 10 or (round_ + 1) % max(1, total // 10) == 0 or round_ + 1 == total:
                say(
                    figures.rank,
                    f"read {round_ + 1}/{total}: {figures.edges_read:,} edges read, "
                    f"{figures.edges_received:,} pairs received",
                )


def _stream_pairs(path: Path, n: int, pcfg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 2: the spilled pairs in stream order (by hash), duplicates dropped; (u, v, group)."""
    pairs = np.fromfile(path, dtype=np.int64).reshape(-1, 2)
    u, v = pairs[:, 0].copy(), pairs[:, 1].copy()
    del pairs
    h, group = stream_keys(u, v, n, pcfg.seed, pcfg.streams, pcfg.rounds)
    order = stream_order(h)
    h = h[order]
    first = np.ones(h.size, dtype=bool)  # equal hashes: equal pairs, now adjacent
    np.not_equal(h[1:], h[:-1], out=first[1:])
    order = order[first]
    return u[order], v[order], group[order]


def _run_rounds(comm, u, v, group, masks, degree, owners: Owners, pcfg, figures) -> np.ndarray:
    """Step 3: every round of the stream; the part of each of this rank's pairs. `masks`
    (this rank's range) is updated as the owner's copy.

    A round is two exchanges. The first brings the owners the bits the previous round's
    streams added (BITS rows: vertex, bits) and the round's endpoints (ASK rows: vertex,
    sender), and every rank the previous round's load increments of every rank (LOAD
    rows: part, count); the owners apply all bits before they answer, in the second."""
    world, rank = figures.world, figures.rank
    lo = owners.range(rank)[0]
    streams, rounds, num_parts = pcfg.streams, pcfg.rounds, pcfg.num_parts
    starts = np.searchsorted(group // streams, np.arange(rounds + 1))
    parts = np.empty(u.size, dtype=np.int8)
    load = np.zeros(num_parts, dtype=np.int64)
    news = np.zeros((0, 3), dtype=np.int64)  # the last round's BITS and LOAD rows
    news_to = np.zeros(0, dtype=np.int64)  # and their ranks
    for r in range(rounds + 1):  # the last pass only delivers the last round's bits
        a, b = (int(starts[r]), int(starts[r + 1])) if r < rounds else (u.size, u.size)
        ur, vr = u[a:b], v[a:b]
        ids = sorted_unique(np.concatenate([ur, vr]))
        ask = np.stack([np.full(ids.size, ASK), ids, np.full(ids.size, rank)], axis=1)
        rows = np.concatenate([news, ask])
        got = _send(comm, rows, np.r_[news_to, owners.of(ids)], world, "masks")
        kind = got[:, 0]
        bits = kind == BITS
        np.bitwise_or.at(masks, got[bits, 1] - lo, got[bits, 2])
        loads = got[kind == LOAD]
        np.add.at(load, loads[:, 1], loads[:, 2])
        if r and (rounds <= 10 or r % max(1, rounds // 10) == 0 or r == rounds):
            say(rank, f"libra round {r}/{rounds}: {int(load.sum()):,} pairs assigned")
        if r == rounds:
            break
        # The answers, in the order of the asks; ids are increasing, so grouped by owner:
        # they come back in the order of ids.
        asked = got[kind == ASK]
        local = asked[:, 1] - lo
        answer = np.stack(
            [masks[local], np.zeros_like(local) if degree is None else degree[local]], axis=1
        )
        answer = _answer(comm, answer, asked[:, 2], owners.of(ids), world)
        held = answer[:, 0].copy()
        before = held.copy()
        mine = load.copy()  # the kernel adds this rank's streams' edges to it
        bounds, stream = group_bounds(group[a:b], streams)
        parts[a:b] = libra_stream(
            np.searchsorted(ids, ur), np.searchsorted(ids, vr), bounds, stream,
            np.array([0, stream.size], dtype=np.int64), held, mine, num_parts, pcfg.slack,
            float(streams), None if degree is None else answer[:, 1].copy(),
        )  # fmt: skip
        changed = held != before
        new_bits = np.stack([np.full(int(changed.sum()), BITS), ids[changed], held[changed]], 1)
        # This rank's edges per part, to every rank: [LOAD, part, count] for each (part, rank).
        part_of_row = np.repeat(np.arange(num_parts), world)
        new_loads = np.stack(
            [np.full(part_of_row.size, LOAD), part_of_row, (mine - load)[part_of_row]], 1
        )
        news = np.concatenate([new_bits, new_loads])
        news_to = np.r_[owners.of(ids[changed]), np.tile(np.arange(world), num_parts)]
    return parts


def _answer(comm, rows: np.ndarray, to_rank: np.ndarray, asked_of: np.ndarray, world: int):
    """The owners' answers (grouped by asker, in the order asked) back to the askers, in
    one all-to-all: both sides know the sizes (the asks each owner got; the asks each
    rank sent, `asked_of` their owners), so no exchange of sizes first."""
    import torch

    send = np.bincount(to_rank, minlength=world).tolist()
    receive = np.bincount(asked_of, minlength=world).tolist()
    out = torch.empty((sum(receive), 2), dtype=torch.int64)
    rows_t = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))
    work = comm.all_to_all_start(out, rows_t, receive, send)
    if work is None:  # one process: the answers are its own
        return rows
    work.wait()
    return out.numpy()


def _clone_table(comm, masks, lo: int, n: int, num_parts: int, world: int, tmp: Path, figures):
    """Step 4 at the owner of [lo, lo + masks.size): node_owner / node_local of the range,
    and each part's members and clone links, spilled at the rank writing the part. The
    number of split vertices of the range."""
    import torch

    rank = figures.rank
    hi = lo + masks.size
    bit = np.arange(num_parts, dtype=np.uint64)

    def held(a: int, b: int) -> np.ndarray:
        """[b - a, P] bools: the parts of vertices [a, b); a vertex with no edge lives in
        part v mod P (gnnrun.partition.vertex_cut)."""
        m = masks[a - lo : b - lo].view(np.uint64)
        ids = np.arange(a, b, dtype=np.uint64)
        m = np.where(m == 0, np.uint64(1) << (ids % np.uint64(num_parts)), m)
        return ((m[:, None] >> bit) & np.uint64(1)).astype(bool)

    counts = np.zeros(num_parts, dtype=np.int64)
    for a, b in steps(lo, hi, ROWS_PER_STEP):
        counts += held(a, b).sum(axis=0)
    every = comm.all_gather(torch.from_numpy(counts))
    running = torch.stack(every[:rank]).sum(0).numpy() if rank else np.zeros(num_parts, np.int64)
    if rank == 0:
        mapped_rows(tmp / "node_owner.npy", (n,), np.int32).flush()
        mapped_rows(tmp / "node_local.npy", (n,), np.int64).flush()
    comm.barrier()
    owner = np.lib.format.open_memmap(tmp / "node_owner.npy", mode="r+")
    local_of = np.lib.format.open_memmap(tmp / "node_local.npy", mode="r+")
    spills: dict[str, dict[int, Any]] = {"members": {}, "links": {}}
    split_vertices = 0
    todo = steps(lo, hi, ROWS_PER_STEP)
    for i in range(comm.max_int(len(todo))):
        a, b = todo[i] if i < len(todo) else (hi, hi)
        bits = held(a, b)
        ids = np.arange(a, b, dtype=np.int64)
        clones = bits.sum(axis=1)
        local = running + np.cumsum(bits, axis=0) - 1  # where bits: the id in that part
        running = running + bits.sum(axis=0)
        nth = np.cumsum(bits, axis=1)
        root = np.argmax(bits & (nth == (ids % np.maximum(clones, 1) + 1)[:, None]), axis=1)
        rows = np.arange(b - a)
        owner[a:b] = root
        local_of[a:b] = local[rows, root]
        split_vertices += int(np.count_nonzero(clones > 1))
        # Members: [part, vertex, root part, clones] for every (vertex, part) held.
        vertex_i, part_i = np.nonzero(bits)
        members = np.stack(
            [part_i, ids[vertex_i], root[vertex_i], clones[vertex_i]], axis=1
        ).astype(np.int64)
        # Links of split vertices: a leaf's row to its root, the root's row to each leaf:
        # [holder, my local, other part, other local, vertex].
        leaf = (clones[vertex_i] > 1) & (part_i != root[vertex_i])
        lv, lp, rp = vertex_i[leaf], part_i[leaf], root[vertex_i[leaf]]
        leaf_local, root_local = local[lv, lp], local[lv, rp]
        links = np.concatenate(
            [
                np.stack([lp, leaf_local, rp, root_local, ids[lv]], axis=1),
                np.stack([rp, root_local, lp, leaf_local, ids[lv]], axis=1),
            ]
        ).astype(np.int64)
        for kind, table in (("members", members), ("links", links)):
            got = _send(comm, table, table[:, 0] % world, world, kind)
            for p in np.unique(got[:, 0]).tolist():
                if p not in spills[kind]:
                    name = (MEMBERS if kind == "members" else LINKS).format(part=p)
                    spills[kind][p] = open(tmp / name, "wb")  # noqa: SIM115
                spills[kind][p].write(np.ascontiguousarray(got[got[:, 0] == p, 1:]).tobytes())
    for files in spills.values():
        for f in files.values():
            f.close()
    owner.flush()
    local_of.flush()
    return split_vertices


def _route_part_edges(comm, u, v, parts, undirected, plan, num_parts, mine, tmp, figures) -> None:
    """Step 5: each edge (both directions of an undirected pair) to its part's writer."""
    world = figures.world
    spills = {p: open(tmp / EDGES.format(part=p), "wb") for p in mine}  # noqa: SIM115
    try:
        todo = steps(0, u.size, max(plan.round_edges, 1))
        for i in range(comm.max_int(len(todo))):
            a, b = todo[i] if i < len(todo) else (u.size, u.size)
            p, src, dst = parts[a:b].astype(np.int64), u[a:b], v[a:b]
            if undirected:
                p, src, dst = np.r_[p, p], np.r_[src, dst], np.r_[dst, src]
            got = _send(comm, np.stack([p, dst, src], axis=1), p % world, world, "part edges")
            for q in mine:
                spills[q].write(np.ascontiguousarray(got[got[:, 0] == q, 1:]).tobytes())
    finally:
        for spill in spills.values():
            spill.close()


def _read_spill(path: Path, columns: int) -> np.ndarray:
    if not path.exists():
        return np.zeros((0, columns), dtype=np.int64)
    out = np.fromfile(path, dtype=np.int64).reshape(-1, columns)
    path.unlink()
    return out


def _write_part(
    cfg, graph: ChunkedGraph, part: int, tmp: Path, plan, baseline: int, figures: RankFigures
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Step 6: part `part` from its spills, as gnnrun.partition.vertex_cut.VertexCutBuilder
    writes it: the same arrays, the same bytes."""
    n = graph.num_nodes
    members = _read_spill(tmp / MEMBERS.format(part=part), 3)
    members = members[np.argsort(members[:, 0], kind="stable")]
    nodes, root_part, clones = members[:, 0].copy(), members[:, 1], members[:, 2]
    edges = _read_spill(tmp / EDGES.format(part=part), 2)
    if cfg.partitioner.memory_gb is not None:  # the real sizes, against the budget again
        plan_rounds(
            plan.budget_bytes, baseline, 0, 1, edges.shape[0], nodes.size,
            graph.feat_dim * 4 + 8,
        )  # fmt: skip
    check_edge_keys(n, n)
    keys = np.sort(edges[:, 0] * n + edges[:, 1])  # in-CSR order: by (dst, src)
    del edges
    dst = keys // n
    src = keys - dst * n
    del keys
    indptr = np.zeros(nodes.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.searchsorted(nodes, dst), minlength=nodes.size), out=indptr[1:])
    indices = np.searchsorted(nodes, src).astype(index_dtype(n))
    num_edges = int(dst.size)
    del dst, src
    links = _read_spill(tmp / LINKS.format(part=part), 4)
    links = links[np.lexsort((links[:, 3], links[:, 1]))][:, :3]  # by other part, vertex

    folder = tmp / part_dir_name(part)
    folder.mkdir()
    prefix = f"{part_dir_name(part)}/"
    records: dict[str, Any] = {}

    def save(name: str, array: np.ndarray) -> None:
        np.save(folder / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        records[prefix + f"{name}.npy"] = npy_record(
            folder / f"{name}.npy", array.shape, array.dtype
        )

    save("nodes", nodes)
    save("indptr", indptr)
    save("indices", indices)
    save("root_part", root_part.astype(np.int32))
    save("clone_links", np.ascontiguousarray(links, dtype=np.int64))
    del indices, links
    rows, label = write_part_rows(cfg, graph, folder, nodes, figures)
    records |= {prefix + name: record for name, record in rows.items()}
    save("label", label)
    split_sizes = {}
    for split in ("train_idx", "val_idx", "test_idx"):
        found = []
        for ids in split_ids(graph, split):
            at = np.minimum(np.searchsorted(nodes, ids), max(nodes.size - 1, 0))
            if nodes.size:
                found.append(at[(nodes[at] == ids) & (root_part[at] == part)])
        local = np.sort(np.concatenate(found + [np.zeros(0, np.int64)]))
        if local.size and np.any(label[local] < 0):
            raise GnnrunError(
                f"chunked graph {graph.metadata_path}: {split} contains unlabelled vertices"
            )
        save(split, local.astype(np.int64))
        split_sizes[split] = int(local.size)
    part_figures = {
        "vertices": int(nodes.size),
        "split_vertices": int(np.count_nonzero(clones > 1)),
        "roots": int(np.count_nonzero(root_part == part)),
        "edges": num_edges,
        "train": split_sizes["train_idx"],
        "val": split_sizes["val_idx"],
        "test": split_sizes["test_idx"],
    }
    return records, part_figures


# ------------------------------------------------------------------ the manifest


MANIFEST_KIND = "vertex_cut"


def manifest_summary(
    figures: list[dict[str, Any]], results: list[dict[str, Any]], num_nodes: int
) -> dict[str, Any]:
    """The manifest's summary (gnnrun.partition.distributed.partition_chunked writes it)."""
    split = sum(r["split_vertices"] for r in results)
    return {
        "replication_factor": sum(f["vertices"] for f in figures) / max(num_nodes, 1),
        "split_vertices": split,
        "split_fraction": split / max(num_nodes, 1),
        "imbalance": imbalance(figures, ("edges", "vertices", "train")),
    }
