"""Partitioning chunked input on the job's ranks, each with bounded memory.

`gnnrun partition dataset=chunked dataset.path=.../metadata.json partitioner=random`
runs here (gnnrun.job): the job's ranks (launched as for training: cluster=local, hosts
or slurm; gnnrun.launch.rank.in_announced_dir gives them node 0's directory) each

1. compute the parts of their range of vertex ids (a `RankAssigner`: `hash_parts`, the
   function the one-process `partitioner=random` uses, so the assignment is the same;
   or gnnrun.partition.multilevel on the ranks together) and write that range of
   node_owner.npy / node_local.npy (a vertex's local id is its rank among its part's
   vertices: the counts of the ranks before fix where a range starts). Where a part is
   not computed from the id alone, a rank reads other vertices' parts back from
   node_owner.npy (memory-mapped, on the shared storage the parts are written to);
2. read their share of the listed edges, a round at a time, add reverse edges where
   the graph is undirected, and send each edge to the rank that writes the part of its
   destination (all_to_all_single, counts first); what arrives is appended to a spill
   file on disk, so a round holds only its own edges;
3. build each of their parts from the spill (in-CSR of the solid vertices, halos,
   local ids, exactly as gnnrun.partition.edge_cut does in one process), and copy the
   features and labels of the part's vertices from the row files, a file at a time.
   (Every rank reads the row files its vertices are in: the files are on storage every
   host shares, and hash-assigned vertices are in every file.)

Part p is written by rank p mod world size. No rank holds more than its parts, its
spill and one round (and, for multilevel, its share of the graph while it assigns);
none holds the whole graph, node_owner, or the features. The
launching process writes the manifest (the same fields as the one-process writer, with
per-rank figures under `distributed`) and renames the directory into place.

Memory: `partitioner.memory_gb` (GiB per rank) bounds a rank's peak resident memory.
`plan_rounds` sizes the rounds to fit what is left after the process itself (measured
at start, the largest rank's) and the part it builds (estimated from the edge count);
a budget that cannot hold the smallest round and the part is refused at start, naming
the smallest budget that works. After the exchange, the part's real edge count is
checked again. Every rank's peak (VmHWM) is recorded in the manifest.

Memory planning and the edge exchange are shared with preparing on the ranks
(gnnrun.data.chunked_ranks, gnnrun.data.prepare_ranks).

Libra runs on the ranks too, in its own module (gnnrun.partition.distributed_libra, named
in RANK_PARTITIONERS). What is not here yet: heterogeneous graphs and `dataset.reorder`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.data.chunked import ChunkedGraph, open_chunked
from gnnrun.data.chunked_ranks import (
    GIB,
    MIB,
    ROWS_PER_STEP,
    RankFigures,
    exchange_edges,
    npy_record,
    plan_rounds,
    say,
    split_ids,
    steps,
    write_part_rows,
)
from gnnrun.data.graph import index_dtype, sorted_unique
from gnnrun.errors import GnnrunError
from gnnrun.io import (
    atomic_directory,
    mapped_rows,
    mark_verified,
    write_json,
    writer_lock,
)
from gnnrun.partition.book import FORMAT_VERSION, PartitionBook, open_partition, part_dir_name
from gnnrun.partition.edge_cut import imbalance
from gnnrun.partition.random import hash_parts
from gnnrun.partition.write import partitioner_identity

SPILL = ".spill-part{part}.bin"  # the received edges of one part, [dst, src] int64 pairs

# partitioner name -> the module whose `partition_on_rank`, MANIFEST_KIND and
# manifest_summary run it on the ranks from chunked input (the others run in one
# process). This module runs the edge cuts, each with its RankAssigner (RANK_ASSIGNERS).
RANK_PARTITIONERS = {
    "random": __name__,
    "multilevel": __name__,
    "libra": "gnnrun.partition.distributed_libra",
}
DISTRIBUTED_PARTITIONERS = tuple(RANK_PARTITIONERS)


def supports(name: str) -> bool:
    return name in DISTRIBUTED_PARTITIONERS


def _elsewhere(name: str):
    """The module that runs partitioner `name` on the ranks when it is not this one."""
    import importlib

    module = RANK_PARTITIONERS.get(name, __name__)
    return None if module == __name__ else importlib.import_module(module)


@dataclass(frozen=True)
class RankAssigner:
    """How the ranks of an edge-cut partition learn the parts of vertices.

    `assign(cfg, comm, graph, context)` returns `parts(a, b)`: the parts of the ids [a, b)
    within the rank's range (computed by the ranks together, collectively). `by_id`: the
    part of any id from the id alone (no file read); None: every rank reads the parts
    of other ranks' vertices from node_owner.npy, which the ranks write first."""

    assign: Callable[..., Callable[[int, int], np.ndarray]]
    by_id: Callable[[Any, ChunkedGraph], Callable[[np.ndarray], np.ndarray]] | None = None
    # An edge read twice (once to assign, once to build the parts) in every direction.
    assigns_from_edges: bool = False


