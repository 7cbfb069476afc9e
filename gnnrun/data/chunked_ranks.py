"""Reading chunked input on the job's ranks, shared by `gnnrun data prepare`
(gnnrun.data.prepare_ranks) and `gnnrun partition` (gnnrun.partition.distributed): the
memory plan of a round, reading a rank's share of the listed edges a round at a time and
sending each edge to the rank that owns it, and the figures each rank reports.

A round holds its read edges (and their reverses on an undirected graph) and the edges
it receives; what a rank receives is written out (spilled) before the next round, so a
rank's memory is its process, one round, and afterwards the one piece it builds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnrun.data.chunked import ChunkedGraph
from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_rows, sha256_file

if TYPE_CHECKING:  # torch is imported where it is needed, not with this module
    from gnnrun.comm import Communicator

GIB = 1 << 30
MIB = 1 << 20
# Bytes a round holds per directed edge it reads or receives: src and dst as int64 read,
# their owners and sort order, the send buffer and the received buffer.
ROUND_BYTES_PER_EDGE = 112
# Bytes a part's (or a row range's) build holds per edge: the (dst, src) keys and their sort, decoded ids,
# the sources' parts, local ids and the written indices.
BUILD_BYTES_PER_EDGE = 72
# Bytes per solid vertex a rank keeps while building: its id, label, and the split lookups.
BYTES_PER_SOLID = 32
MIN_ROUND_EDGES = 1 << 12  # below this the exchange is all latency
MAX_ROUND_EDGES = 1 << 22  # the round size without a budget
ROWS_PER_STEP = 1 << 16  # vertices a rank hashes / copies at a time (at most)


@dataclass(frozen=True)
class RoundPlan:
    round_edges: int  # listed edges a rank reads per round
    rounds: int  # rounds every rank takes part in
    minimum_bytes: int  # the smallest budget that works
    budget_bytes: int | None


def plan_rounds(
    budget_bytes: int | None,
    baseline_bytes: int,
    share_edges: int,
    directions: int,
    part_edges: int,
    part_vertices: int,
    row_bytes: int,
    setting: str = "partitioner.memory_gb",
) -> RoundPlan:
    """Round size for a rank that reads `share_edges` listed edges (each stored in
    `directions` directions) and builds parts of about `part_edges` edges and
    `part_vertices` vertices (rows of `row_bytes`), on top of `baseline_bytes` already
    resident. A round holds its read edges and as many received ones; the build comes
    after the rounds, so the budget must hold the larger of the two. Raises GnnrunError
    naming the smallest budget that works when `budget_bytes` is below it (`setting`: the
    config key the message names)."""
    per_edge = ROUND_BYTES_PER_EDGE * directions * 2  # read (and reversed), then received
    fixed = baseline_bytes + part_vertices * BYTES_PER_SOLID
    rows = min(ROWS_PER_STEP, max(part_vertices, 1)) * max(row_bytes, 1) * 2
    build = part_edges * BUILD_BYTES_PER_EDGE + rows
    minimum = fixed + max(build, MIN_ROUND_EDGES * per_edge)
    if budget_bytes is None:
        round_edges = MAX_ROUND_EDGES
    elif budget_bytes < minimum:
        raise GnnrunError(
            f"{setting}={budget_bytes / GIB:.3g} cannot hold one round and one part "
            f"(the process itself holds {baseline_bytes / MIB:.0f} MiB, a part of about "
            f"{part_edges:,} edges needs {build / MIB:.0f} MiB): the smallest that works is "
            f"{setting}={math.ceil(minimum / GIB * 100) / 100:.2f}; or use more ranks "
            "(cluster.nprocs)"
            + (" or parts (partitioner.num_parts)" if "partitioner" in setting else "")
        )
    else:
        round_edges = min(MAX_ROUND_EDGES, (budget_bytes - fixed) // per_edge)
    round_edges = max(int(round_edges), 1)
    rounds = math.ceil(share_edges / round_edges) if share_edges else 0
    return RoundPlan(round_edges, rounds, int(minimum), budget_bytes)


@dataclass
class RankFigures:
    """What one rank did: reported per rank in the manifest and the summary."""

    rank: int
    world: int = 1
    edges_read: int = 0
    edges_sent: int = 0
    edges_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    rows_read: int = 0
    parts_written: int = 0
    bytes_written: int = 0
    rounds: int = 0
    round_edges: int = 0
    baseline_mb: float = 0.0
    peak_rss_mb: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)


def say(rank: int, message: str) -> None:
    from gnnrun.progress import console

    console.print(f"[dim]rank {rank}:[/] {message}", highlight=False, soft_wrap=True)


def steps(lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)]


def npy_record(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> dict[str, Any]:
    """The manifest record of a written .npy (as gnnrun.io.save_array returns)."""
    return {
        "shape": list(shape),
        "dtype": str(np.dtype(dtype)),
        "bytes": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def write_part_rows(
    cfg, graph: ChunkedGraph, folder: Path, vertices: np.ndarray, figures: RankFigures
) -> tuple[dict[str, Any], np.ndarray]:
    """A part's rows of `vertices` (increasing) from the row files, a file at a time:
    folder/feat.npy (float32, row-normalised where the dataset config says so, as
    gnnrun.data.prepare does), and their labels, checked; ({name: record}, labels)."""
    path = folder / "feat.npy"
    with atomic_rows(path, (vertices.size, graph.feat_dim), np.float32) as append:
        for rows in graph.read_rows(graph.feat, vertices):
            block = rows.astype(np.float32)
            if cfg.dataset.row_normalize:
                sums = block.sum(axis=1, keepdims=True)
                block = block / np.where(sums == 0, 1, sums)
            append(block)
            figures.rows_read += rows.shape[0]
    label = np.concatenate(
        [r.astype(np.int64) for r in graph.read_rows(graph.label, vertices)]
        + [np.zeros(0, np.int64)]
    )
    if label.size and (label.min() < -1 or label.max() >= graph.num_classes):
        raise GnnrunError(
            f"chunked graph {graph.metadata_path}: labels must lie in [-1, {graph.num_classes}) "
            "(num_classes; -1 = unlabelled)"
        )
    return {"feat.npy": npy_record(path, (vertices.size, graph.feat_dim), np.float32)}, label


def split_ids(graph: ChunkedGraph, split: str):
    """The ids of `split` (train_idx, val_idx, test_idx), a file at a time, checked."""
    for ids in graph.read_split(split):
        if ids.size and (ids.min() < 0 or ids.max() >= graph.num_nodes):
            raise GnnrunError(
                f"chunked graph {graph.metadata_path}: {split} has ids outside "
                f"[0, {graph.num_nodes})"
            )
        yield ids


def read_listed(graph: ChunkedGraph, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The listed edges [lo, hi), across file boundaries."""
    pieces = list(graph.read_edges(lo, hi, max(hi - lo, 1)))
    empty = [np.zeros(0, np.int64)]
    return np.concatenate([s for s, _ in pieces] + empty), np.concatenate(
        [d for _, d in pieces] + empty
    )


