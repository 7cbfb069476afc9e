"""Finding runs: sweeps point by point, lone runs, and what a run in progress leaves."""

from __future__ import annotations

import json
import shutil

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.report.rows import report_rows
from gnnrun.report.runs import distinguishing_overrides, load_run_set
from gnnrun.report.tables import report_notes


def test_a_sweep_and_a_run(sweep, single):
    found = load_run_set(sweep)
    assert found.kind == "sweep" and [r.point for r in found.runs] == ["0", "1"]
    assert [(r.algorithm, r.ranks, r.status) for r in found.runs] == [
        ("minibatch", 1, "done"),
        ("minibatch", 2, "done"),
    ]
    own, common = distinguishing_overrides(found.runs)
    assert own == [["cluster.nprocs=1"], ["cluster.nprocs=2"]]
    assert common == ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=2"]
    lone = load_run_set(single)
    assert lone.kind == "run" and lone.runs[0].point == "single"
    assert lone.runs[0].ranks == 1 and lone.runs[0].dataset == "synthetic-tiny"


def test_a_run_in_progress_is_read_as_far_as_it_goes(sweep):
    (sweep / "1" / "summary.json").unlink()
    with open(sweep / "1" / "metrics.rank0.jsonl", "a") as f:
        f.write('{"epoch": 2, "ra')  # the line being written
    run = load_run_set(sweep).runs[1]
    assert run.summary is None and run.algorithm == "minibatch"  # from .hydra/config.yaml
    assert [r["epoch"] for r in run.history] == [0, 1]
    assert run.status == "unfinished (2/2 epochs)"


def test_a_run_stopped_early_is_done_and_says_so(sweep):
    path = sweep / "1" / "summary.json"
    summary = json.loads(path.read_text())
    summary |= {"epochs": 1, "stopped_early": {"epoch": 0, "best_epoch": 0, "patience": 1}}
    path.write_text(json.dumps(summary))
    assert load_run_set(sweep).runs[1].status == "stopped early (1/2 epochs)"


def test_a_damaged_summary_is_a_status_not_a_crash(sweep):
    (sweep / "0" / "summary.json").write_text('{"dataset": "synth')
    run = load_run_set(sweep).runs[0]
    assert run.summary is None and run.status == "unreadable summary.json (JSONDecodeError)"


def test_failed_and_missing_points_are_named(sweep):
    """A local sweep records the points that failed and goes on: the report says which
    failed and why, and names the numbers it has no directory for."""
    shutil.copytree(sweep / "1", sweep / "3")
    (sweep / "3" / "summary.json").unlink()
    failures = {"1": "retried since", "3": "boom three", "5": "boom five"}
    record = {n: {"overrides": [], "error": e} for n, e in failures.items()}
    (sweep / "failed_points.json").write_text(json.dumps(record))
    found = load_run_set(sweep)
    assert [(r.point, r.status) for r in found.runs] == [
        ("0", "done"),
        ("1", "done"),  # its failure was before a retry that finished
        ("3", "failed (2/2 epochs)"),
    ]
    assert found.missing == {
        "2": "no directory (not started, or removed)",
        "5": "failed: boom five",
    }
    notes = report_notes(report_rows([found]), [found])
    assert "point 3 failed: boom three" in notes
    assert "point 2: no directory (not started, or removed)" in notes
    assert "point 5: failed: boom five" in notes
    assert not any("retried since" in line for line in notes)


def test_a_sweep_whose_points_have_not_started(tmp_path):
    (tmp_path / "s" / "0").mkdir(parents=True)
    (tmp_path / "s" / "multirun.yaml").write_text("hydra: {}\n")
    (run,) = load_run_set(tmp_path / "s").runs
    assert run.status == "no results yet" and run.ranks is None


def test_a_sweep_without_points_is_refused(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "multirun.yaml").write_text("hydra: {}\n")
    with pytest.raises(GnnrunError, match="is a sweep with no points yet"):
        load_run_set(tmp_path / "s")


def test_a_directory_of_something_else(tmp_path):
    with pytest.raises(GnnrunError, match="neither a run nor a sweep directory"):
        load_run_set(tmp_path)


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"ranks": "two"}, "it has 'ranks' of type str, expected int"),
        ({"ranks": None}, "it has 'ranks' of type NoneType, expected int"),
        ({"epochs": 2.5}, "it has 'epochs' of type float, expected int"),
        ({"final": [0.5]}, "'final' is list"),
        ({"best": {"val_acc": "high"}}, "'best' holds values that are not numbers"),
        ({"epoch_s_median": "slow"}, "'epoch_s_median' is str"),
    ],
)
def test_a_summary_of_wrong_types_is_a_status_not_a_crash(sweep, capsys, change, problem):
    from gnnrun.cli import main

    path = sweep / "0" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    run = load_run_set(sweep).runs[0]
    assert run.summary is None and run.status == f"damaged summary.json ({problem})"
    assert main(["report", str(sweep)]) == 0
    assert "damaged summary.json" in capsys.readouterr().out


def test_a_summary_that_is_a_list_or_binary_is_a_status(sweep):
    path = sweep / "0" / "summary.json"
    path.write_text("[1, 2]")
    assert load_run_set(sweep).runs[0].status == "damaged summary.json (it is list, not an object)"
    path.write_bytes(bytes(range(256)))
    assert load_run_set(sweep).runs[0].status == "unreadable summary.json (UnicodeDecodeError)"


def test_a_binary_metrics_file_is_read_as_far_as_it_parses(sweep, capsys):
    from gnnrun.cli import main

    (sweep / "1" / "summary.json").unlink()
    metrics = sweep / "1" / "metrics.rank0.jsonl"
    metrics.write_bytes(metrics.read_bytes() + bytes(range(128, 256)) + b"\n")
    run = load_run_set(sweep).runs[1]
    assert [r["epoch"] for r in run.history] == [0, 1]
    metrics.write_bytes(bytes(range(256)) * 4)
    assert load_run_set(sweep).runs[1].history == []
    assert main(["report", str(sweep)]) == 0
    assert "no results yet" in capsys.readouterr().out
