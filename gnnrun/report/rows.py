"""One row of figures per run, taken from summary.json as it stands: the table,
the CSV and the comparison ratios are all built from these rows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnrun.report.runs import Run, RunSet, distinguishing_overrides

# The epoch-time split of the DistGNN / DistGNN-MB papers (their Figures 3 and 4).
PHASES = ("mbc", "fwd", "bwd", "comm", "ared")

# The figures of summaries written before they recorded their task's ("figures"): each
# (key suffix, how tables name it), shown where the summary holds it.
EARLIER_FIGURES = (("acc", "acc"), ("mrr", "MRR"), ("auc", "AUC"), ("ap", "AP"))


@dataclass
class ReportRow:
    run: str  # "A" / "B" in a comparison, else empty
    point: str
    path: Path
    overrides: list[str]
    dataset: str
    model: str
    algorithm: str
    ranks: int | None
    status: str
    epochs: int | None = None
    epoch_s: float | None = None
    # time_median of summary.json: every phase, PHASES first
    time: dict[str, float] = field(default_factory=dict)
    bytes_per_epoch: float | None = None
    peak_rss_mb: float | None = None
    best_epoch: int | None = None  # counted from 1, as the epoch table shows it
    best: dict[str, float] = field(default_factory=dict)  # val_acc, test_acc, ... at best_epoch
    final: dict[str, float] = field(default_factory=dict)  # the same at the last evaluation
    # The task's figures (summary.json's "figures": key suffix, name in tables), and the
    # validation figure that picked the best epoch.
    figures: list[tuple[str, str]] = field(default_factory=list)
    best_metric: str | None = None
    hit_rate: list[float] = field(default_factory=list)  # per layer, input layer first (hec)
    to_target: dict[str, Any] | None = None  # summary.json's to_target
    comm_hidden: float | None = None  # cd0 / cdr: share of DRPA's time in flight not waited for
    epoch_ratio: float | None = None  # B / A, for a compared row that has a match in A
    bytes_ratio: float | None = None

    @property
    def match_key(self) -> tuple[str, int | None, str, str]:
        """What makes two runs comparable across a comparison."""
        return (self.algorithm, self.ranks, self.dataset, self.model)


def report_rows(sets: list[RunSet]) -> list[ReportRow]:
    rows = []
    for run_set in sets:
        own, _ = distinguishing_overrides(run_set.runs)
        for run, overrides in zip(run_set.runs, own, strict=True):
            rows.append(_row(run, run_set.label, overrides))
    if len(sets) == 2:
        _add_ratios(
            [r for r in rows if r.run == sets[0].label], [r for r in rows if r.run == sets[1].label]
        )
    return rows


def _row(run: Run, label: str, overrides: list[str]) -> ReportRow:
    row = ReportRow(
        run=label,
        point=run.point,
        path=run.path,
        overrides=overrides,
        dataset=run.dataset,
        model=run.model,
        algorithm=run.algorithm,
        ranks=run.ranks,
        status=run.status,
    )
    summary: dict[str, Any] | None = run.summary
    if summary is None:
        return row
    time = summary.get("time_median") or {}
    best = dict(summary.get("best") or {})
    best_epoch = best.pop("epoch", None)
    row.epochs = summary.get("epochs")
    row.epoch_s = summary.get("epoch_s_median")
    row.time = {**{p: time[p] for p in PHASES if p in time}, **time}
    row.bytes_per_epoch = summary.get("bytes_per_epoch_rank0")
    row.peak_rss_mb = summary.get("peak_rss_mb_rank0")
    row.best_epoch = best_epoch + 1 if best_epoch is not None else None
    row.best = best
    row.final = dict(summary.get("final") or {})
    keys = set(row.best) | set(row.final)
    row.figures = [tuple(f) for f in summary.get("figures") or []] or [
        f for f in EARLIER_FIGURES if f"val_{f[0]}" in keys or f"test_{f[0]}" in keys
    ]
    row.best_metric = summary.get("best_metric")
    # a layer without lookups may have no rate (null): NaN keeps the layers in place
    row.hit_rate = [math.nan if h is None else float(h) for h in summary.get("hit_rate") or []]
    row.to_target = summary.get("to_target")
    row.comm_hidden = summary.get("comm_hidden_rank0")
    return row


def _add_ratios(first: list[ReportRow], second: list[ReportRow]) -> None:
    """B/A epoch time and bytes for each row of B with one counterpart in A.

    Rows match on (algorithm, ranks, dataset, model); where A holds several
    such rows (a sweep over something else too), the one with the same
    distinguishing overrides is taken, and none when that is still ambiguous.
    """
    for row in second:
        candidates = [a for a in first if a.match_key == row.match_key]
        if len(candidates) > 1:
            candidates = [a for a in candidates if set(a.overrides) == set(row.overrides)]
        if len(candidates) != 1:
            continue
        match = candidates[0]
        row.epoch_ratio = _ratio(row.epoch_s, match.epoch_s)
        row.bytes_ratio = _ratio(row.bytes_per_epoch, match.bytes_per_epoch)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def figures_of(rows: list[ReportRow]) -> list[tuple[str, str]]:
    """Every figure of the rows' tasks, in the order the first row to have it gives."""
    seen: dict[str, str] = {}
    for row in rows:
        for key, name in row.figures:
            seen.setdefault(key, name)
    return list(seen.items())


def present_figures(rows: list[ReportRow]) -> list[tuple[str, str]]:
    """The figures of the rows' tasks (summary.json's) that some row has; accuracy where
    no row has any (runs without results yet)."""
    return [
        (key, name)
        for key, name in figures_of(rows)
        if any(f"val_{key}" in r.best or f"test_{key}" in r.final for r in rows)
    ] or [("acc", "acc")]


def hit_layers(rows: list[ReportRow]) -> int:
    return max((len(r.hit_rate) for r in rows), default=0)
