"""Rich tables: a dataset's statistics, a partition's per-part figures, a run's
summary, and the runs of `gnnrun report`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gnnrun.report.repeats import (
    RepeatGroup,
    best_configurations,
    epochs_to_target,
    seconds_to_target,
    summarised_figures,
)
from gnnrun.report.rows import PHASES, ReportRow, hit_layers, present_figures
from gnnrun.report.runs import RunSet, distinguishing_overrides

if TYPE_CHECKING:  # only named in annotations: `gnnrun report` then runs without torch
    from gnnrun.data.dataset import GraphDataset
    from gnnrun.partition.book import PartitionBook

_EDGE_CUT_COLUMNS = ("solid", "halo", "edges", "cut_edges", "train", "val", "test")
_VERTEX_CUT_COLUMNS = ("vertices", "split_vertices", "roots", "edges", "train", "val", "test")
_BLOCK1D_COLUMNS = (
    "rows",
    "nonzeros",
    "local_nonzeros",
    "max_tile_nonzeros",
    "train",
    "val",
    "test",
)
_COLUMNS = {
    "edge_cut": _EDGE_CUT_COLUMNS,
    "vertex_cut": _VERTEX_CUT_COLUMNS,
    "block1d": _BLOCK1D_COLUMNS,
}


def dataset_table(dataset: GraphDataset) -> Table | Group:
    """The dataset's statistics; a heterogeneous one's types and relations below them."""
    statistics = dataset.statistics()
    hetero = statistics.pop("heterogeneous", None)
    table = Table(title=f"dataset {dataset.name}", show_header=False)
    table.add_column("statistic", style="bold")
    table.add_column("value", justify="right")
    for key, value in statistics.items():
        table.add_row(
            key,
            f"{value:,.2f}"
            if isinstance(value, float)
            else f"{value:,}"
            if isinstance(value, int) and not isinstance(value, bool)
            else Text(str(value)),  # names and paths are text, not markup
        )
    table.add_row("checksum", (dataset.checksum or "")[:16])
    table.add_row("path", Text(str(dataset.path)))
    if hetero is None:
        return table
    types = Table(title=f"vertex types (labelled: {hetero['target']})")
    for column in ("type", "vertices", "features"):
        types.add_column(column, justify="left" if column == "type" else "right")
    for name, figures in hetero["node_types"].items():
        width = figures["feat_dim"]
        types.add_row(Text(name), f"{figures['vertices']:,}", str(width) if width else "embedding")
    relations = Table(title="relations")
    relations.add_column("source -relation-> destination")
    relations.add_column("edges", justify="right")
    for name, edges in hetero["relations"].items():
        relations.add_row(Text(name), f"{edges:,}")
    return Group(table, types, relations)


_VERTEX_SPLITS = ("train", "val", "test")


def partition_table(book: PartitionBook, vertex_splits: bool = True) -> Table:
    """Each part's figures. `vertex_splits`: whether the task trains on the labelled
    vertices; a link run's partition leaves their counts out, which mean nothing to it."""
    manifest = book.manifest
    columns = [c for c in _COLUMNS[book.kind] if vertex_splits or c not in _VERTEX_SPLITS]
    summary = manifest["summary"]
    if not vertex_splits:
        imbalance = {k: v for k, v in summary.get("imbalance", {}).items() if k != "train"}
        summary = {**summary, "imbalance": imbalance}
    table = Table(
        title=f"{manifest['method']} partition of {manifest['dataset']['name']} into {book.num_parts} parts",
        caption=_caption(book.kind, summary),
    )
    table.add_column("part", justify="right")
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    for part, figures in enumerate(manifest["parts"]):
        table.add_row(str(part), *(f"{figures[c]:,}" for c in columns))
    return table


def _caption(kind: str, summary: dict) -> str:
    if kind == "block1d":
        return _block1d_caption(summary)
    balance = ", ".join(f"{k} {v:.3f}" for k, v in summary["imbalance"].items())
    if kind == "edge_cut":
        head = f"cut edges {summary['cut_edges']:,} ({summary['cut_fraction']:.1%} of edges)"
    else:
        head = (
            f"replication factor {summary['replication_factor']:.3f}, "
            f"split vertices {summary['split_vertices']:,} ({summary['split_fraction']:.1%})"
        )
    caption = f"{head}; imbalance (max/mean): {balance}"
    if "rebalanced_vertices" in summary:  # a heterogeneous graph (gnnrun.partition.balance)
        caption += (
            f"; METIS left a vertex class at {summary['metis_class_imbalance']:.2f}x its even "
            f"share, {summary['rebalanced_vertices']:,} vertices moved to even them out"
        )
    return caption


