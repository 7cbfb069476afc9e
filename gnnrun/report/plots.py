"""PNG figures of a report: epoch-time breakdown and speedup against rank count
(as in the DistGNN / DistGNN-MB papers' Figures 3 and 4), accuracy per epoch,
and HEC's cache hit rate per layer.

Figures are drawn on matplotlib's Agg canvas directly, never through pyplot:
no display is needed and no global figure state is left behind.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_file
from gnnrun.report.repeats import RepeatGroup
from gnnrun.report.rows import EARLIER_FIGURES, PHASES
from gnnrun.report.runs import RANK_KEYS, Run, RunSet, distinguishing_overrides, override_key

_PHASE_COLOURS = {
    "mbc": "#4c72b0",
    "fwd": "#dd8452",
    "bwd": "#55a868",
    "comm": "#c44e52",
    "ared": "#8172b3",
    "other": "#cccccc",
}
_PHASE_LABELS = {
    "mbc": "MBC (minibatch creation)",
    "fwd": "FWD (forward)",
    "bwd": "BWD (backward)",
    "comm": "COMM (communication)",
    "ared": "ARed (gradient all-reduce)",
    "other": "other (optimizer, evaluation, ...)",
}
# Second run set of a comparison: hatched bars, dashed lines.
_HATCHES = (None, "//")
_LINESTYLES = ("-", "--")
_DPI = 110


@dataclass
class PlotResult:
    written: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file name, why)


def write_plots(
    sets: list[RunSet], out_dir: Path, groups: Sequence[RepeatGroup] = ()
) -> PlotResult:
    """Every figure that has data, as out_dir/<name>.png; the others are listed as skipped.
    `groups`: the sweep's repetitions of a configuration (gnnrun.report.repeats), drawn as
    repeats.png where there are some (and nothing said where there are none)."""
    figures: dict[str, tuple[Callable[[], Figure | None], str]] = {
        "epoch_time": (lambda: epoch_time_figure(sets), "no finished run has an epoch-time split"),
        "speedup": (
            lambda: speedup_figure(sets),
            "no algorithm was run at two or more rank counts",
        ),
        "accuracy": (lambda: accuracy_figure(sets), "no run has evaluated an epoch yet"),
        "hit_rate": (
            lambda: hit_rate_figure(sets),
            "no run records cache hit rates (algorithm=hec does)",
        ),
    }
    if groups:
        figures["repeats"] = (
            lambda: repeats_figure(sets, groups),
            "no repeated configuration has two finished runs that evaluated",
        )
    result = PlotResult()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GnnrunError(f"cannot create the report directory {out_dir}: {exc.strerror}") from None
    for name, (draw, why_not) in figures.items():
        figure = draw()
        if figure is None:
            result.skipped.append((f"{name}.png", why_not))
            continue
        path = out_dir / f"{name}.png"
        FigureCanvasAgg(figure)
        with atomic_file(path, "wb") as f:  # a report read while it is rewritten stays whole
            figure.savefig(f, dpi=_DPI, format="png")
        result.written.append(path)
    return result


# ------------------------------------------------------------------ scaling


@dataclass
class _Scaling:
    """One algorithm (with the same other overrides) at several rank counts, in one run set."""

    algorithm: str
    extra: str  # the other overrides that set this series apart, space-separated
    set_index: int
    by_ranks: dict[int, Run]

    @property
    def name(self) -> str:
        return f"{self.algorithm} {self.extra}".strip()


def _scaling_series(sets: list[RunSet]) -> list[_Scaling]:
    series: dict[tuple[str, int], _Scaling] = {}
    for index, run_set in enumerate(sets):
        own, _ = distinguishing_overrides(run_set.runs)
        for run, overrides in zip(run_set.runs, own, strict=True):
            if run.summary is None or not run.summary.get("epoch_s_median") or run.ranks is None:
                continue
            if run_set.kind == "run":
                overrides = []  # a lone run: every override would be "distinguishing"
            extra = _brief(
                [o for o in overrides if override_key(o) not in (*RANK_KEYS, "algorithm")]
            )
            key = (run.algorithm, extra, index)
            entry = series.setdefault(key, _Scaling(run.algorithm, extra, index, {}))
            entry.by_ranks.setdefault(run.ranks, run)
    return list(series.values())


def epoch_time_figure(sets: list[RunSet]) -> Figure | None:
    """Stacked median epoch time (MBC, FWD, BWD, COMM, ARed, the rest) per rank count,
    one panel per algorithm; a comparison's second run set is hatched beside the first."""
    series = [
        s
        for s in _scaling_series(sets)
        if any(r.summary.get("time_median") for r in s.by_ranks.values())
    ]
    if not series:
        return None
    # One panel per algorithm; inside it one bar (per run set) for each rank
    # count of each of its series, so that a grid over other settings stays one panel.
    algorithms = list(dict.fromkeys(s.algorithm for s in series))
    figure, axes = _panels(len(algorithms), sharey=True)
    width = 0.8 / len(sets)
    for ax, algorithm in zip(axes, algorithms, strict=False):
        mine = [s for s in series if s.algorithm == algorithm]
        extras = list(dict.fromkeys(s.extra for s in mine))
        slots = [
            (e, r)
            for e in extras
            for r in sorted({r for s in mine if s.extra == e for r in s.by_ranks})
        ]
        for s in mine:
            for position, (extra, rank) in enumerate(slots):
                run = s.by_ranks.get(rank) if extra == s.extra else None
                if run is None:
                    continue
                x = position + (s.set_index - (len(sets) - 1) / 2) * width
                bottom = 0.0
                for phase, seconds in _phase_split(run.summary).items():
                    ax.bar(
                        x,
                        seconds,
                        width * 0.95,
                        bottom=bottom,
                        color=_PHASE_COLOURS[phase],
                        hatch=_HATCHES[s.set_index],
                        edgecolor="white" if s.set_index == 0 else "black",
                        linewidth=0.5,
                    )
                    bottom += seconds
        if extras == [""]:
            ax.set_xticks(range(len(slots)), [str(r) for _, r in slots])
            ax.set_xlabel("ranks")
        else:
            labels = [f"{r} rank{'s' if r > 1 else ''} {_shorten(e, 32)}" for e, r in slots]
            ax.set_xticks(range(len(slots)), labels, rotation=30, ha="right", fontsize=8)
            ax.set_xlabel("ranks and overrides")
        pad = max(0.0, (3 - len(slots)) / 2)  # one or two bars do not fill a panel
        ax.set_xlim(-0.5 - pad, len(slots) - 0.5 + pad)
        ax.set_title(algorithm, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[:: _columns(len(algorithms))]:
        ax.set_ylabel("median epoch time (s)")
    handles = [Patch(color=_PHASE_COLOURS[p], label=_PHASE_LABELS[p]) for p in _PHASE_COLOURS]
    handles += _set_handles(sets, bars=True)
    _legend(figure, handles)
    figure.suptitle("Epoch time breakdown against rank count (rank 0, medians over epochs)")
    return figure


def _phase_split(summary: dict) -> dict[str, float]:
    """The five phases' medians and what is left of the median epoch (clipped at 0:
    a sum of medians is not the median of sums)."""
    time = summary.get("time_median") or {}
    split = {p: float(time.get(p, 0.0)) for p in PHASES}
    split["other"] = max(float(summary["epoch_s_median"]) - sum(split.values()), 0.0)
    return split


def speedup_figure(sets: list[RunSet]) -> Figure | None:
    """Epoch-time speedup over each algorithm's smallest rank count, with linear scaling."""
    series = [s for s in _scaling_series(sets) if len(s.by_ranks) >= 2]
    if not series:
        return None
    figure = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = figure.add_subplot()
    colours = _colours(len({s.name for s in series}))
    colour_of = {name: colours[i] for i, name in enumerate(dict.fromkeys(s.name for s in series))}
    all_ranks = set()
    for s in series:
        ranks = sorted(s.by_ranks)
        base = s.by_ranks[ranks[0]].summary["epoch_s_median"]
        speedup = [base / s.by_ranks[r].summary["epoch_s_median"] for r in ranks]
        label = s.name + (f" ({sets[s.set_index].label})" if len(sets) > 1 else "")
        label += f", over {ranks[0]} rank{'s' if ranks[0] > 1 else ''}"
        ax.plot(
            ranks,
            speedup,
            marker="o",
            linestyle=_LINESTYLES[s.set_index],
            color=colour_of[s.name],
            label=label,
        )
        all_ranks.update(ranks)
    smallest = min(all_ranks)
    ticks = sorted(all_ranks)
    ax.plot(ticks, [r / smallest for r in ticks], color="grey", linestyle=":", label="linear")
    ax.set_xticks(ticks)
    ax.set_xlabel("ranks")
    ax.set_ylabel("speedup (epoch time at smallest rank count / epoch time)")
    ax.set_title("Speedup against rank count (median epoch time, rank 0)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure


# ------------------------------------------------------------ per epoch


def _labelled_runs(sets: list[RunSet]) -> list[tuple[int, int, Run, str]]:
    """(set index, colour index, run, legend label) for every run of every set."""
    labelled = []
    for index, run_set in enumerate(sets):
        own, _ = distinguishing_overrides(run_set.runs)
        for position, (run, overrides) in enumerate(zip(run_set.runs, own, strict=True)):
            if run_set.kind == "sweep":
                text = f"{run.point}: {_brief(overrides) or run.algorithm}"
            else:
                ranks = f", {run.ranks} rank{'s' if (run.ranks or 0) > 1 else ''}"
                text = f"{run.algorithm}{ranks if run.ranks else ''}"
            text = _shorten(text, 48)
            tag = f"{run_set.label}  " if run_set.label else ""
            labelled.append((index, position, run, tag + text))
    return labelled


def accuracy_figure(sets: list[RunSet]) -> Figure | None:
    """The task's best validation figure and its test figure (the runs' `best_metric`)
    against epoch, one line per run (rank 0's records)."""
    runs = _labelled_runs(sets)
    metric, name = _headline([run for _, _, run, _ in runs])
    curves = [
        (index, position, label, [r for r in run.history if f"val_{metric}" in r])
        for index, position, run, label in runs
    ]
    curves = [c for c in curves if c[3]]
    if not curves:
        return None
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    axes = figure.subplots(1, 2, sharey=True)
    colours = _colours(max(c[1] for c in curves) + 1)
    for ax, split, title in zip(axes, ("val", "test"), ("validation", "test"), strict=True):
        for index, position, label, records in curves:
            points = [
                (r["epoch"] + 1, r[f"{split}_{metric}"])
                for r in records
                if f"{split}_{metric}" in r
            ]
            if not points:
                continue
            ax.plot(
                *zip(*points, strict=True),
                marker="." if len(points) < 30 else None,
                linestyle=_LINESTYLES[index],
                color=colours[position],
                label=label,
            )
        ax.set_title(f"{title} {name}")
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel(_AXIS_NAMES.get(metric, name))
    handles = axes[0].get_legend_handles_labels()[0] + _set_handles(sets, bars=False)
    _legend(figure, handles)
    figure.suptitle(f"{name[0].upper() + name[1:]} against epoch (rank 0's metrics)")
    return figure


def repeats_figure(sets: list[RunSet], groups: Sequence[RepeatGroup]) -> Figure | None:
    """Each repeated configuration's validation and test figure against epoch: the mean
    over its finished runs, in a band of ± one standard deviation where two or more runs
    reached the epoch (runs stopped early end sooner)."""
    runs = [run for run_set in sets for run in run_set.runs]
    metric, name = _headline(runs)
    histories = {run.path: run.history for run in runs}
    drawn = []
    for group in groups:
        curves = [histories.get(row.path, []) for row in group.finished]
        curves = [[r for r in h if f"val_{metric}" in r] for h in curves]
        if sum(1 for h in curves if h) >= 2:
            drawn.append((group, curves))
    if not drawn:
        return None
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    axes = figure.subplots(1, 2, sharey=True)
    colours = _colours(len(drawn))
    labels = {id(g): _brief(g.overrides) or "every point" for g, _ in drawn}
    comparing = len(sets) == 2
    for ax, split, title in zip(axes, ("val", "test"), ("validation", "test"), strict=True):
        for colour, (group, curves) in zip(colours, drawn, strict=True):
            by_epoch: dict[int, list[float]] = {}
            for history in curves:
                for record in history:
                    value = record.get(f"{split}_{metric}")
                    if value is not None:
                        by_epoch.setdefault(record["epoch"] + 1, []).append(float(value))
            if not by_epoch:
                continue
            epochs = sorted(by_epoch)
            means = [statistics.fmean(by_epoch[e]) for e in epochs]
            label = f"{group.run}: {labels[id(group)]}" if comparing else labels[id(group)]
            label += f" ({len(curves)} runs)"
            style = _LINESTYLES[[s.label for s in sets].index(group.run)] if comparing else "-"
            ax.plot(epochs, means, color=colour, linestyle=style, label=label)
            spread = [
                (e, m, statistics.stdev(by_epoch[e]))
                for e, m in zip(epochs, means, strict=True)
                if len(by_epoch[e]) > 1
            ]
            if spread:
                at, mean, std = zip(*spread, strict=True)
                low = [m - d for m, d in zip(mean, std, strict=True)]
                high = [m + d for m, d in zip(mean, std, strict=True)]
                ax.fill_between(at, low, high, color=colour, alpha=0.2, linewidth=0)
        ax.set_title(f"{title} {name}")
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel(_AXIS_NAMES.get(metric, name))
    _legend(figure, axes[0].get_legend_handles_labels()[0])
    keys = ", ".join(sorted({k for g, _ in drawn for k in g.keys}))
    figure.suptitle(
        f"{name[0].upper() + name[1:]} against epoch over repetitions ({keys}): "
        "mean ± standard deviation of the finished runs"
    )
    return figure


# Longer names of some figures, for titles and for an axis.
_PLOT_NAMES = {"acc": "accuracy"}
_AXIS_NAMES = {"acc": "accuracy (fraction correct)", "mrr": "mean reciprocal rank"}


def _headline(runs: list[Run]) -> tuple[str, str]:
    """The figure the runs' summaries say picked their best epoch (the first that says,
    as key suffix and name); for runs without one, the first earlier figure they logged."""
    for run in runs:
        best = (run.summary or {}).get("best_metric")
        if best:
            key = best.removeprefix("val_")
            names = dict(tuple(f) for f in run.summary.get("figures") or [])
            return key, _PLOT_NAMES.get(key, names.get(key, key))
    for key, name in EARLIER_FIGURES:
        if any(f"val_{key}" in r for run in runs for r in run.history):
            return key, _PLOT_NAMES.get(key, name)
    return "acc", "accuracy"


def hit_rate_figure(sets: list[RunSet]) -> Figure | None:
    """HEC's cache hit rate against epoch, one panel per layer (L0: the input layer).
    A run with a hit rate in summary.json only is one marker at its last epoch."""
    curves = []
    for index, position, run, label in _labelled_runs(sets):
        records = [r for r in run.history if r.get("hit_rate")]
        per_epoch = [(r["epoch"] + 1, list(r["hit_rate"])) for r in records]
        if not per_epoch and run.summary and run.summary.get("hit_rate"):
            per_epoch = [(run.summary.get("epochs") or 1, list(run.summary["hit_rate"]))]
        if per_epoch:
            curves.append((index, position, label, per_epoch))
    if not curves:
        return None
    layers = max(len(rates) for *_, per_epoch in curves for _, rates in per_epoch)
    figure, axes = _panels(layers, sharey=True)
    colours = _colours(max(c[1] for c in curves) + 1)
    for layer, ax in enumerate(axes):
        for index, position, label, per_epoch in curves:
            points = [
                (e, rates[layer])
                for e, rates in per_epoch
                if layer < len(rates) and rates[layer] is not None
            ]
            if not points:
                continue
            ax.plot(
                *zip(*points, strict=True),
                marker="o" if len(points) == 1 else ("." if len(points) < 30 else None),
                linestyle=_LINESTYLES[index],
                color=colours[position],
                label=label,
            )
        ax.set_title(f"layer L{layer}" + (" (input)" if layer == 0 else ""), fontsize=10)
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in axes[:: _columns(layers)]:
        ax.set_ylabel("hit rate (fraction of lookups)")
    handles = axes[0].get_legend_handles_labels()[0] + _set_handles(sets, bars=False)
    _legend(figure, handles)
    figure.suptitle("HEC cache hit rate per layer (all ranks)")
    return figure


# ------------------------------------------------------------------ helpers


def _legend(figure: Figure, handles: list) -> None:
    """Below the panels, across the figure's width: long labels (paths, overrides)
    then never crowd the title or squeeze the panels."""
    figure.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 3), fontsize=8
    )


