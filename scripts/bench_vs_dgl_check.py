#!/usr/bin/env python
"""gnnrun against DGL 2.1 by two harnesses in one session: the project's scripts and the peers'.

Runs, `--runs` times (default 3), alternating so that both see the same machine:

1. `scripts/bench_kernels.py` on its 200k-vertex / 5M-edge Chung-Lu graph (sum and
   mean aggregation at widths 128 and 256, DGL's `update_all` beside it);
2. `scripts/bench_fullbatch.py --skip-train --skip-sweep`: full-batch SAGE-mean and
   GCN 3 x 256 epochs on the same graph size, with dropout 0 and 0.5;
3. the peers' `side_by_side.sh spmm,full` (their own Chung-Lu graphs, DGL in their
   venv, gnnrun through its public ops, no dropout), with this checkout's gnnrun on
   the same python as 1 and 2.

and prints one Markdown table: DGL's time over gnnrun's per run and the median, by
each harness, with the machine's load average around every step. The two must
agree within the spread between runs; see benchmarks/2026-11-26-dgl-two-harnesses.md.

Needs DGL's venv and the peers' graphs (once; `make dgl-venv` or the peers'
setup_dgl.sh, then their gen_graph.py: see the peers' README.md):

    .venv/bin/python scripts/bench_vs_dgl_check.py --peers PATH_TO_PEERS
    .venv/bin/python scripts/bench_vs_dgl_check.py --runs 1 --out check.md
    .venv/bin/python scripts/bench_vs_dgl_check.py --parts full   # full-batch epochs only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEERS_CACHE = Path(os.environ.get("PEERS", Path.home() / ".cache" / "gnnrun-peers"))
GRAPH_SIZE = (200_000, 5_000_000)
PARTS = (
    "spmm",
    "full",
)  # side_by_side.sh's parts this check compares  # the peers' "small" graph's size, and the scripts'


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def default_peers() -> Path:
    return Path(os.environ.get("PEERS_DIR", REPO.parent / "shared" / "peers"))


def default_dgl_python() -> Path:
    own = REPO / ".dgl-venv" / "bin" / "python"
    return own if own.exists() else PEERS_CACHE / "dgl" / "bin" / "python"


def problems(args: argparse.Namespace) -> list[str]:
    """What is missing, each with its fix; empty when the check can run."""
    found = []
    if not (args.peers / "side_by_side.sh").is_file():
        found.append(
            f"--peers {args.peers}: no side_by_side.sh there; give the peers' folder "
            "(the one with side_by_side.sh and README.md)"
        )
    if not Path(args.dgl_python).is_file():
        found.append(
            f"--dgl-python {args.dgl_python}: not found; `make dgl-venv` builds .dgl-venv "
            "(or run the peers' setup_dgl.sh)"
        )
    if not (PEERS_CACHE / "dgl" / "bin" / "python").is_file():
        found.append(
            f"{PEERS_CACHE}/dgl: the peers' DGL venv is missing (side_by_side.sh runs it); "
            "run the peers' setup_dgl.sh"
        )
    graphs = PEERS_CACHE / "graphs"
    for name in ("small", "large"):
        if not (graphs / f"{name}.npz").is_file():
            found.append(
                f"{graphs}/{name}.npz missing: run `{PEERS_CACHE}/dgl/bin/python "
                f"{args.peers}/gen_graph.py` once (about 2 min)"
            )
            break
    return found


def run(command: list[str], log, env: dict | None = None) -> str:
    """Run `command`, its output into `log` and returned; exits on failure."""
    log.write(f"\n$ {' '.join(command)}   (load {load()})\n")
    log.flush()
    done = subprocess.run(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log.write(done.stdout)
    log.flush()
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}")
    return done.stdout


def project_run(args: argparse.Namespace, tmp: Path, log) -> dict:
    """One run of the project's scripts: {(work key): (dgl, gnnrun) seconds}."""
    nodes, edges = GRAPH_SIZE
    kernels, fullbatch = tmp / "kernels.json", tmp / "fullbatch.json"
    python, dgl = sys.executable, str(args.dgl_python)
    figures = {}
    if "spmm" in args.parts:
        run(
            [python, "scripts/bench_kernels.py", "--nodes", "0", f"--small-nodes={nodes}"]
            + [f"--small-edges={edges}", "--skip-index-add", "--skip-sweep", "--dgl-python", dgl]
            + ["--json", str(kernels)],
            log,
        )
        for r in json.loads(kernels.read_text())["runs"]:
            figures[("agg", r["reduce"], r["width"])] = (r["dgl_ms"] / 1e3, r["gnnrun_ms"] / 1e3)
    if "full" in args.parts:
        run(
            [python, "scripts/bench_fullbatch.py", "--skip-train", "--skip-sweep", "--dgl-python"]
            + [dgl, f"--dgl-nodes={nodes}", f"--dgl-edges={edges}", "--json", str(fullbatch)],
            log,
        )
        for r in json.loads(fullbatch.read_text())["single_rank_vs_dgl"]:
            figures[("full", r["model"], r["dropout"])] = (r["dgl_s"], r["epoch_s"])
    return figures