def _block1d_caption(summary: dict) -> str:
    """The non-zero balance the permutation gives, against the graph's own order."""

    def balance(figures: dict) -> str:
        return f"row blocks {figures['row_blocks']:.3f}, tiles {figures['tiles']:.3f}"

    return (
        f"non-zero imbalance (max/mean): {balance(summary['nonzero_imbalance'])}; "
        f"in the graph's own order: {balance(summary['nonzero_imbalance_own_order'])}"
    )


def summary_table(summary: dict) -> Table:
    """The end-of-run table: accuracies, epoch time and its split, bytes."""
    table = Table(
        title=f"{summary['algorithm']} / {summary['model']} on {summary['dataset']}, {summary['ranks']} rank(s)",
        show_header=False,
    )
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for key, value in summary["final"].items():
        table.add_row(f"final {key}", f"{value:.4f}")
    if summary["best"].get("epoch") is not None:
        # The figure that chose it (accuracy, ROC-AUC or MRR, by task), then its figures.
        chosen = f" (by {summary['best_metric']})" if summary.get("best_metric") else ""
        table.add_row(f"best epoch{chosen}", f"{summary['best']['epoch'] + 1}")
    for key, value in summary["best"].items():
        if key != "epoch":
            table.add_row(f"best {key}", f"{value:.4f}")
    for split in summary.get("not_evaluated", []):  # runs before 2026-11-26 did not record it
        table.add_row({"val": "validation", "test": "test"}[split], "not evaluated")
    table.add_row("epochs", f"{summary['epochs']}")
    if early := summary.get("stopped_early"):
        table.add_row(
            "stopped early",
            f"after epoch {early['epoch'] + 1}: {early['patience']} evaluations without a "
            f"better val {summary.get('best_metric', 'figure').removeprefix('val_')} "
            f"than epoch {early['best_epoch'] + 1}'s",
        )
    table.add_row("epoch time (median)", f"{summary['epoch_s_median']:.3f} s")
    for phase, seconds in summary["time_median"].items():
        table.add_row(f"  {phase}", f"{seconds:.3f} s")
    table.add_row(
        "bytes sent per epoch (rank 0)", f"{summary['bytes_per_epoch_rank0'] / 1e6:,.2f} MB"
    )
    if summary.get("peak_rss_mb_rank0") is not None:
        table.add_row("peak memory (rank 0)", f"{summary['peak_rss_mb_rank0']:,.0f} MB")
    if "split_fraction_rank0" in summary:
        table.add_row("split vertices (rank 0)", f"{summary['split_fraction_rank0']:.1%}")
    if "comm_hidden_rank0" in summary:
        table.add_row("DRPA in flight, hidden (rank 0)", f"{summary['comm_hidden_rank0']:.0%}")
    if reached := summary.get("to_target"):
        what = "target" if reached["target_given"] else "best"
        when = (
            f"epoch {reached['epochs']}, {reached['seconds']:.1f} s"
            if reached["epochs"] is not None
            else "not reached"
        )
        table.add_row(f"within 1% of val {what} {reached['target']:.4f}", when)
    if "threads_rank0" in summary:  # runs before 2026-11-27 did not record it
        table.add_row("compute threads (rank 0)", str(summary["threads_rank0"]))
    if "allocator_rank0" in summary:  # runs before 2026-11-23 did not record it
        table.add_row("allocator (rank 0)", summary["allocator_rank0"])
    if "cpu_block_cache_rank0" in summary:
        table.add_row("CPU block cache (rank 0)", summary["cpu_block_cache_rank0"])
    return table


