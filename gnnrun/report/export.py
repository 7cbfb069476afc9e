"""The report's rows as CSV, at full precision (the terminal table rounds)."""

from __future__ import annotations

import csv
from pathlib import Path

from gnnrun.errors import GnnrunError
from gnnrun.report.rows import PHASES, ReportRow, figures_of, hit_layers


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
        # str() of a float is its shortest exact repr; None is an empty field.
        lines.append(["" if v is None else str(v) for v in line])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(lines)
    except OSError as exc:
        raise GnnrunError(f"cannot write the CSV to {path}: {exc.strerror}") from None