def _random_assign(cfg, comm, graph: ChunkedGraph, context: dict[str, Any]):
    n, num_parts, seed = graph.num_nodes, cfg.partitioner.num_parts, cfg.partitioner.seed
    return lambda a, b: hash_parts(np.arange(a, b), n, num_parts, seed)


def _random_by_id(cfg, graph: ChunkedGraph) -> Callable[[np.ndarray], np.ndarray]:
    pcfg = cfg.partitioner
    return lambda ids: hash_parts(ids, graph.num_nodes, pcfg.num_parts, pcfg.seed)


def _multilevel_assign(cfg, comm, graph: ChunkedGraph, context: dict[str, Any]):
    from gnnrun.partition.multilevel import multilevel, rank_graph_from_chunks

    figures: RankFigures = context["figures"]
    g = rank_graph_from_chunks(
        comm, graph, cfg.partitioner, context["plan"], context["share"], figures,
        context["tmp"] / f".graph-rank{comm.rank}.bin",
    )  # fmt: skip
    parts, info = multilevel(g, cfg.partitioner)
    context["info"] = info
    lo = int(g.ids[0]) if g.ids.size else 0
    return lambda a, b: parts[a - lo : b - lo]


# partitioner name -> how its edge-cut assignment is made on the ranks.
RANK_ASSIGNERS: dict[str, RankAssigner] = {
    "random": RankAssigner(_random_assign, _random_by_id),
    "multilevel": RankAssigner(_multilevel_assign, assigns_from_edges=True),
}


def _group_ranks(parts: np.ndarray) -> np.ndarray:
    """Each element's rank among the earlier elements with its value (a cumulative count)."""
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    starts = np.flatnonzero(np.r_[True, sorted_parts[1:] != sorted_parts[:-1]])
    within = np.arange(parts.size) - np.repeat(starts, np.diff(np.r_[starts, parts.size]))
    out = np.empty(parts.size, dtype=np.int64)
    out[order] = within
    return out