def inference_table(summary: dict) -> Table:
    """The end of `gnnrun predict` / `gnnrun embed`: metrics, throughput, memory per rank."""
    what = "predictions" if summary["kind"] == "predict" else f"layer {summary['layer']} embeddings"
    table = Table(
        title=f"{what} of {summary['model']} (epoch {summary['epoch']}) on {summary['dataset']}, "
        f"{summary['ranks']} rank(s)",
        show_header=False,
    )
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for key, value in summary["metrics"].items():
        table.add_row(key, f"{value:.4f}")
    # A heterogeneous graph's output holds one type's rows (the layers computed them all).
    of_type = f" ({summary['node_type']})" if summary.get("node_type") else ""
    table.add_row(f"vertices{of_type}", f"{summary['vertices']:,}")
    if "candidates" in summary:  # a task=link run's pairs: scores.npy beside the shards
        table.add_row("vertex pairs scored (scores.npy)", f"{summary['candidates']:,}")
    if summary["layers_reused"]:
        table.add_row("layers reused (interrupted run)", f"1-{summary['layers_reused']}")
    table.add_row("time (slowest rank)", f"{summary['seconds']:.2f} s")
    if summary["vertices_per_s"] is not None:
        table.add_row(f"vertices{of_type} per second", f"{summary['vertices_per_s']:,.0f}")
    for rank in summary["per_rank"]:
        table.add_row(
            f"rank {rank['rank']}: rows, peak memory",
            f"{rank['rows']:,}, {rank['peak_rss_mb']:,.0f} MB ({rank['peak_anonymous_mb']:,.0f} MB anonymous)",
        )
    return table


# ------------------------------------------------------------ gnnrun report

# Display precision. The CSV carries the same figures at full precision.
_PHASE_NAMES = {"mbc": "MBC", "fwd": "FWD", "bwd": "BWD", "comm": "COMM", "ared": "ARed"}
_MISSING = "–"


def seconds(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.3f}"


def megabytes(value: float | None) -> str:
    return _MISSING if value is None else f"{value / 1e6:,.2f}"


def score(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.4f}"


def ratio(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.2f}x"


@dataclass
class _Column:
    header: str
    cell: Callable[[Any], str]  # the cell of a row (a ReportRow, or a RepeatGroup)
    text: bool = False  # left-justified name rather than a figure
    wraps: bool = False  # may break between words; figures never do


def runs_tables(rows: list[ReportRow], sets: list[RunSet], width: int) -> list[Table]:
    """One row per run: what sets it apart, epoch time and its split, bytes,
    accuracies, HEC hit rates where there are some, and whether it finished."""
    columns = _report_columns(rows, sets)
    return _split_tables(
        _title(rows, sets), columns, rows, width, ("run", "point"), lambda r: r.status == "done"
    )


def repeats_tables(groups: list[RepeatGroup], rows: list[ReportRow], width: int) -> list[Table]:
    """One row per configuration whose points repeat it (gnnrun.report.repeats): how
    many finished, and the mean ± standard deviation of its figures over them."""
    keys = sorted({k for g in groups for k in g.keys})
    columns = []
    if any(g.run for g in groups):
        columns.append(_Column("run", lambda g: g.run, text=True))
    columns.append(_Column("overrides", lambda g: " ".join(g.overrides) or "-", True, True))
    columns += [
        _Column("algorithm", lambda g: g.algorithm, text=True),
        _Column("ranks", lambda g: _MISSING if g.ranks is None else str(g.ranks)),
        _Column("runs", lambda g: f"{len(g.finished)} of {len(g.rows)}"),
        _Column("points", lambda g: ",".join(r.point for r in g.rows), text=True, wraps=True),
        _Column("epoch s", lambda g: _spread(g, lambda r: r.epoch_s, seconds)),
    ]
    for key, name in present_figures(rows):
        columns += [
            _Column(header, lambda g, f=figure: _spread(g, f))
            for header, _, figure in summarised_figures(key, name)
        ]
    if any(g.reached() for g in groups):  # every run given train.target
        columns += [
            _Column("reached target", _reached),
            _Column("epochs to target", lambda g: _spread(g, epochs_to_target, _tenths)),
            _Column("s to target", lambda g: _spread(g, seconds_to_target, _tenths)),
        ]
    best = best_configurations(groups)
    if best:
        ids = {id(groups[i]) for i in best}
        columns.append(_Column("best", lambda g: "yes" if id(g) in ids else "", text=True))
    title = f"over repetitions ({', '.join(keys)}): mean ± standard deviation"
    return _split_tables(
        title,
        columns,
        groups,
        width,
        ("run", "overrides"),
        lambda g: len(g.finished) == len(g.rows),
    )


