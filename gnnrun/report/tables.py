"""Rich tables of a dataset's statistics and a partition's per-part figures."""

from __future__ import annotations

from rich.table import Table

from gnnrun.data.dataset import GraphDataset
from gnnrun.partition.book import PartitionBook

_EDGE_CUT_COLUMNS = ("solid", "halo", "edges", "cut_edges", "train", "val", "test")
_VERTEX_CUT_COLUMNS = ("vertices", "split_vertices", "roots", "edges", "train", "val", "test")


def dataset_table(dataset: GraphDataset) -> Table:
    table = Table(title=f"dataset {dataset.name}", show_header=False)
    table.add_column("statistic", style="bold")
    table.add_column("value", justify="right")
    for key, value in dataset.statistics().items():
        table.add_row(
            key,
            f"{value:,.2f}"
            if isinstance(value, float)
            else f"{value:,}"
            if isinstance(value, int) and not isinstance(value, bool)
            else str(value),
        )
    table.add_row("checksum", (dataset.checksum or "")[:16])
    table.add_row("path", str(dataset.path))
    return table


def partition_table(book: PartitionBook) -> Table:
    manifest = book.manifest
    columns = _EDGE_CUT_COLUMNS if book.kind == "edge_cut" else _VERTEX_CUT_COLUMNS
    summary = manifest["summary"]
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
    balance = ", ".join(f"{k} {v:.3f}" for k, v in summary["imbalance"].items())
    if kind == "edge_cut":
        head = f"cut edges {summary['cut_edges']:,} ({summary['cut_fraction']:.1%} of edges)"
    else:
        head = (
            f"replication factor {summary['replication_factor']:.3f}, "
            f"split vertices {summary['split_vertices']:,} ({summary['split_fraction']:.1%})"
        )
    return f"{head}; imbalance (max/mean): {balance}"


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
    for key, value in summary["best"].items():
        if key != "epoch":
            table.add_row(f"best {key} (epoch {summary['best']['epoch'] + 1})", f"{value:.4f}")
    table.add_row("epochs", f"{summary['epochs']}")
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
    return table