def partition_on_rank(cfg, rank: int, tmp_dir: str) -> dict[str, Any]:
    """One rank's share of a distributed partition into `tmp_dir` (in its process group)."""
    elsewhere = _elsewhere(cfg.partitioner.name)
    if elsewhere is not None:
        return elsewhere.partition_on_rank(cfg, rank, tmp_dir)
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
    assigner = RANK_ASSIGNERS[pcfg.name]
    mine = [p for p in range(num_parts) if p % world == rank]
    figures = RankFigures(rank, world)
    peak = PeakMemory()

    # Plan the rounds on every rank from the same figures: the largest baseline and share.
    baseline = torch.tensor([resident_mb() * MIB], dtype=torch.float64)
    comm.all_reduce_max(baseline)
    figures.baseline_mb = float(baseline.item()) / MIB
    total = graph.num_edges
    share = (total * rank // world, total * (rank + 1) // world)
    directions = 2 if graph.undirected or assigner.assigns_from_edges else 1
    plan = plan_rounds(
        None if pcfg.memory_gb is None else int(pcfg.memory_gb * GIB),
        int(baseline.item()),
        share_edges=math.ceil(total / world),
        directions=directions,
        part_edges=math.ceil(total * directions / num_parts * 1.1),
        # The same figures on every rank (the busiest one's), so all plan the same rounds.
        part_vertices=math.ceil(n / num_parts) * math.ceil(num_parts / world),
        row_bytes=graph.feat_dim * 4 + 8,
    )
    figures.rounds, figures.round_edges = plan.rounds, plan.round_edges
    if assigner.assigns_from_edges:
        _check_graph_budget(pcfg, plan, int(baseline.item()), total, n, world)
    say(
        rank,
        f"{share[1] - share[0]:,} edges to read in {plan.rounds} rounds of {plan.round_edges:,}",
    )

    # 1. The vertex maps, this rank's range of them.
    t = time.perf_counter()
    lo, hi = n * rank // world, n * (rank + 1) // world
    context = {"plan": plan, "share": share, "figures": figures, "tmp": tmp}
    range_parts = assigner.assign(cfg, comm, graph, context)
    figures.seconds["assign_s"] = time.perf_counter() - t
    counts = np.zeros(num_parts, dtype=np.int64)
    for a, b in steps(lo, hi, ROWS_PER_STEP):
        counts += np.bincount(range_parts(a, b), minlength=num_parts)
    every = comm.all_gather(torch.from_numpy(counts))
    before = torch.stack(every[:rank]).sum(0).numpy() if rank else np.zeros(num_parts, np.int64)
    part_sizes = torch.stack(every).sum(0).numpy()
    if rank == 0:
        mapped_rows(tmp / "node_owner.npy", (n,), np.int32).flush()
        mapped_rows(tmp / "node_local.npy", (n,), np.int64).flush()
    comm.barrier()
    owner = np.lib.format.open_memmap(tmp / "node_owner.npy", mode="r+")
    local = np.lib.format.open_memmap(tmp / "node_local.npy", mode="r+")
    running = before.copy()
    for a, b in steps(lo, hi, ROWS_PER_STEP):
        parts = range_parts(a, b)
        owner[a:b] = parts
        local[a:b] = running[parts] + _group_ranks(parts)
        running += np.bincount(parts, minlength=num_parts)
    owner.flush()
    local.flush()
    del owner, local, range_parts
    comm.barrier()  # node_owner.npy is whole: any rank may read any vertex's part
    if assigner.by_id is not None:
        part_of = assigner.by_id(cfg, graph)
    else:
        node_owner = np.load(tmp / "node_owner.npy", mmap_mode="r")

        def part_of(ids: np.ndarray) -> np.ndarray:
            return np.asarray(node_owner[ids])

    solids = {p: _solid(n, part_of, p, int(part_sizes[p])) for p in mine}
    figures.seconds["vertex_maps_s"] = time.perf_counter() - t

    # 2. The edges, to the rank of their destination's part, a round at a time.
    t = time.perf_counter()
    spills = {p: open(tmp / SPILL.format(part=p), "wb") for p in mine}  # noqa: SIM115

    def keep(received: np.ndarray) -> None:
        if len(mine) == 1:
            spills[mine[0]].write(received.tobytes())
            return
        received_parts = part_of(received[:, 0])
        for p in mine:
            spills[p].write(received[received_parts == p].tobytes())

    try:
        exchange_edges(
            comm, graph, plan, share, lambda dst: part_of(dst) % world, keep, figures,
        )  # fmt: skip
    finally:
        for spill in spills.values():
            spill.close()
    figures.seconds["exchange_s"] = time.perf_counter() - t

    # 3. The parts.
    t = time.perf_counter()
    records: dict[str, Any] = {}
    part_figures: dict[int, dict[str, Any]] = {}
    for p in mine:
        spill_path = tmp / SPILL.format(part=p)
        spilled = int(spill_path.stat().st_size // 16)
        if pcfg.memory_gb is not None:  # the real edge count, against the budget again
            plan_rounds(
                plan.budget_bytes, int(baseline.item()), 0, directions, spilled,
                sum(s.size for s in solids.values()), graph.feat_dim * 4 + 8,
            )  # fmt: skip
        edges = np.fromfile(spill_path, dtype=np.int64).reshape(-1, 2)
        spill_path.unlink()
        files, part_figures[p] = _write_part(
            cfg, graph, p, solids.pop(p), edges, tmp, figures, part_of
        )
        del edges
        records |= files
        figures.parts_written += 1
        say(
            rank,
            f"part {p} written: {part_figures[p]['solid']:,} vertices, "
            f"{part_figures[p]['edges']:,} edges",
        )
    figures.seconds["parts_s"] = time.perf_counter() - t
    finish_rank(comm, tmp, n, records, figures, peak, start)
    return {
        "records": records,
        "parts": part_figures,
        "figures": figures.__dict__,
        "info": context.get("info", {}),
    }


def finish_rank(comm, tmp: Path, num_nodes: int, records, figures, peak, start: float) -> None:
    """A rank's last steps on the ranks: rank 0 records the vertex maps every rank wrote
    its range of; the rank's bytes written, peak memory and time; then it waits for all."""
    if comm.rank == 0:
        for name, dtype in (("node_owner", np.int32), ("node_local", np.int64)):
            records[f"{name}.npy"] = npy_record(tmp / f"{name}.npy", (num_nodes,), dtype)
    figures.bytes_written = sum(r["bytes"] for r in records.values())
    figures.peak_rss_mb = peak.run_peak_mb()
    figures.seconds["total_s"] = time.perf_counter() - start
    comm.barrier()


def _check_graph_budget(pcfg, plan, baseline: int, listed: int, n: int, world: int) -> None:
    """An assignment computed from the graph holds the rank's share of it (both directions
    of every edge) while it runs: refuse a budget that cannot, naming the smallest that can."""
    from gnnrun.partition.multilevel import BYTES_PER_EDGE, BYTES_PER_VERTEX

    held = math.ceil(2 * listed / world) * BYTES_PER_EDGE + math.ceil(n / world) * BYTES_PER_VERTEX
    need = max(plan.minimum_bytes, baseline + held)
    if pcfg.memory_gb is not None and pcfg.memory_gb * GIB < need:
        raise GnnrunError(
            f"partitioner.memory_gb={pcfg.memory_gb:.3g} cannot hold this rank's share of "
            f"the graph while partitioner={pcfg.name} partitions it ({held / MIB:.0f} MiB "
            f"beside the process's {baseline / MIB:.0f} MiB): the smallest that works is "
            f"partitioner.memory_gb={math.ceil(need / GIB * 100) / 100:.2f}; or use more "
            "ranks (cluster.nprocs)"
        )


def _solid(n: int, part_of: Callable[[np.ndarray], np.ndarray], part: int, size: int) -> np.ndarray:
    """The vertices of `part`, increasing: a scan of every id's part, a step at a time."""
    out = np.empty(size, dtype=np.int64)
    filled = 0
    for a, b in steps(0, n, ROWS_PER_STEP):
        ids = a + np.flatnonzero(part_of(np.arange(a, b)) == part)
        out[filled : filled + ids.size] = ids
        filled += ids.size
    assert filled == size
    return out


def _write_part(
    cfg,
    graph: ChunkedGraph,
    part: int,
    solid: np.ndarray,
    edges: np.ndarray,
    tmp: Path,
    figures: RankFigures,
    part_of: Callable[[np.ndarray], np.ndarray],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write part `part` (its solid vertices, its received [dst, src] edges) as
    gnnrun.partition.edge_cut.EdgeCutBuilder does: the same arrays, the same bytes."""
    n = graph.num_nodes
    keys = sorted_unique(edges[:, 0] * n + edges[:, 1])  # by (dst, src), duplicates gone
    dst = keys // n
    src = keys - dst * n
    del keys
    rows = np.searchsorted(solid, dst)
    indptr = np.zeros(solid.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=solid.size), out=indptr[1:])
    del rows, dst
    src_parts = part_of(src)
    remote = src_parts != part
    del src_parts
    halo = sorted_unique(src[remote])
    local_ids = np.where(
        remote, solid.size + np.searchsorted(halo, src), np.searchsorted(solid, src)
    ).astype(index_dtype(n))
    folder = tmp / part_dir_name(part)
    folder.mkdir()
    prefix = f"{part_dir_name(part)}/"
    records: dict[str, Any] = {}

    def save(name: str, array: np.ndarray) -> None:
        np.save(folder / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        records[prefix + f"{name}.npy"] = npy_record(
            folder / f"{name}.npy", array.shape, array.dtype
        )

    save("nodes", np.concatenate([solid, halo]).astype(np.int64))
    save("indptr", indptr)
    save("indices", local_ids)
    save("halo_owner", part_of(halo).astype(np.int32))
    num_edges, cut = int(src.size), int(remote.sum())
    del local_ids, remote, src

    rows, label = write_part_rows(cfg, graph, folder, solid, figures)
    records |= {prefix + name: record for name, record in rows.items()}
    save("label", label)
    split_sizes = {}
    for split in ("train_idx", "val_idx", "test_idx"):
        found = []
        for ids in split_ids(graph, split):
            found.append(ids[part_of(ids) == part])
        ids = np.concatenate(found + [np.zeros(0, np.int64)])
        local = np.sort(np.searchsorted(solid, ids))
        if local.size and np.any(label[local] < 0):
            raise GnnrunError(
                f"chunked graph {graph.metadata_path}: {split} contains unlabelled vertices"
            )
        save(split, local.astype(np.int64))
        split_sizes[split] = int(local.size)
    part_figures = {
        "solid": int(solid.size),
        "halo": int(halo.size),
        "edges": num_edges,
        "cut_edges": cut,
        "train": split_sizes["train_idx"],
        "val": split_sizes["val_idx"],
        "test": split_sizes["test_idx"],
    }
    return records, part_figures


# ------------------------------------------------------------------ the launching process


def check_distributable(config) -> ChunkedGraph:
    """Refuse, before any rank starts, what the ranks cannot do; the checked graph."""
    graph = open_chunked(config.dataset.path)
    if config.dataset.reorder != "none":
        raise GnnrunError(
            f"dataset.reorder={config.dataset.reorder} is not available for chunked input "
            "partitioned on the ranks: leave dataset.reorder=none"
        )
    if config.partitioner.num_parts > graph.num_nodes:
        raise GnnrunError(
            f"partitioner.num_parts={config.partitioner.num_parts} exceeds the "
            f"{graph.num_nodes} vertices of {config.dataset.name}: choose at most "
            f"{graph.num_nodes} parts"
        )
    return graph


# The manifest of an edge cut written on the ranks (what partition_chunked asks of the
# module that ran a partitioner; gnnrun.partition.distributed_libra has a vertex cut's).
MANIFEST_KIND = "edge_cut"


def manifest_summary(
    figures: list[dict[str, Any]], results: list[dict[str, Any]], num_nodes: int
) -> dict[str, Any]:
    """The manifest's summary of the parts' `figures` and the ranks' `results`."""
    num_edges = sum(f["edges"] for f in figures)
    cut = sum(f["cut_edges"] for f in figures)
    return {
        "cut_edges": cut,
        "cut_fraction": cut / max(num_edges, 1),
        "halo_fraction": sum(f["halo"] for f in figures) / max(num_nodes, 1),
        "imbalance": imbalance(figures, ("solid", "edges", "train")),
    } | results[0].get("info", {})


def partition_chunked(config, run_ranks) -> PartitionBook:
    """Partition chunked input on the job's ranks (`run_ranks(tmp_dir)` runs
    `partition_on_rank` on each and returns their results, in rank order); write the
    manifest; return the opened partition."""
    import importlib

    from gnnrun.data import dataset_identity

    kind = importlib.import_module(RANK_PARTITIONERS.get(config.partitioner.name, __name__))
    graph = check_distributable(config)
    pcfg = config.partitioner
    path = Path(pcfg.output_dir)
    start = time.perf_counter()
    checksum = graph.checksum(dataset_identity(config.dataset))
    with writer_lock(path), atomic_directory(path) as tmp:
        results = run_ranks(str(tmp))
        files: dict[str, Any] = {}
        parts: dict[int, dict[str, Any]] = {}
        for result in results:
            files |= result["records"]
            parts |= result["parts"]
        figures = [parts[p] for p in range(pcfg.num_parts)]
        ranks = [r["figures"] for r in results]
        manifest = {
            "format_version": FORMAT_VERSION,
            "kind": kind.MANIFEST_KIND,
            "method": pcfg.name,
            "num_parts": pcfg.num_parts,
            "trainers_per_part": 1,
            "config": partitioner_identity(pcfg),
            "dataset": {
                "name": config.dataset.name,
                "checksum": checksum,
                "num_nodes": graph.num_nodes,
                "num_edges": sum(f["edges"] for f in figures),
            },
            "parts": figures,
            "summary": kind.manifest_summary(figures, results, graph.num_nodes),
            "timings": {"total_s": time.perf_counter() - start},
            "distributed": {
                "ranks": ranks,
                "memory_gb": pcfg.memory_gb,
                "peak_rss_mb": max(r["peak_rss_mb"] for r in ranks),
            },
            "files": dict(sorted(files.items())),
        }
        write_json(tmp / "manifest.json", manifest)
        mark_verified(tmp, files)
    return open_partition(path)
