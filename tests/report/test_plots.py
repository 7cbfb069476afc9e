"""The PNGs: written when there is data, valid and not blank, and drawn from the
figures of summary.json (bar heights, speedups)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.image import imread

from gnnrun.report.plots import epoch_time_figure, speedup_figure, write_plots
from gnnrun.report.rows import PHASES
from gnnrun.report.runs import load_run_set

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
    # each pixel's channels packed into one integer: counting colours stays cheap
    channels = np.round(pixels * 255).astype(np.uint64).reshape(-1, pixels.shape[2])
    packed = sum(channels[:, c] << np.uint64(8 * c) for c in range(pixels.shape[2]))
    assert len(np.unique(packed)) > 10, f"{path} is (nearly) one colour"


def test_hec_sweep_gets_every_plot(hec_sweep, tmp_path):
    result = write_plots([load_run_set(hec_sweep)], tmp_path / "out")
    names = [p.name for p in result.written]
    assert names == ["epoch_time.png", "speedup.png", "accuracy.png", "hit_rate.png"]
    assert result.skipped == []
    for path in result.written:
        assert_png(path)


def test_a_lone_run_skips_what_has_no_data(single, tmp_path):
    result = write_plots([load_run_set(single)], tmp_path)
    assert [p.name for p in result.written] == ["epoch_time.png", "accuracy.png"]
    assert [name for name, _ in result.skipped] == ["speedup.png", "hit_rate.png"]
    for path in result.written:
        assert_png(path)


def test_comparison_overlays_both(sweep, hec_sweep, tmp_path):
    sets = [load_run_set(sweep, "A"), load_run_set(hec_sweep, "B")]
    result = write_plots(sets, tmp_path)
    assert len(result.written) == 4
    for path in result.written:
        assert_png(path)


def test_breakdown_bars_are_the_summary_medians(sweep):
    figure = epoch_time_figure([load_run_set(sweep)])
    (ax,) = figure.axes
    heights = [bar.get_height() for bar in ax.patches]
    stacked = len(PHASES) + 1  # the five phases, then the rest of the epoch
    for index, point in enumerate(("0", "1")):  # 1 rank, then 2
        summary = json.loads((sweep / point / "summary.json").read_text())
        bars = heights[index * stacked : (index + 1) * stacked]
        assert bars[: len(PHASES)] == [summary["time_median"][p] for p in PHASES]
        assert sum(bars) == pytest.approx(max(summary["epoch_s_median"], sum(bars[:-1])))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]


def test_speedup_is_over_the_smallest_rank_count(hec_sweep):
    figure = speedup_figure([load_run_set(hec_sweep)])
    ax = figure.axes[0]
    line = next(line for line in ax.get_lines() if line.get_label().startswith("hec"))
    epoch = [
        json.loads((hec_sweep / p / "summary.json").read_text())["epoch_s_median"]
        for p in ("0", "1", "2")
    ]
    assert list(line.get_xdata()) == [1, 2, 4]
    assert list(line.get_ydata()) == pytest.approx([epoch[0] / e for e in epoch])


def test_a_grid_over_other_settings_stays_one_panel_per_algorithm(hec_sweep, tmp_path):
    # the same three rank counts again with another cache size: 6 bars, one panel
    grid = tmp_path / "grid"
    for point in ("0", "1", "2"):
        for copy, size in ((point, 1000), (str(int(point) + 3), 5000)):
            source = hec_sweep / point
            target = grid / copy
            target.mkdir(parents=True)
            for name in ("summary.json", "metrics.rank0.jsonl"):
                (target / name).write_bytes((source / name).read_bytes())
            overrides = (source / ".hydra" / "overrides.yaml").read_text()
            (target / ".hydra").mkdir()
            (target / ".hydra" / "overrides.yaml").write_text(
                overrides + f"- algorithm.cache_size={size}\n"
            )
    (grid / "multirun.yaml").write_text("hydra: {}\n")
    figure = epoch_time_figure([load_run_set(grid)])
    (ax,) = figure.axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [
        f"{r} rank{'s' if r > 1 else ''} cache_size={s}" for s in (1000, 5000) for r in (1, 2, 4)
    ]
    assert len(ax.patches) == 6 * (len(PHASES) + 1)
    speedup = speedup_figure([load_run_set(grid)])
    assert len([ln for ln in speedup.axes[0].get_lines() if ln.get_label() != "linear"]) == 2