def _reached(group: RepeatGroup) -> str:
    reached = group.reached()
    return _MISSING if reached is None else f"{reached[0]} of {reached[1]}"


def _tenths(value: float) -> str:
    return f"{value:.1f}"


def _spread(group: RepeatGroup, figure: Callable[[ReportRow], float | None], form=score) -> str:
    mean, std = group.spread(figure)
    if mean is None:
        return _MISSING
    return form(mean) if std is None else f"{form(mean)} ± {form(std)}"


def _split_tables(
    title: str,
    columns: list[_Column],
    rows: list,
    width: int,
    key_headers: tuple[str, ...],
    plain: Callable[[Any], bool],
) -> list[Table]:
    """`columns` of `rows` in one table, or, where it is wider than `width` (an
    80-column terminal), over several tables that each repeat the key columns
    (which row it is), rather than letting rich cut figures short. Rows that are not
    `plain` (unfinished) are yellow."""
    keys = [c for c in columns if c.header in key_headers]
    chunks: list[list[_Column]] = [list(keys)]
    for column in columns[len(keys) :]:
        if _min_width(chunks[-1] + [column], rows) > width and len(chunks[-1]) > len(keys):
            chunks.append(list(keys))
        chunks[-1].append(column)
    tables = []
    for index, chunk in enumerate(chunks):
        table = Table(title=title if index == 0 else None)
        for column in chunk:
            table.add_column(
                column.header, justify="left" if column.text else "right", no_wrap=not column.wraps
            )
        for row in rows:
            # Text, not markup: an override such as `x=[a]` must print as written.
            cells = (Text(column.cell(row)) for column in chunk)
            table.add_row(*cells, style=None if plain(row) else "yellow")
        tables.append(table)
    return tables


def _min_width(columns: list[_Column], rows: list) -> int:
    """Characters the table needs at least: figures and their headers whole, names
    broken at spaces, one space of padding either side and one rule per column."""
    total = 1
    for column in columns:
        cells = [column.cell(r) for r in rows]
        if column.wraps:
            words = [w for text in [column.header, *cells] for w in text.split()]
        else:
            words = [column.header, *cells]
        total += max((len(w) for w in words), default=1) + 3
    return total


def _report_columns(rows: list[ReportRow], sets: list[RunSet]) -> list[_Column]:
    comparing = len(sets) == 2
    columns = []
    if comparing:
        columns.append(_Column("run", lambda r: r.run, text=True))
    columns.append(_Column("point", lambda r: r.point, text=True))
    if any(r.overrides for r in rows):
        columns.append(_Column("overrides", lambda r: " ".join(r.overrides), True, True))
    for name in ("dataset", "model"):
        if len({getattr(r, name) for r in rows}) > 1:  # else the title says it
            columns.append(_Column(name, lambda r, n=name: getattr(r, n), True, True))
    columns += [
        _Column("algorithm", lambda r: r.algorithm, text=True),
        _Column("ranks", lambda r: _MISSING if r.ranks is None else str(r.ranks)),
        _Column("epoch s", lambda r: seconds(r.epoch_s)),
    ]
    columns += [
        _Column(
            f"{_PHASE_NAMES[p]} s", lambda r, p=p: seconds(r.time.get(p)) if r.time else _MISSING
        )
        for p in PHASES
    ]
    columns.append(_Column("MB/epoch", lambda r: megabytes(r.bytes_per_epoch)))
    for key, name in present_figures(rows):
        columns += [
            _Column(f"best val {name}", lambda r, k=key: score(r.best.get(f"val_{k}"))),
            _Column(f"final test {name}", lambda r, k=key: score(r.final.get(f"test_{k}"))),
        ]
    layers = hit_layers(rows)
    if layers:
        header = "hit " + "/".join(f"L{i}" for i in range(layers))
        columns.append(
            _Column(header, lambda r: "/".join(f"{h:.3f}" for h in r.hit_rate) or _MISSING)
        )
    if any(r.comm_hidden is not None for r in rows):
        columns.append(
            _Column(
                "DRPA hidden",
                lambda r: _MISSING if r.comm_hidden is None else f"{r.comm_hidden:.0%}",
            )
        )
    if any(r.to_target for r in rows):
        columns += [
            _Column("epochs to target", lambda r: _to_target(r, "epochs", "{}")),
            _Column("s to target", lambda r: _to_target(r, "seconds", "{:.1f}")),
        ]
    columns.append(_Column("status", lambda r: r.status, text=True, wraps=True))
    if comparing:
        second = sets[1].label
        columns += [
            _Column("B/A epoch", lambda r: ratio(r.epoch_ratio) if r.run == second else ""),
            _Column("B/A MB", lambda r: ratio(r.bytes_ratio) if r.run == second else ""),
        ]
    return columns


