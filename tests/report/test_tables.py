"""The runs table: hit-rate columns for HEC, and the split over several tables on a
narrow console that keeps every figure whole."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from gnnrun.report.rows import report_rows
from gnnrun.report.runs import load_run_set
from gnnrun.report.tables import report_notes, runs_tables


def render(sets, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    rows = report_rows(sets)
    for table in runs_tables(rows, sets, width):
        console.print(table)
    for line in report_notes(rows, sets):
        console.print(line)
    return console.export_text()


def test_hec_hit_rates_per_layer(hec_sweep, tables):
    rows = tables(render([load_run_set(hec_sweep)], 300))
    assert [r["point"] for r in rows] == ["0", "1", "2"]
    for row in rows:
        summary = json.loads((hec_sweep / row["point"] / "summary.json").read_text())
        assert row["hit L0/L1/L2"] == "/".join(f"{h:.3f}" for h in summary["hit_rate"])
        assert row["ranks"] == str(summary["ranks"])
        assert row["MB/epoch"] == f"{summary['bytes_per_epoch_rank0'] / 1e6:,.2f}"


def test_a_run_without_hit_rates_has_no_hit_column(sweep, tables):
    text = render([load_run_set(sweep)], 300)
    assert "hit L" not in text
    assert len(tables(text)) == 2


def test_a_narrow_console_splits_the_table_and_keeps_figures_whole(hec_sweep, sweep, tables):
    sets = [load_run_set(sweep, "A"), load_run_set(hec_sweep, "B")]
    wide = tables(render(sets, 400))
    text = render(sets, 80)
    assert "…" not in text  # rich cut nothing short
    assert max(len(line) for line in text.splitlines()) <= 80
    assert len(re.findall("┏", text)) >= 2  # split into several tables
    assert tables(text) == wide  # the same cells, joined again by (run, point)


def test_time_to_target_and_hidden_communication_columns(hec_sweep, tables):
    for point, hidden, epochs in (("0", 0.25, 3), ("1", None, None)):
        path = hec_sweep / point / "summary.json"
        summary = json.loads(path.read_text())
        seconds = None if epochs is None else 1.25
        summary["to_target"] = {
            "target": 0.6,
            "target_given": True,
            "epochs": epochs,
            "seconds": seconds,
        }
        if hidden is not None:
            summary["comm_hidden_rank0"] = hidden
        path.write_text(json.dumps(summary))
    rows = tables(render([load_run_set(hec_sweep)], 400))
    assert [r["epochs to target"] for r in rows] == ["3", "not reached", "–"]
    assert [r["s to target"] for r in rows] == ["1.2", "not reached", "–"]
    assert [r["DRPA hidden"] for r in rows] == ["25%", "–", "–"]


def test_the_columns_are_the_figures_the_summaries_name(hec_sweep, tables):
    """A summary that names its task's figures (a multi-label run's micro-F1 and AUC) gets
    their columns under their names; the others keep the figures they hold."""
    path = hec_sweep / "0" / "summary.json"
    summary = json.loads(path.read_text())
    summary["figures"] = [["f1", "micro-F1"], ["auc", "AUC"]]
    summary["best_metric"] = "val_f1"
    summary["best"] |= {"val_f1": 0.71, "val_auc": 0.8}
    summary["final"] |= {"test_f1": 0.69, "test_auc": 0.79}
    path.write_text(json.dumps(summary))
    rows = {r["point"]: r for r in tables(render([load_run_set(hec_sweep)], 400))}
    assert rows["0"]["best val micro-F1"] == "0.7100" and rows["0"]["final test AUC"] == "0.7900"
    assert rows["1"]["best val micro-F1"] == "–" and rows["1"]["best val acc"] != "–"


@pytest.mark.parametrize("named", [True, False])  # summaries before they named their figures
def test_a_link_run_has_one_column_per_figure(hec_sweep, tables, named):
    path = hec_sweep / "0" / "summary.json"
    summary = json.loads(path.read_text())
    if named:
        summary["figures"] = [["mrr", "MRR"], ["auc", "AUC"], ["ap", "AP"]]
    summary["best"] = {"epoch": 3, "val_mrr": 0.3, "val_auc": 0.9, "val_ap": 0.8}
    summary["final"] = {"test_mrr": 0.29, "test_auc": 0.89, "test_ap": 0.79}
    path.write_text(json.dumps(summary))
    text = render([load_run_set(hec_sweep)], 400)
    for figure, value in (("MRR", "0.2900"), ("AUC", "0.8900"), ("AP", "0.7900")):
        assert len(re.findall(rf"best val {figure}\b", text)) == 1, (figure, text)
        assert len(re.findall(rf"final test {figure}\b", text)) == 1, (figure, text)
        row = {r["point"]: r for r in tables(text)}["0"]
        assert row[f"final test {figure}"] == value


def test_the_end_of_run_table_names_the_figure_that_chose_the_best_epoch():
    from gnnrun.report.tables import summary_table

    summary = {
        "algorithm": "single",
        "model": "gcn",
        "dataset": "cora",
        "ranks": 1,
        "best_metric": "val_auc",
        "final": {"val_mrr": 0.95, "val_auc": 0.91},
        "best": {"epoch": 156, "val_mrr": 0.94, "val_auc": 0.92},
        "epochs": 200,
        "epoch_s_median": 0.02,
        "time_median": {},
        "bytes_per_epoch_rank0": 0,
    }
    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(summary_table(summary))
    text = console.export_text()
    assert re.search(r"best epoch \(by val_auc\)\s+│\s+157", text), text
    assert re.search(r"best val_auc\s+│\s+0.9200", text), text
    summary["stopped_early"] = {"epoch": 176, "best_epoch": 156, "patience": 20}
    console.print(summary_table(summary))
    text = console.export_text()
    assert re.search(
        r"stopped early\s+│\s+after epoch 177: 20 evaluations without a better val auc than "
        r"epoch 157's",
        text,
    ), text
