"""`gnnrun report RUN_DIR [--compare OTHER] [--csv FILE] [--out DIR]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from gnnrun.errors import GnnrunError
from gnnrun.progress import out
from gnnrun.report.repeats import REPEAT_KEYS

DESCRIPTION = """\
Tables and plots of training runs. RUN_DIR is a run directory of `gnnrun train`
(outputs/train/<date>/<time>) or a sweep directory of `gnnrun train -m`
(outputs/multirun/<date>/<time>, one row per point). Prints one table row per
run, writes report.csv and the PNG plots into --out. The points of a sweep that
repeat a configuration (another train.seed, dataset.split or task.split_seed; --over
names other keys) get a second table: each configuration's figures as mean ±
standard deviation over its finished points (repeats.csv)."""


USAGE = "gnnrun report RUN_DIR [--compare OTHER_RUN_DIR] [--csv FILE] [--out DIR] [--over KEYS]"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, as every gnnrun error (argparse prints three)
        raise GnnrunError(f"{message}; usage: {USAGE} (`gnnrun report --help` says more)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gnnrun report", description=DESCRIPTION)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run or sweep directory")
    p.add_argument(
        "--compare",
        type=Path,
        metavar="OTHER_RUN_DIR",
        help="a second run or sweep directory: one table (A, B) with B/A ratios, overlaid plots",
    )
    p.add_argument(
        "--csv", type=Path, metavar="FILE", help="also write the table as CSV (full precision) here"
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where report.csv (and repeats.csv) and the PNGs go (default RUN_DIR/report, "
        "RUN_DIR/report/compare-<name of OTHER_RUN_DIR> with --compare)",
    )
    p.add_argument(
        "--over",
        type=_keys,
        metavar="KEYS",
        help="the override keys whose points repeat a configuration, comma-separated "
        f"(default {','.join(REPEAT_KEYS)}): their figures are summarised as mean ± "
        "standard deviation",
    )
    return p


def _keys(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip().lstrip("+~") for k in text.split(",") if k.strip())
    if not keys or any("=" in k for k in keys):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give override keys without values, e.g. --over train.seed,dataset.split"
        )
    return keys


def cmd_report(args: list[str]) -> int:
    from gnnrun.report.export import write_csv, write_repeats_csv
    from gnnrun.report.plots import write_plots
    from gnnrun.report.repeats import repeat_groups
    from gnnrun.report.rows import report_rows
    from gnnrun.report.runs import load_run_set
    from gnnrun.report.tables import repeats_notes, repeats_tables, report_notes, runs_tables

    try:
        options = parser().parse_args(args)
    except SystemExit as exc:  # --help, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else 2
    if options.out is not None and options.out.exists() and not options.out.is_dir():
        raise GnnrunError(f"--out {options.out} is a file: give a directory for the plots and CSV")
    if options.compare is None:
        sets = [load_run_set(options.run_dir)]
        out_dir = options.out or options.run_dir / "report"
    else:
        sets = [load_run_set(options.run_dir, "A"), load_run_set(options.compare, "B")]
        name = options.compare.resolve().name
        out_dir = options.out or options.run_dir / "report" / f"compare-{name}"
    rows = report_rows(sets)
    for table in runs_tables(rows, sets, out.width):
        out.print(table)
    for line in report_notes(rows, sets):
        out.print(line, markup=False, highlight=False, style="dim")
    groups = repeat_groups(rows, options.over or REPEAT_KEYS)
    if options.over and not groups:  # a key no point varies (a typo, say) is said, not ignored
        out.print(
            f"--over {','.join(options.over)}: no two points of "
            f"{' or '.join(str(s.path) for s in sets)} differ only in these keys, so nothing "
            "repeats (their overrides are listed in the table above)",
            markup=False,
            soft_wrap=True,
        )
    if groups:
        for table in repeats_tables(groups, rows, out.width):
            out.print(table)
        for line in repeats_notes(groups):
            out.print(line, markup=False, highlight=False, style="dim")
    write_csv(rows, out_dir / "report.csv")
    if options.csv is not None:
        write_csv(rows, options.csv)
    if groups:
        write_repeats_csv(groups, rows, out_dir / "repeats.csv")
    plots = write_plots(sets, out_dir, groups)
    # Paths are printed without markup (a [ in a directory name is not a style) and on one
    # line however long (soft_wrap: the terminal wraps it, so that it copies whole).
    csv_files = [out_dir / "report.csv", *([options.csv] if options.csv else [])]
    out.print(f"table as CSV: {', '.join(map(str, csv_files))}", markup=False, soft_wrap=True)
    if groups:
        out.print(f"repetitions as CSV: {out_dir / 'repeats.csv'}", markup=False, soft_wrap=True)
    for path in plots.written:
        out.print(f"plot: {path}", markup=False, soft_wrap=True)
    for name, why in plots.skipped:
        out.print(f"not drawn: {name} ({why})", markup=False, style="dim")
    return 0
