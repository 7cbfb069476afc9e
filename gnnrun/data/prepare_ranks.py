"""`gnnrun data prepare` of chunked input on the job's ranks: the prepared format
(gnnrun.data.dataset) written by every rank, none of them holding the graph.

Rank r owns the destination rows [N r / W, N (r + 1) / W). Each rank

1. reads its share of the listed edges a round at a time and sends every edge to the
   owner of its destination (gnnrun.data.chunked_ranks); what arrives is spilled;
2. sorts its rows' edges (duplicates and self-loops gone, as `csr_from_edges` does) and,
   once every rank's edge count is known, writes its slices of indptr.npy and
   indices.npy, which rank 0 created at their full size;
3. copies its rows of the features (row-normalised where `dataset.row_normalize` says)
   and labels from the row files, and its vertices of each split;
4. hashes its share of the files for meta.json.

The files are byte for byte those one process writes from the same chunks, and
meta.json records the same checksum, config and inputs, so `gnnrun train` and `gnnrun
data info` open the copy as current. `dataset.memory_gb` bounds each rank's peak
resident memory as `partitioner.memory_gb` does for partitioning (gnnrun.data.chunked_ranks
plans the rounds); meta.json keeps every rank's figures under `distributed`.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.data.chunked import SPLITS, ChunkedGraph, open_chunked
from gnnrun.data.chunked_ranks import (
    GIB,
    MIB,
    ROWS_PER_STEP,
    RankFigures,
    exchange_edges,
    npy_record,
    plan_rounds,
    say,
    steps,
)
from gnnrun.data.dataset import FORMAT_VERSION, GraphDataset, task_for
from gnnrun.data.graph import check_edge_keys, index_dtype, sorted_unique
from gnnrun.data.prepare import current_copy, dataset_identity, input_record, row_normalized
from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_directory, mapped_rows, mark_verified, write_json, writer_lock

SPILL = ".spill-rank{rank}.bin"  # the edges a rank received, [dst, src] int64 pairs


def _bounds(n: int, world: int) -> np.ndarray:
    return np.array([n * r // world for r in range(world + 1)], dtype=np.int64)


def prepare_on_rank(cfg, rank: int, tmp_dir: str) -> dict[str, Any]:
    """One rank's rows of the prepared dataset, into `tmp_dir` (in its process group)."""
    import torch

    from gnnrun.comm import Communicator
    from gnnrun.memory import PeakMemory, resident_mb

    start = time.perf_counter()
    comm = Communicator()
    world = comm.world_size
    tmp = Path(tmp_dir)
    dcfg = cfg.dataset
    graph = open_chunked(dcfg.path)
    n = graph.num_nodes
    bounds = _bounds(n, world)
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    figures = RankFigures(rank, world)
    peak = PeakMemory()

    baseline = torch.tensor([resident_mb() * MIB], dtype=torch.float64)
    comm.all_reduce_max(baseline)
    figures.baseline_mb = float(baseline.item()) / MIB
    total = graph.num_edges
    share = (total * rank // world, total * (rank + 1) // world)
    directions = 2 if graph.undirected else 1
    budget = None if dcfg.memory_gb is None else int(dcfg.memory_gb * GIB)
    row_bytes = graph.feat_dim * 4 + 8
    plan = plan_rounds(
        budget,
        int(baseline.item()),
        share_edges=math.ceil(total / world),
        directions=directions,
        part_edges=math.ceil(total * directions / world * 1.1),
        part_vertices=math.ceil(n / world),
        row_bytes=row_bytes,
        setting="dataset.memory_gb",
    )
    figures.rounds, figures.round_edges = plan.rounds, plan.round_edges
    say(
        rank,
        f"{share[1] - share[0]:,} edges to read in {plan.rounds} rounds of {plan.round_edges:,}",
    )

    # 1. The edges, to the owner of their destination row.
    t = time.perf_counter()
    spill_path = tmp / SPILL.format(rank=rank)
    with open(spill_path, "wb") as spill:
        exchange_edges(
            comm, graph, plan, share, lambda dst: np.searchsorted(bounds, dst, side="right") - 1,
            lambda received: spill.write(received.tobytes()), figures,
        )  # fmt: skip
    figures.seconds["exchange_s"] = time.perf_counter() - t

    # 2. This rank's rows of the CSR.
    t = time.perf_counter()
    spilled = int(spill_path.stat().st_size // 16)
    if budget is not None:  # the real edge count, against the budget again
        plan_rounds(
            budget, int(baseline.item()), 0, directions, spilled, hi - lo, row_bytes,
            "dataset.memory_gb",
        )  # fmt: skip
    edges = np.fromfile(spill_path, dtype=np.int64).reshape(-1, 2)
    spill_path.unlink()
    check_edge_keys(hi - lo, n)
    keys = sorted_unique((edges[:, 0] - lo) * n + edges[:, 1])  # by (dst, src)
    del edges
    rows = keys // n
    indices = (keys - rows * n).astype(index_dtype(n))
    del keys
    row_counts = np.bincount(rows, minlength=hi - lo)
    del rows
    splits = {s: _split_ids(graph, s, lo, hi) for s in SPLITS}
    counts = torch.tensor([indices.size] + [splits[s].size for s in SPLITS], dtype=torch.int64)
    every = comm.all_gather(counts)
    table = torch.stack(every).numpy()  # [world, 1 + splits]
    before, totals = table[:rank].sum(0), table.sum(0)
    shapes = {
        "indptr": ((n + 1,), np.int64),
        "indices": ((int(totals[0]),), index_dtype(n)),
        "feat": ((n, graph.feat_dim), np.float32),
        "label": ((n,), np.int64),
        **{s: ((int(totals[1 + i]),), np.int64) for i, s in enumerate(SPLITS)},
    }
    if rank == 0:
        for name, (shape, dtype) in shapes.items():
            mapped_rows(tmp / f"{name}.npy", shape, dtype).flush()
    comm.barrier()

    def mapped(name: str) -> np.ndarray:
        return np.lib.format.open_memmap(tmp / f"{name}.npy", mode="r+")

    indptr = mapped("indptr")
    indptr[lo:hi] = before[0] + np.concatenate([[0], np.cumsum(row_counts)[:-1]]).astype(np.int64)
    if rank == world - 1:
        indptr[n] = totals[0]
    indptr.flush()
    out = mapped("indices")
    out[before[0] : before[0] + indices.size] = indices
    out.flush()
    del indptr, out, indices, row_counts
    figures.seconds["csr_s"] = time.perf_counter() - t

    # 3. Rows and splits.
    t = time.perf_counter()
    label = _copy_rows(graph, mapped("feat"), mapped("label"), lo, hi, dcfg.row_normalize, figures)
    for i, split in enumerate(SPLITS):
        ids = splits[split]
        if ids.size and np.any(label[ids - lo] < 0):
            raise GnnrunError(
                f"chunked graph {graph.metadata_path}: {split} contains unlabelled vertices"
            )
        out = mapped(split)
        out[before[1 + i] : before[1 + i] + ids.size] = ids
        out.flush()
    figures.seconds["rows_s"] = time.perf_counter() - t
    comm.barrier()

    # 4. Checksums: file i by rank i mod world.
    t = time.perf_counter()
    records = {
        name: npy_record(tmp / f"{name}.npy", shape, dtype)
        for i, (name, (shape, dtype)) in enumerate(shapes.items())
        if i % world == rank
    }
    figures.seconds["hash_s"] = time.perf_counter() - t
    figures.parts_written = len(records)  # files hashed here (the table's "files")
    figures.bytes_written = sum(r["bytes"] for r in records.values())
    figures.peak_rss_mb = peak.run_peak_mb()
    figures.seconds["total_s"] = time.perf_counter() - start
    say(rank, f"rows [{lo:,}, {hi:,}) written, {figures.edges_received:,} edges received")
    comm.barrier()
    return {"records": records, "figures": figures.__dict__}


def _split_ids(graph: ChunkedGraph, split: str, lo: int, hi: int) -> np.ndarray:
    """The split's ids in [lo, hi), sorted (repeats kept, as one process keeps them)."""
    found = []
    for ids in graph.read_split(split):
        if ids.size and (ids.min() < 0 or ids.max() >= graph.num_nodes):
            raise GnnrunError(
                f"chunked graph {graph.metadata_path}: {split} has ids outside "
                f"[0, {graph.num_nodes})"
            )
        found.append(ids[(ids >= lo) & (ids < hi)])
    return np.sort(np.concatenate(found + [np.zeros(0, np.int64)]))


def _copy_rows(
    graph: ChunkedGraph,
    feat: np.ndarray,
    label: np.ndarray,
    lo: int,
    hi: int,
    normalize: bool,
    figures: RankFigures,
) -> np.ndarray:
    """Copy rows [lo, hi) of the features and labels into the mapped files; return the labels."""
    mine = np.empty(hi - lo, dtype=np.int64)
    for a, b in steps(lo, hi, ROWS_PER_STEP):
        ids = np.arange(a, b, dtype=np.int64)
        rows = np.concatenate([r.astype(np.float32) for r in graph.read_rows(graph.feat, ids)])
        feat[a:b] = row_normalized(rows) if normalize else rows
        mine[a - lo : b - lo] = np.concatenate(list(graph.read_rows(graph.label, ids)))
        figures.rows_read += b - a
    if mine.size and (mine.min() < -1 or mine.max() >= graph.num_classes):
        raise GnnrunError(
            f"chunked graph {graph.metadata_path}: labels must lie in [-1, {graph.num_classes}) "
            "(num_classes; -1 = unlabelled)"
        )
    label[lo:hi] = mine
    feat.flush()
    label.flush()
    return mine


def check_preparable(config) -> ChunkedGraph:
    """Refuse, before any rank starts, what the ranks cannot prepare; the checked graph.
    (Every host's launcher checks, so that a refusal does not leave the others waiting.)"""
    graph = open_chunked(config.dataset.path)
    if config.dataset.reorder != "none":
        raise GnnrunError(
            f"dataset.reorder={config.dataset.reorder} is not available for chunked input "
            "prepared on the ranks: leave dataset.reorder=none"
        )
    return graph


def prepare_chunked(
    config, run_ranks, force: bool = False
) -> tuple[GraphDataset, dict[str, Any] | None]:
    """Prepare chunked `config.dataset` on the job's ranks (`run_ranks(tmp_dir)` runs
    `prepare_on_rank` on each and returns their results, in rank order) unless a current
    copy exists; write meta.json. Returns the opened dataset and, when the ranks made it
    now, their figures (meta.json's `distributed`)."""
    cfg = config.dataset
    path = Path(cfg.prepared_dir)
    with writer_lock(path):
        existing = current_copy(cfg, force)
        if existing is not None:
            return existing, None
        graph = check_preparable(config)
        start = time.perf_counter()
        identity = dataset_identity(cfg)
        info = {
            "source": "chunked",
            "input_checksum": graph.checksum(identity),
            "config": identity,
            "inputs": [input_record(p) for p in graph.files()],
        }
        with atomic_directory(path) as tmp:
            results = run_ranks(str(tmp))
            files: dict[str, Any] = {}
            for result in results:
                files |= result["records"]
            files = {name: files[name] for name in sorted(files)}
            meta = {
                "format_version": FORMAT_VERSION,
                "name": cfg.name,
                "num_nodes": graph.num_nodes,
                "num_edges": files["indices"]["shape"][0],
                "feat_dim": graph.feat_dim,
                "num_classes": graph.num_classes,
                "directed": not graph.undirected,
                "task": task_for(graph.num_classes),
                "info": info,
                "files": files,
                "checksum": info["input_checksum"],
                "distributed": {
                    "ranks": [r["figures"] for r in results],
                    "memory_gb": cfg.memory_gb,
                    "peak_rss_mb": max(r["figures"]["peak_rss_mb"] for r in results),
                    "seconds": time.perf_counter() - start,
                },
            }
            write_json(tmp / "meta.json", meta)
            mark_verified(tmp, {f"{name}.npy": record for name, record in files.items()})
        return GraphDataset.load(path), meta["distributed"]
