"""`gnnrun train` as a benchmark's subprocess: one run, its exit, its per-rank records.

Shared by the benchmark scripts, which compare runs of one invocation; each run
is a fresh process, so no run inherits another's memory or caches.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The venv's console script; where gnnrun runs from a checkout on PYTHONPATH (a GPU
# machine's own Python, scripts/gpu_check.sh), the module.
_SCRIPT = Path(sys.executable).parent / "gnnrun"
GNNRUN = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "gnnrun.cli"]
# The minibatch phases the comparisons report, in the order of a step.
PHASES = ("mbc", "fwd", "bwd", "ared", "opt")


def run_train(overrides: list[str], log: Path, timeout: float) -> int | str:
    """`gnnrun train` with these overrides, its output to `log`; its exit code, or
    "timeout". Interrupted or timed out, the run is stopped (SIGTERM stops every rank)."""
    with open(log, "w") as out:
        child = subprocess.Popen(
            [*GNNRUN, "train", *overrides], stdout=out, stderr=subprocess.STDOUT, cwd=REPO
        )
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout"
        finally:
            if child.poll() is None:
                child.terminate()
                child.wait()


def read_records(run_dir: Path) -> dict[int, list[dict]]:
    """Each rank's per-epoch records, from its metrics.rank<R>.jsonl."""
    return {
        int(path.name[len("metrics.rank") : -len(".jsonl")]): [
            json.loads(line) for line in path.read_text().splitlines()
        ]
        for path in sorted(run_dir.glob("metrics.rank*.jsonl"))
    }


def variant_run(
    args,
    tmp: Path,
    tag: str,
    dataset: str,
    label: str,
    ranks: int,
    epochs: int,
    model_overrides: list[str],
    variant_overrides: list[str],
    evaluate: bool = True,
) -> dict:
    """One run of a labelled variant (its `algorithm=` and settings in `variant_overrides`),
    no checkpoint written while it is timed; its records, or its error and log tail.
    `evaluate=False`: no evaluation at all (the run stops before a last epoch, which
    would evaluate), for sampled evaluation that would take longer than the training."""
    name = f"{tag}-{dataset}-{label.replace(' ', '_')}-{ranks}"
    run_dir = tmp / f"run-{name}"
    overrides = [
        f"dataset={dataset}",
        *model_overrides,
        *variant_overrides,
        f"cluster.nprocs={ranks}",
        f"train.epochs={epochs if evaluate else epochs + 1}",
        f"train.eval_every={epochs if evaluate else epochs + 1}",
        *([] if evaluate else [f"train.stop_after={epochs}"]),
        f"train.checkpoint_every={epochs + 1}",
        f"hydra.run.dir={run_dir}",
        f"train.checkpoint_dir={tmp / ('ckpt-' + name)}",
        f"paths.data_root={args.data_root}",
    ]
    start = time.perf_counter()
    returncode = run_train(overrides, tmp / f"{name}.log", args.timeout)
    result = {
        "label": label,
        "ranks": ranks,
        "run_s": time.perf_counter() - start,
        "returncode": returncode,
        "command": "gnnrun train " + " ".join(overrides),
    }
    if returncode != 0:
        result["error"] = (tmp / f"{name}.log").read_text()[-2000:]
        print(f"  {name}: FAILED (exit {returncode}):\n{result['error']}", file=sys.stderr)
        return result
    result["records"] = read_records(run_dir)
    return result


def epoch_figures(run: dict, skip: int = 1, phases: Sequence[str] = PHASES) -> dict:
    """What every comparison of runs reports, from a run's per-rank records, over the epochs
    after the first `skip` (the last one alone when the run trained no more): the median
    epoch (the slowest rank's) and each epoch (all of them); rank 0's median `phases`,
    training bytes sent and peak memory, and its last record (`last`); the rank means of
    the median phases and of the median megabytes sent per purpose (`phases`, `mb`).
    `failed` for a run that did not finish."""
    if "records" not in run:
        return {**run, "failed": True}
    records = run["records"]
    epochs = len(records[0])
    keep = range(min(skip, epochs - 1), epochs)
    slowest = [max(r[e]["epoch_s"] for r in records.values()) for e in range(epochs)]
    rank0 = [records[0][e] for e in keep]

    def rank_mean(value) -> float:
        return statistics.fmean(statistics.median(value(r, e) for e in keep) for r in records)

    purposes = sorted({p for r in records for rec in records[r] for p in rec["bytes"]})
    return {
        "label": run.get("label"),
        "ranks": run.get("ranks"),
        "command": run.get("command"),
        "epoch_s": statistics.median(slowest[e] for e in keep),
        "epoch_s_each": slowest,
        "phases_rank0": {
            p: statistics.median(r["time"].get(p, 0.0) for r in rank0) for p in phases
        },
        "mb_sent_rank0": statistics.median(sum(r["bytes"].values()) for r in rank0) / 1e6,
        "peak_rss_mb_rank0": max(r["peak_rss_mb"] for r in records[0]),
        "last": records[0][-1],
        "phases": {
            k: rank_mean(lambda r, e, k=k: records[r][e]["time"].get(k, 0.0)) for k in phases
        },
        "mb": {
            p: rank_mean(lambda r, e, p=p: records[r][e]["bytes"].get(p, 0) / 1e6) for p in purposes
        },
    }


def print_comparison(
    rows: list[dict], speed: str, extra: list[tuple[str, str, str]]
) -> dict | None:
    """The table of `epoch_figures` rows: each run's median epoch, its speed against 1-rank
    `minibatch` (`speed`: a row's key, a rate where higher is faster, or `epoch_s`), `pipeline`
    against `minibatch` with the same ranks, rank 0's phases, bytes and peak memory, then
    the `extra` columns (header, key, format); failed runs below. Returns the 1-rank
    `minibatch` row, the baseline (None when it failed)."""
    ok = [r for r in rows if not r.get("failed")]
    base = next((r for r in ok if r["label"] == "minibatch" and r["ranks"] == 1), None)

    def faster(row: dict, than: dict) -> float:
        ratio = row[speed] / than[speed]
        return 1 / ratio if speed == "epoch_s" else ratio

    print(
        f"{'run':<22}{'epoch s':>9}{'vs 1-rank mb':>14}{'pipe/mb':>9}"
        + "".join(f"{p:>7}" for p in PHASES)
        + f"{'MB sent':>9}{'peak MB':>9}"
        + "".join(f"{header:>11}" for header, _, _ in extra)
    )
    for row in ok:
        twin = next(
            (r for r in ok if r["label"] == "minibatch" and r["ranks"] == row["ranks"]), None
        )
        against_base = faster(row, base) if base else float("nan")
        pipe = twin["epoch_s"] / row["epoch_s"] if twin and row["label"] == "pipeline" else None
        print(
            f"{row['label'] + ' x' + str(row['ranks']):<22}{row['epoch_s']:>9.2f}"
            f"{against_base:>13.2f}x{(f'{pipe:.2f}x' if pipe else '-'):>9}"
            + "".join(f"{row['phases_rank0'][p]:>7.2f}" for p in PHASES)
            + f"{row['mb_sent_rank0']:>9.1f}{row['peak_rss_mb_rank0']:>9.0f}"
            + "".join(f"{row[key]:>11{form}}" for _, key, form in extra)
        )
    for row in rows:
        if row.get("failed"):
            print(f"{row['label']} x{row['ranks']}: FAILED ({row.get('returncode')})")
    return base
