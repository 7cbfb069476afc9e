"""The CSV export carries summary.json's figures at full precision."""

from __future__ import annotations

import csv
import json

from gnnrun.report.export import write_csv
from gnnrun.report.rows import report_rows
from gnnrun.report.runs import load_run_set


def read(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_equals_summary_json(sweep, tmp_path):
    write_csv(report_rows([load_run_set(sweep)]), tmp_path / "t.csv")
    lines = read(tmp_path / "t.csv")
    assert [line["point"] for line in lines] == ["0", "1"]
    for line in lines:
        summary = json.loads((sweep / line["point"] / "summary.json").read_text())
        assert line["algorithm"] == summary["algorithm"]
        assert int(line["ranks"]) == summary["ranks"]
        assert float(line["epoch_s"]) == summary["epoch_s_median"]
        for phase, seconds in summary["time_median"].items():  # every phase, not just five
            assert float(line[f"{phase}_s"]) == seconds
        assert float(line["bytes_per_epoch"]) == summary["bytes_per_epoch_rank0"]
        assert float(line["best_val_acc"]) == summary["best"]["val_acc"]
        assert float(line["final_test_acc"]) == summary["final"]["test_acc"]
        assert int(line["best_epoch"]) == summary["best"]["epoch"] + 1
        assert int(line["epochs_to_target"]) == summary["to_target"]["epochs"]
        assert float(line["seconds_to_target"]) == summary["to_target"]["seconds"]
        assert line["status"] == "done"


def test_csv_hit_rates_and_an_unfinished_row(hec_sweep, tmp_path):
    (hec_sweep / "2" / "summary.json").unlink()
    write_csv(report_rows([load_run_set(hec_sweep)]), tmp_path / "t.csv")
    lines = read(tmp_path / "t.csv")
    summary = json.loads((hec_sweep / "1" / "summary.json").read_text())
    hits = [float(lines[1][f"hit_rate_L{i}"]) for i in range(3)]
    assert hits == summary["hit_rate"]
    assert lines[2]["status"] == "unfinished (4/4 epochs)"
    assert lines[2]["epoch_s"] == lines[2]["hit_rate_L0"] == ""