def peers_run(args: argparse.Namespace, tmp: Path, log) -> dict:
    """One run of the peers' side_by_side.sh spmm,full, on this checkout's gnnrun."""
    # side_by_side.sh runs $PROJECT/.venv/bin/python: point it at this python, and put
    # this checkout first on the path (an editable install may point at another clone).
    project = tmp / "project"
    (project / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    shim = project / ".venv" / "bin" / "python"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PROJECT": str(project), "PYTHONPATH": path, "PEERS": str(PEERS_CACHE)}
    out = run(["bash", str(args.peers / "side_by_side.sh"), ",".join(args.parts)], log, env)
    match = re.search(r"^results: (\S+)$", out, re.MULTILINE)
    if not match:
        sys.exit("side_by_side.sh printed no `results:` line (its output is in the log)")
    return peer_figures(
        [json.loads(line) for line in Path(match.group(1)).read_text().splitlines()]
    )


def peer_figures(records: list[dict]) -> dict:
    """{(work key): (dgl, gnnrun) seconds} from side_by_side.sh's results file."""
    figures, times = {}, {}
    for r in records:
        if "error" in r:
            continue
        if r["bench"] == "spmm" and r["impl"] in ("dgl.update_all", "gnnrun.aggregate"):
            side = "dgl" if r["impl"].startswith("dgl") else "gnnrun"
            times[("agg", r["reduce"], r["dim"], r["graph"], side)] = r["ms"] / 1e3
        elif r["bench"] == "train_full" and r["env"] in ("dgl-venv", "gnnrun"):
            model = "sage" if "sage" in r["impl"].lower() else "gcn"
            side = "dgl" if r["env"] == "dgl-venv" else "gnnrun"
            times[("full", model, 0.0, "small", side)] = r["epoch_ms"] / 1e3
    for key in {k[:4] for k in times}:
        if (*key, "dgl") in times and (*key, "gnnrun") in times:
            kind, a, b, graph = key
            name = (kind, a, b) if graph == "small" else (kind, a, b, graph)
            figures[name] = (times[(*key, "dgl")], times[(*key, "gnnrun")])
    return figures


ROWS = [
    (("agg", "sum", 128), "aggregation sum, width 128"),
    (("agg", "mean", 128), "aggregation mean, width 128"),
    (("agg", "sum", 256), "aggregation sum, width 256"),
    (("agg", "mean", 256), "aggregation mean, width 256"),
    (("full", "sage", 0.0), "full-batch SAGE-mean 3 x 256 epoch, no dropout"),
    (("full", "gcn", 0.0), "full-batch GCN 3 x 256 epoch, no dropout"),
    (("full", "sage", 0.5), "full-batch SAGE-mean epoch, dropout 0.5 (gnnrun train's default)"),
    (("full", "gcn", 0.5), "full-batch GCN epoch, dropout 0.5"),
    (("agg", "sum", 128, "large"), "aggregation sum, width 128, 1M / 25M"),
    (("agg", "mean", 128, "large"), "aggregation mean, width 128, 1M / 25M"),
    (("agg", "sum", 256, "large"), "aggregation sum, width 256, 1M / 25M"),
    (("agg", "mean", 256, "large"), "aggregation mean, width 256, 1M / 25M"),
]


def cell(runs: list[dict], key) -> tuple[str, str]:
    """'r1 / r2 / r3' and the median of DGL's time over gnnrun's, or '-' where not measured."""
    ratios = [r[key][0] / r[key][1] for r in runs if key in r]
    if not ratios:
        return "-", "-"
    return " / ".join(f"{x:.2f}" for x in ratios), f"**{statistics.median(ratios):.2f}x**"


def table(project: list[dict], peers: list[dict]) -> str:
    lines = [
        "| work (200k vertices / 5M edges unless named) | project scripts: DGL / gnnrun per run "
        "| median | peers' side_by_side.sh: per run | median |",
        "|---|---|---|---|---|",
    ]
    for key, label in ROWS:
        ours, theirs = cell(project, key), cell(peers, key)
        lines.append(f"| {label} | {ours[0]} | {ours[1]} | {theirs[0]} | {theirs[1]} |")
    return "\n".join(lines)


def save_figures(path: Path, harness: str, run: int, figures: dict, fresh: bool = False) -> None:
    line = {
        "harness": harness,
        "run": run,
        "load": load(),
        "figures": [[list(key), dgl, ours] for key, (dgl, ours) in figures.items()],
    }
    with open(path, "w" if fresh else "a") as f:
        f.write(json.dumps(line) + "\n")


def read_figures(path: Path) -> tuple[list[dict], list[dict]]:
    runs: dict = {"project": {}, "peers": {}}
    for text in path.read_text().splitlines():
        line = json.loads(text)
        runs[line["harness"]][line["run"]] = {tuple(k): (d, o) for k, d, o in line["figures"]}
    return [r for _, r in sorted(runs["project"].items())], [
        r for _, r in sorted(runs["peers"].items())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Prints the table; the scripts' own output goes to --log.",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers", type=Path, default=default_peers(), help="the peers' folder")
    parser.add_argument("--dgl-python", type=Path, default=default_dgl_python())
    parser.add_argument("--out", type=Path, help="also write the table (Markdown) here")
    parser.add_argument("--log", type=Path, default=Path("bench_vs_dgl_check.log"))
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("bench_vs_dgl_check.jsonl"),
        help="every run's figures, one line each, written as each run ends",
    )
    parser.add_argument(
        "--parts",
        type=lambda text: text.split(","),
        default=list(PARTS),
        help="spmm (aggregation), full (full-batch epochs) or both, comma-separated",
    )
    parser.add_argument(
        "--from-json", type=Path, help="print the table of an earlier check's --json; run nothing"
    )
    args = parser.parse_args()
    if args.from_json:
        project, peers = read_figures(args.from_json)
        print(table(project, peers))
        return
    if args.runs < 1:
        sys.exit(f"--runs {args.runs}: give 1 or more")
    if set(args.parts) - set(PARTS) or not args.parts:
        sys.exit(f"--parts {','.join(args.parts)}: choose from {','.join(PARTS)}")
    if found := problems(args):
        sys.exit("\n".join(found))
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "unknown CPU",
    )
    header = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu}, {os.cpu_count()} cores; "
        f"load average before: {load()}"
    )
    print(header, flush=True)
    project, peers = [], []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-vs-dgl-") as tmp, open(args.log, "w") as log:
        for i in range(args.runs):
            print(f"run {i + 1}/{args.runs}: project scripts (load {load()})", flush=True)
            project.append(project_run(args, Path(tmp), log))
            save_figures(args.json, "project", i, project[-1], fresh=i == 0)
            parts = ",".join(args.parts)
            print(f"run {i + 1}/{args.runs}: side_by_side.sh {parts} (load {load()})", flush=True)
            peers.append(peers_run(args, Path(tmp), log))
            save_figures(args.json, "peers", i, peers[-1])
    footer = (
        f"{args.runs} run(s) of each, alternating, in {(time.monotonic() - started) / 60:.0f} min; "
        f"load average after: {load()}; the scripts' output: {args.log}, the figures: {args.json}"
    )
    text = f"{header}\n\n{table(project, peers)}\n\n{footer}\n"
    print("\n" + text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
