"""`gnnrun report` end to end on directories `gnnrun train` wrote: what it prints, what
it writes, and the one-line error for a path that is neither a run nor a sweep."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from gnnrun.cli import main


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    # Wide enough for one table; the narrow split is tested in test_tables.py.
    monkeypatch.setenv("COLUMNS", "300")


def report(capsys, *args) -> tuple[int, str, str]:
    code = main(["report", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def expected_cells(summary: dict) -> dict[str, str]:
    """What the table must show for a summary, formatted as documented."""
    time = summary["time_median"]
    return {
        "algorithm": summary["algorithm"],
        "ranks": str(summary["ranks"]),
        "epoch s": f"{summary['epoch_s_median']:.3f}",
        "MBC s": f"{time['mbc']:.3f}",
        "FWD s": f"{time['fwd']:.3f}",
        "BWD s": f"{time['bwd']:.3f}",
        "COMM s": f"{time['comm']:.3f}",
        "ARed s": f"{time['ared']:.3f}",
        "MB/epoch": f"{summary['bytes_per_epoch_rank0'] / 1e6:,.2f}",
        "best val acc": f"{summary['best']['val_acc']:.4f}",
        "final test acc": f"{summary['final']['test_acc']:.4f}",
        "status": "done",
    }


def test_a_sweep_gives_one_row_per_point_with_summary_figures(sweep, capsys, tables):
    code, out, err = report(capsys, sweep)
    assert code == 0, err
    rows = tables(out)
    assert [r["point"] for r in rows] == ["0", "1"]
    for row in rows:
        summary = json.loads((sweep / row["point"] / "summary.json").read_text())
        assert {k: row[k] for k in expected_cells(summary)} == expected_cells(summary)
        assert row["overrides"] == f"cluster.nprocs={summary['ranks']}"
    assert "every point: dataset=synthetic-tiny algorithm=minibatch train.epochs=2" in out
    written = sorted(p.name for p in (sweep / "report").iterdir())
    assert written == ["accuracy.png", "epoch_time.png", "report.csv", "speedup.png"]
    for name in written:
        assert str(sweep / "report" / name) in out
    assert "not drawn: hit_rate.png" in out


def test_one_run_with_csv_and_out(single, tmp_path, capsys, tables):
    table_csv, out_dir = tmp_path / "exports" / "table.csv", tmp_path / "pngs"
    code, out, err = report(capsys, single, "--csv", table_csv, "--out", out_dir)
    assert code == 0, err
    summary = json.loads((single / "summary.json").read_text())
    (row,) = tables(out)
    assert {k: row[k] for k in expected_cells(summary)} == expected_cells(summary)
    with open(table_csv) as f:
        (line,) = csv.DictReader(f)
    assert float(line["epoch_s"]) == summary["epoch_s_median"]
    assert (out_dir / "report.csv").read_text() == table_csv.read_text()
    assert sorted(p.name for p in out_dir.glob("*.png")) == ["accuracy.png", "epoch_time.png"]
    assert "not drawn: speedup.png (no algorithm was run at two or more rank counts)" in out
    assert not (single / "report").exists()  # --out moved everything
    code, out, err = report(capsys, single, "--out", table_csv)
    assert code == 1 and "table.csv is a file: give a directory" in err and not out


def test_a_sweep_with_an_unfinished_point_still_reports(sweep, capsys, tables):
    (sweep / "1" / "summary.json").unlink()  # point 1 is still running, or died
    (sweep / "2" / ".hydra").mkdir(parents=True)  # point 2 has just started
    code, out, err = report(capsys, sweep)
    assert code == 0, err
    rows = {r["point"]: r for r in tables(out)}
    assert rows["0"]["status"] == "done"
    assert rows["1"]["status"] == "unfinished (2/2 epochs)"
    assert rows["1"]["ranks"] == "2"  # from its two metrics files
    assert rows["1"]["epoch s"] == rows["1"]["best val acc"] == "–"
    assert rows["2"]["status"] == "no results yet"
    assert "unfinished: no summary.json yet" in out
    # Its accuracy curve is drawn from the metrics it has; one point has no speedup.
    assert (sweep / "report" / "accuracy.png").is_file()
    assert not (sweep / "report" / "speedup.png").exists()


def test_compare_matches_points_and_gives_ratios(sweep, tmp_path, capsys, tables):
    other = tmp_path / "other"
    shutil.copytree(sweep, other)
    for point, (time_factor, bytes_factor) in {"0": (2.0, 1.0), "1": (0.5, 3.0)}.items():
        path = other / point / "summary.json"
        summary = json.loads(path.read_text())
        summary["epoch_s_median"] *= time_factor
        summary["bytes_per_epoch_rank0"] *= bytes_factor
        path.write_text(json.dumps(summary))
    # A sends nothing at point 0: no ratio rather than a division by zero
    path = sweep / "0" / "summary.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"bytes_per_epoch_rank0": 0.0}))
    code, out, err = report(capsys, sweep, "--compare", other)
    assert code == 0, err
    rows = {(r["run"], r["point"]): r for r in tables(out)}
    assert sorted(rows) == [("A", "0"), ("A", "1"), ("B", "0"), ("B", "1")]
    assert rows["B", "0"]["B/A epoch"] == "2.00x"
    assert rows["B", "1"]["B/A epoch"] == "0.50x"
    assert rows["B", "1"]["B/A MB"] == "3.00x"
    assert rows["A", "0"]["B/A epoch"] == ""
    assert rows["B", "0"]["B/A MB"] == "–"
    out_dir = sweep / "report" / "compare-other"
    assert {p.name for p in out_dir.glob("*.png")} == {
        "epoch_time.png",
        "speedup.png",
        "accuracy.png",
    }
    with open(out_dir / "report.csv") as f:
        lines = list(csv.DictReader(f))
    assert [line["run"] for line in lines] == ["A", "A", "B", "B"]
    assert float(lines[3]["epoch_ratio"]) == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("make", ["missing", "file", "empty", "other"])
def test_neither_a_run_nor_a_sweep_is_one_clear_error(tmp_path, capsys, make):
    path = tmp_path / "not-a-run"
    if make == "file":
        path.write_text("x")
    elif make in ("empty", "other"):
        path.mkdir()
        if make == "other":
            (path / "0").mkdir()  # a numbered folder, but nothing a run leaves
            (path / "notes.txt").write_text("x")
    code, out, err = report(capsys, path)
    assert code == 1
    message = " ".join(err.split())
    assert message.startswith(f"error: {path}")
    assert "expected a run directory" in message and "or a sweep directory" in message
    assert len(err.strip().splitlines()) <= 3  # one message (wrapped at most), no traceback
    assert out == ""


def test_a_usage_error_is_one_line_and_help_prints_the_options(capsys):
    code, _, err = report(capsys)
    assert code == 1 and err.count("\n") == 1
    assert "the following arguments are required: RUN_DIR; usage: gnnrun report RUN_DIR" in err
    code, out, _ = report(capsys, "--help")
    assert code == 0 and "--compare" in out