def _to_target(row: ReportRow, key: str, form: str) -> str:
    if not row.to_target:
        return _MISSING
    value = row.to_target.get(key)
    return "not reached" if value is None else form.format(value)


def _title(rows: list[ReportRow], sets: list[RunSet]) -> str:
    def name(run_set: RunSet) -> str:
        what = f"sweep of {len(run_set.runs)} points" if run_set.kind == "sweep" else "run"
        tag = f"{run_set.label}: " if run_set.label else ""
        return f"{tag}{what} {run_set.path}"

    head = " vs ".join(name(s) for s in sets)
    same = [
        values.pop()
        for values in ({r.dataset for r in rows}, {r.model for r in rows})
        if len(values) == 1
    ]
    return f"{head} ({' / '.join(same)})" if same else head


def repeats_notes(groups: list[RepeatGroup]) -> list[str]:
    """What the repetitions table's figures are, below it."""
    lines = [
        "over repetitions: each configuration's points that differ only in "
        f"{', '.join(sorted({k for g in groups for k in g.keys}))}; mean and sample standard "
        "deviation over its finished points (done or stopped early; runs: finished of all); "
        "test at best val: each run's test figure at its best validation epoch (the figure "
        "papers report, chosen without looking at test)"
    ]
    if any(g.reached() for g in groups):
        lines.append(
            "to target (every run given train.target): how many finished runs came within 1% of "
            "it, and the epochs and training seconds they took (mean over those that did)"
        )
    if best_configurations(groups):
        lines.append(
            "best: the configuration of each algorithm with the highest mean best validation "
            "figure (where the algorithm has several)"
        )
    if any(len(g.finished) < len(g.rows) for g in groups):
        lines.append("yellow: a configuration with points not finished, left out of its figures")
    return lines


def report_notes(rows: list[ReportRow], sets: list[RunSet]) -> list[str]:
    """What the tables share and what their columns mean (printed below them, at
    the console's width rather than squeezed under the last table)."""
    lines = []
    for run_set in sets:
        _, common = distinguishing_overrides(run_set.runs)
        if common:
            tag = f"{run_set.label}: " if run_set.label else ""
            lines.append(f"{tag}every point: {' '.join(common)}")
    lines.append(
        "times: median over epochs, s (rank 0); MB/epoch: bytes rank 0 sent per epoch (median), "
        "1e6 bytes; best val: at the epoch of the run's best validation figure (its "
        "best_metric: accuracy, micro-F1 for multi-label, ROC-AUC for two classes, MRR for "
        "link prediction, ROC-AUC against one negative); final test: last evaluation"
    )
    if any(r.comm_hidden is not None for r in rows):
        lines.append(
            "DRPA hidden: the share of DRPA's time in flight that rank 0 did not wait for "
            "(median over epochs)"
        )
    if any(r.to_target for r in rows):
        lines.append(
            "to target: the first evaluation within 1% (relative) of train.target, or of the "
            "run's best validation figure; seconds of training until its end"
        )
    if len(sets) == 2:
        lines.append(
            "B/A: B's figure over A's, for the A point of the same algorithm, ranks, dataset, model"
        )
    for run_set in sets:
        tag = f"{run_set.label}: " if run_set.label else ""
        lines += [f"{tag}point {r.point} failed: {r.failure}" for r in run_set.runs if r.failure]
        lines += [f"{tag}point {n}: {why}" for n, why in run_set.missing.items()]
    statuses = {r.status.split(" ")[0] for r in rows}
    if "unfinished" in statuses:
        lines.append("unfinished: no summary.json yet (still running, or it stopped)")
    if "partial" in statuses:
        lines.append("partial: its summary covers fewer epochs than train.epochs")
    return lines
