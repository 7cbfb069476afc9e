"""A sweep's repetitions of one configuration (seeds, a dataset's splits) summarised
as mean ± standard deviation: the groups, the figures, the table, repeats.csv and
--over."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from gnnrun.cli import main
from gnnrun.report.plots import repeats_figure
from gnnrun.report.repeats import repeat_groups
from gnnrun.report.rows import report_rows
from gnnrun.report.runs import load_run_set

# (algorithm, seed) -> (best val, test at best val, final test, epoch s); None: unfinished
FIGURES = {
    ("minibatch", 0): (0.80, 0.78, 0.77, 1.0),
    ("minibatch", 1): (0.84, 0.80, 0.79, 1.2),
    ("minibatch", 2): (0.83, 0.81, 0.80, 1.1),
    ("hec", 0): (0.70, 0.69, 0.70, 0.5),
    ("hec", 1): (0.74, 0.72, 0.71, 0.6),
    ("hec", 2): None,
}


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")


@pytest.fixture
def seeds_sweep(tmp_path, fabricate) -> Path:
    """Two algorithms at three seeds each; hec's third point still running."""
    root = tmp_path / "seeds"
    for point, ((algorithm, seed), figures) in enumerate(FIGURES.items()):
        overrides = ["dataset=synthetic-tiny", f"algorithm={algorithm}", f"train.seed={seed}"]
        record = {"epoch": 0, "rank": 0, "epoch_s": 1.0, "val_acc": 0.5, "test_acc": 0.5}
        summary = None
        if figures is not None:
            val, best_test, final_test, epoch_s = figures
            record |= {"val_acc": val, "test_acc": final_test}
            summary = {
                "algorithm": algorithm,
                "ranks": 2,
                "epochs": 3,
                "complete": True,
                "best": {"epoch": 1, "val_acc": val, "test_acc": best_test},
                "final": {"val_acc": val - 0.01, "test_acc": final_test},
                "epoch_s_median": epoch_s,
            }
        fabricate(root / str(point), summary, [record], overrides)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def _finished(algorithm: str, column: int) -> list[float]:
    return [f[column] for (a, _), f in FIGURES.items() if a == algorithm and f is not None]


def test_points_that_differ_only_in_the_seed_are_one_group_of_finished_runs(seeds_sweep):
    rows = report_rows([load_run_set(seeds_sweep)])
    groups = repeat_groups(rows)
    assert [g.overrides for g in groups] == [["algorithm=minibatch"], ["algorithm=hec"]]
    assert [g.keys for g in groups] == [["train.seed"], ["train.seed"]]
    assert [(len(g.finished), len(g.rows)) for g in groups] == [(3, 3), (2, 3)]
    minibatch, hec = groups
    mean, std = minibatch.spread(lambda r: r.best.get("test_acc"))
    assert mean == pytest.approx(statistics.fmean(_finished("minibatch", 1)))
    assert std == pytest.approx(statistics.stdev(_finished("minibatch", 1)))
    assert hec.spread(lambda r: r.final.get("test_acc"))[0] == pytest.approx(0.705)
    # Nothing repeats where no point sets a repetition key, nor in a lone run that sets one.
    assert repeat_groups(rows, ("dataset.split",)) == []
    assert repeat_groups(report_rows([load_run_set(seeds_sweep / "0")])) == []


def test_the_report_prints_mean_and_deviation_and_writes_repeats_csv(seeds_sweep, capsys, tables):
    assert main(["report", str(seeds_sweep)]) == 0
    printed = capsys.readouterr().out
    head, repeats = printed.split("over repetitions (train.seed)", 1)
    assert len(tables(head)) == 6  # the table of every point comes first, as before
    rows = {r["overrides"]: r for r in tables(repeats, key=("run", "overrides"))}
    minibatch, hec = rows["algorithm=minibatch"], rows["algorithm=hec"]
    assert minibatch["runs"] == "3 of 3" and hec["runs"] == "2 of 3"
    assert minibatch["points"] == "0,1,2" and hec["points"] == "3,4,5"
    spread = (
        statistics.fmean(_finished("minibatch", 1)),
        statistics.stdev(_finished("minibatch", 1)),
    )
    assert minibatch["test at best val acc"] == f"{spread[0]:.4f} ± {spread[1]:.4f}"
    assert minibatch["best val acc"].startswith(
        f"{statistics.fmean(_finished('minibatch', 0)):.4f} ± "
    )
    assert hec["final test acc"] == f"{0.705:.4f} ± {statistics.stdev([0.70, 0.71]):.4f}"
    assert "repetitions as CSV: " in printed
    with open(seeds_sweep / "report" / "repeats.csv", newline="") as f:
        lines = {line["overrides"]: line for line in csv.DictReader(f)}
    assert lines["algorithm=hec"]["finished"] == "2" and lines["algorithm=hec"]["runs"] == "3"
    assert float(lines["algorithm=minibatch"]["best_test_acc_mean"]) == pytest.approx(spread[0])
    assert float(lines["algorithm=minibatch"]["best_test_acc_std"]) == pytest.approx(spread[1])
    assert float(lines["algorithm=minibatch"]["epoch_s_mean"]) == pytest.approx(1.1)

    # repeats.png: each configuration's mean over its finished runs, in a band of ± std.
    assert "plot: " + str(seeds_sweep / "report" / "repeats.png") in printed
    sets = [load_run_set(seeds_sweep)]
    figure = repeats_figure(sets, repeat_groups(report_rows(sets)))
    validation = figure.axes[0]
    means = [line.get_ydata()[0] for line in validation.lines]
    assert means == pytest.approx([statistics.fmean(_finished(a, 0)) for a in ("minibatch", "hec")])
    assert [line.get_label() for line in validation.lines] == [
        "algorithm=minibatch (3 runs)",
        "algorithm=hec (2 runs)",
    ]
    assert len(validation.collections) == 2  # the bands