def check_ids(graph: ChunkedGraph, src: np.ndarray, dst: np.ndarray) -> None:
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= graph.num_nodes):
        raise GnnrunError(
            f"chunked graph {graph.metadata_path}: edges have vertex ids outside "
            f"[0, {graph.num_nodes}) (num_nodes); fix the edge files or num_nodes"
        )


def exchange_pairs(comm: Communicator, payload: np.ndarray, send_counts: np.ndarray) -> np.ndarray:
    """Rows of `payload` (grouped by destination rank, `send_counts` each) to their ranks;
    the rows received, grouped by the rank they came from."""
    import torch

    rows = torch.from_numpy(np.ascontiguousarray(payload))
    return comm.exchange_rows(rows, torch.from_numpy(send_counts), "edges").numpy()


def exchange_edges(
    comm: Communicator,
    graph: ChunkedGraph,
    plan: RoundPlan,
    share: tuple[int, int],
    owner: Callable[[np.ndarray], np.ndarray],
    keep: Callable[[np.ndarray], None],
    figures: RankFigures,
    mirror: bool = False,
) -> None:
    """Read the listed edges [share) a round at a time (self-loops dropped, reverses added
    on an undirected graph), send each [dst, src] pair to rank `owner(dst)`, and hand what
    arrives (grouped by sender) to `keep`. Every rank takes part in every round. `mirror`:
    on a directed graph, also send each edge reversed, its source written as -1 - id (an
    out-edge, told apart from the in-edges)."""
    world = figures.world
    # Every rank must take part in as many exchanges as the others: the most rounds any plans.
    total = comm.max_int(plan.rounds)
    for round_ in range(total):
        a = min(share[1], share[0] + round_ * plan.round_edges)
        src, dst = read_listed(graph, a, min(share[1], a + plan.round_edges))
        figures.edges_read += int(src.size)
        check_ids(graph, src, dst)
        kept = src != dst
        src, dst = src[kept], dst[kept]
        if graph.undirected:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        elif mirror:
            src, dst = np.concatenate([src, -1 - dst]), np.concatenate([dst, src])
        to_rank = owner(dst)
        order = np.argsort(to_rank, kind="stable")
        payload = np.stack([dst[order], src[order]], axis=1)
        del src, dst, order
        send_counts = np.bincount(to_rank, minlength=world).astype(np.int64)
        del to_rank
        received = exchange_pairs(comm, payload, send_counts)
        del payload
        keep(received)
        sent = int(send_counts.sum() - send_counts[figures.rank])
        figures.edges_sent += sent
        figures.bytes_sent += sent * 16
        figures.edges_received += int(received.shape[0])
        figures.bytes_received += int(received.nbytes)
        if total <= 10 or (round_ + 1) % max(1, total // 10) == 0:
            say(
                figures.rank,
                f"round {round_ + 1}/{total}: {figures.edges_read:,} edges read, "
                f"{figures.edges_received:,} received",
            )
        del received


def rank_table(info: dict[str, Any], title: str = "ranks", written: str = "parts"):
    """What each rank read, exchanged, wrote, and its peak memory (a rich Table), from the
    `distributed` record of a partition's manifest or a prepared dataset's meta.json;
    `written`: what `parts_written` counts."""
    from rich.table import Table

    budget = info["memory_gb"]
    table = Table(
        title=title,
        caption=f"memory budget {'none' if budget is None else f'{budget:g} GiB'} per rank",
    )
    # Short headers: the table fits an 80-column terminal.
    columns = ("rank", "edges read", "sent", "received", "rows read", "MiB sent")
    columns += (written, "rounds", "s", "peak MiB")
    for column in columns:
        table.add_column(column, justify="right")
    for r in info["ranks"]:
        table.add_row(
            str(r["rank"]),
            *(_compact(r[k]) for k in ("edges_read", "edges_sent", "edges_received", "rows_read")),
            f"{r['bytes_sent'] / MIB:,.1f}",
            str(r["parts_written"]),
            str(r["rounds"]),
            f"{r['seconds']['total_s']:.1f}",
            f"{r['peak_rss_mb']:,.0f}",
        )
    return table


def _compact(count: int) -> str:
    """1234567 -> 1.23M: a count short enough for the table (the manifest has it exactly)."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= limit:
            return f"{count / limit:.3g}{suffix}"
    return str(count)