def _brief(overrides: list[str]) -> str:
    """Overrides for a legend or tick label: a key by its last part
    (`algorithm.cache_size=1000` as `cache_size=1000`)."""
    return " ".join(
        f"{override_key(o).rsplit('.', 1)[-1]}={o.partition('=')[2]}" for o in overrides
    )


def _shorten(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _columns(panels: int) -> int:
    return min(panels, 3)


def _panels(count: int, sharey: bool) -> tuple[Figure, list]:
    columns = _columns(count)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(3.6 * columns + 3.2, 3.4 * rows + 0.8), layout="constrained")
    axes = figure.subplots(rows, columns, sharey=sharey, squeeze=False).ravel().tolist()
    for ax in axes[count:]:
        ax.set_visible(False)
    return figure, axes[:count]


def _colours(count: int) -> list:
    from matplotlib import colormaps

    if count <= 10:
        return list(colormaps["tab10"].colors[:count])
    return [colormaps["viridis"](i / max(count - 1, 1)) for i in range(count)]


def _set_handles(sets: list[RunSet], bars: bool) -> list:
    """Legend entries telling a comparison's two run sets apart."""
    if len(sets) < 2:
        return []
    handles = []
    for index, run_set in enumerate(sets):
        label = f"{run_set.label}: {run_set.path}"
        if bars:
            handles.append(
                Patch(facecolor="white", edgecolor="black", hatch=_HATCHES[index], label=label)
            )
        else:
            handles.append(Line2D([], [], color="black", linestyle=_LINESTYLES[index], label=label))
    return handles