def test_over_names_the_keys_and_a_sweep_without_repetitions_gets_no_second_table(
    seeds_sweep, hec_sweep, capsys
):
    # Over the algorithm instead: each seed is a group of two (hec's third point unfinished).
    assert main(["report", str(seeds_sweep), "--over", "algorithm"]) == 0
    printed = capsys.readouterr().out
    assert "over repetitions (algorithm)" in printed
    with open(seeds_sweep / "report" / "repeats.csv", newline="") as f:
        assert [line["overrides"] for line in csv.DictReader(f)] == [
            "train.seed=0",
            "train.seed=1",
            "train.seed=2",
        ]
    assert main(["report", str(hec_sweep)]) == 0  # a sweep over ranks only
    assert "over repetitions" not in capsys.readouterr().out
    assert not (hec_sweep / "report" / "repeats.csv").exists()
    assert not (hec_sweep / "report" / "repeats.png").exists()
    assert main(["report", str(seeds_sweep), "--over", "train.sed"]) == 0  # a typo is named
    printed = " ".join(capsys.readouterr().out.split())
    assert "--over train.sed: no two points of" in printed and "over repetitions" not in printed
    assert main(["report", str(seeds_sweep), "--over", "train.seed=1"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "argument --over: 'train.seed=1': give override keys without values" in err


def test_the_best_configuration_of_each_algorithm_is_marked(tmp_path, fabricate, capsys, tables):
    """A learning-rate search over seeds (+sweep=lr_tune): the rate of the highest mean
    validation figure is each algorithm's best, not the rate of the single best run."""
    root = tmp_path / "lr"
    vals = {("0.01", 0): 0.90, ("0.01", 1): 0.60, ("0.03", 0): 0.80, ("0.03", 1): 0.79}
    for point, ((lr, seed), val) in enumerate(vals.items()):
        summary = {
            "algorithm": "minibatch",
            "ranks": 2,
            "epochs": 2,
            "best_metric": "val_acc",
            "best": {"epoch": 1, "val_acc": val, "test_acc": val},
            "final": {"val_acc": val, "test_acc": val},
        }
        overrides = [f"optimizer.lr={lr}", f"train.seed={seed}"]
        fabricate(root / str(point), summary, [], overrides)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    assert main(["report", str(root)]) == 0
    repeats = capsys.readouterr().out.split("over repetitions (train.seed)", 1)[1]
    rows = {r["overrides"]: r for r in tables(repeats, key=("run", "overrides"))}
    assert rows["optimizer.lr=0.03"]["best"] == "yes" and rows["optimizer.lr=0.01"]["best"] == ""
    with open(root / "report" / "repeats.csv", newline="") as f:
        assert [line["best"] for line in csv.DictReader(f)] == ["False", "True"]


def test_time_to_a_given_target_is_averaged_over_the_runs_that_reached_it(
    tmp_path, fabricate, capsys, tables
):
    """With train.target given to every run, the repetitions say how many reached it and
    the epochs and seconds they took; a run's own best as its target (not given) would
    mix targets, and then there is no such column."""
    root = tmp_path / "target"
    reached = {0: (4, 2.0), 1: (6, 3.0), 2: (None, None)}  # seed -> (epochs, seconds)
    for seed, (epochs, seconds) in reached.items():
        summary = {
            "algorithm": "minibatch",
            "ranks": 2,
            "epochs": 8,
            "best": {"epoch": 7, "val_acc": 0.9, "test_acc": 0.9},
            "final": {"val_acc": 0.9, "test_acc": 0.9},
            "to_target": {
                "target": 0.9,
                "target_given": True,
                "epochs": epochs,
                "seconds": seconds,
            },
        }
        fabricate(root / str(seed), summary, [], ["train.target=0.9", f"train.seed={seed}"])
    (root / "multirun.yaml").write_text("hydra: {}\n")
    assert main(["report", str(root)]) == 0
    repeats = capsys.readouterr().out.split("over repetitions (train.seed)", 1)[1]
    (row,) = tables(repeats, key=("run", "overrides"))
    assert row["reached target"] == "2 of 3"
    assert row["epochs to target"] == f"5.0 ± {statistics.stdev([4, 6]):.1f}"
    assert row["s to target"] == f"2.5 ± {statistics.stdev([2.0, 3.0]):.1f}"
    with open(root / "report" / "repeats.csv", newline="") as f:
        (line,) = csv.DictReader(f)
    assert line["reached_target"] == "2" and float(line["seconds_to_target_mean"]) == 2.5

    summary = json.loads((root / "0" / "summary.json").read_text())
    summary["to_target"]["target_given"] = False  # its own best: no common target
    (root / "0" / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(root)]) == 0
    assert "s to target" not in capsys.readouterr().out.split("over repetitions", 1)[1]
