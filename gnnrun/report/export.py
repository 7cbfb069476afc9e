"""The report's tables as CSV, at full precision (the terminal tables round)."""

from __future__ import annotations

import csv
from pathlib import Path

from gnnrun.io import atomic_file, write_error
from gnnrun.report.repeats import (
    RepeatGroup,
    best_configurations,
    epochs_to_target,
    seconds_to_target,
    summarised_figures,
)
from gnnrun.report.rows import PHASES, ReportRow, figures_of, hit_layers, present_figures


def write_csv(rows: list[ReportRow], path: Path) -> None:
    """One line per row. Times in seconds, bytes in bytes; every phase of
    time_median gets a `<phase>_s` column (the table shows only PHASES)."""
    phases = list(PHASES)
    for row in rows:
        phases += [p for p in row.time if p not in phases]
    every = [f"{split}_{key}" for key, _ in figures_of(rows) for split in ("val", "test")]
    scores = [s for s in every if any(s in r.best or s in r.final for r in rows)]
    comparing = any(r.run for r in rows)
    header = ["run"] if comparing else []
    header += ["point", "path", "overrides", "dataset", "model", "algorithm", "ranks"]
    header += ["status", "epochs", "epoch_s", *(f"{p}_s" for p in phases)]
    header += ["bytes_per_epoch", "peak_rss_mb", "best_epoch"]
    header += [f"best_{s}" for s in scores] + [f"final_{s}" for s in scores]
    header += [f"hit_rate_L{i}" for i in range(hit_layers(rows))]
    header += ["target", "epochs_to_target", "seconds_to_target", "comm_hidden"]
    if comparing:
        header += ["epoch_ratio", "bytes_ratio"]
    lines = []
    for row in rows:
        hits = row.hit_rate + [None] * (hit_layers(rows) - len(row.hit_rate))
        line = [row.run] if comparing else []
        line += [row.point, row.path, " ".join(row.overrides), row.dataset, row.model]
        line += [row.algorithm, row.ranks, row.status, row.epochs, row.epoch_s]
        line += [row.time.get(p) for p in phases]
        line += [row.bytes_per_epoch, row.peak_rss_mb, row.best_epoch]
        line += [row.best.get(s) for s in scores] + [row.final.get(s) for s in scores]
        line += hits
        reached = row.to_target or {}
        line += [reached.get("target"), reached.get("epochs"), reached.get("seconds")]
        line.append(row.comm_hidden)
        if comparing:
            line += [row.epoch_ratio, row.bytes_ratio]
        lines.append(line)
    _write(path, header, lines)


def write_repeats_csv(groups: list[RepeatGroup], rows: list[ReportRow], path: Path) -> None:
    """One line per configuration of the repetitions table: its overrides, the points it
    repeats over, how many finished, each figure's mean and sample standard deviation
    (empty below two finished points) at full precision, and whether it is its
    algorithm's best configuration."""
    figures = {"epoch_s": lambda r: r.epoch_s}
    targets = any(g.reached() for g in groups)  # every run given train.target
    if targets:
        figures |= {"epochs_to_target": epochs_to_target, "seconds_to_target": seconds_to_target}
    for key, name in present_figures(rows):
        figures |= {column: figure for _, column, figure in summarised_figures(key, name)}
    comparing = any(g.run for g in groups)
    header = ["run"] if comparing else []
    header += ["overrides", "over", "algorithm", "ranks", "points", "finished", "runs"]
    header += [f"{name}_{stat}" for name in figures for stat in ("mean", "std")]
    header += ["reached_target"] if targets else []
    header.append("best")
    best = best_configurations(groups)
    lines = []
    for index, group in enumerate(groups):
        line = [group.run] if comparing else []
        line += [" ".join(group.overrides), " ".join(group.keys), group.algorithm, group.ranks]
        line += [" ".join(r.point for r in group.rows), len(group.finished), len(group.rows)]
        for figure in figures.values():
            line += list(group.spread(figure))
        if targets:
            reached = group.reached()
            line.append(None if reached is None else reached[0])
        line.append(index in best)
        lines.append(line)
    _write(path, header, lines)


def _write(path: Path, header: list[str], lines: list[list]) -> None:
    """The CSV file, atomically. str() of a float is its shortest exact repr; None is an
    empty field."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(path, exc) from None
    with atomic_file(path, "w") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(["" if v is None else str(v) for v in line] for line in lines)
