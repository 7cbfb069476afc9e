"""Run directories to report on: real ones written by `gnnrun train` (built once per
session, copied per test so that a test's report or edits stay its own), and a
fabricated HEC sweep (the algorithm that records hit rates)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gnnrun.cli import main


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A 2-point minibatch sweep (1 and 2 ranks) and a lone single-process run."""
    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GNNRUN_DATA_ROOT", str(root / "data"))
        patch.chdir(root)
        sweep = [
            "train",
            "-m",
            "dataset=synthetic-tiny",
            "algorithm=minibatch",
            "cluster.nprocs=1,2",
            "train.epochs=2",
            f"hydra.sweep.dir={root / 'sweep'}",
        ]
        assert main(sweep) == 0
        single = [
            "train",
            "dataset=synthetic-tiny",
            "algorithm=single",
            "train.epochs=3",
            f"hydra.run.dir={root / 'single'}",
        ]
        assert main(single) == 0
    return {"sweep": root / "sweep", "single": root / "single"}


@pytest.fixture
def sweep(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained["sweep"], tmp_path / "multirun" / "sweep"))


@pytest.fixture
def single(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained["single"], tmp_path / "train" / "single"))


def write_run(path: Path, summary: dict | None, records: list[dict], overrides: list[str]) -> Path:
    """A run directory as the trainer leaves it, from given figures."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    epochs = summary["epochs"] if summary else len(records)
    (path / ".hydra" / "config.yaml").write_text(
        "algorithm:\n  name: hec\ndataset:\n  name: synthetic-tiny\nmodel:\n  name: sage\n"
        f"train:\n  epochs: {epochs}\n"
    )
    (path / "metrics.rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary, indent=2))
    return path


@pytest.fixture
def hec_sweep(tmp_path) -> Path:
    """HEC at 1, 2 and 4 ranks, 3 layers of hit rates per epoch and in the summary."""
    root = tmp_path / "hec"
    rng = np.random.default_rng(0)
    for point, ranks in enumerate((1, 2, 4)):
        records = []
        for epoch in range(4):
            hit_rate = [float(x) for x in np.round(rng.uniform(0.2, 0.9, 3), 6)]
            time = {"mbc": 0.1 / ranks, "fwd": 0.2 / ranks, "bwd": 0.3 / ranks}
            time |= {"comm": 0.01 * ranks, "ared": 0.005 * ranks, "opt": 0.01, "eval": 0.02}
            records.append(
                {
                    "epoch": epoch,
                    "rank": 0,
                    "epoch_s": sum(time.values()),
                    "loss": 2.0 - epoch * 0.3,
                    "steps": 3,
                    "val_acc": 0.5 + 0.05 * epoch,
                    "test_acc": 0.48 + 0.05 * epoch,
                    "time": time,
                    "bytes": {"features": 1_000_000 * ranks, "cache": 12345},
                    "peak_rss_mb": 400.0,
                    "hit_rate": hit_rate,
                }
            )
        last = records[-1]
        summary = {
            "dataset": "synthetic-tiny",
            "model": "sage",
            "algorithm": "hec",
            "ranks": ranks,
            "epochs": 4,
            "complete": True,
            "final": {"val_acc": last["val_acc"], "test_acc": last["test_acc"]},
            "best": {"epoch": 3, "val_acc": last["val_acc"], "test_acc": last["test_acc"]},
            "epoch_s_median": float(np.median([r["epoch_s"] for r in records])),
            "time_median": {k: float(v) for k, v in last["time"].items()},
            "bytes_per_epoch_rank0": float(1_000_000 * ranks + 12345),
            "peak_rss_mb_rank0": 400.0,
            "hit_rate": last["hit_rate"],
        }
        write_run(
            root / str(point),
            summary,
            records,
            ["dataset=synthetic-tiny", "algorithm=hec", f"cluster.nprocs={ranks}"],
        )
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def parse_tables(text: str, key: tuple[str, ...] = ("run", "point")) -> list[dict[str, str]]:
    """Rows of the rich tables in `text` as {header: cell}. Rows of tables that were
    split for width are joined by their `key` cells (the repetitions table's: run,
    overrides); a continuation line of a wrapped cell (an empty last key cell) is
    appended to the row above."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    headers: list[str] = []
    state, last = None, {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("┏"):
            state, headers = "head", []
        elif line.startswith("┃") and state == "head":
            cells = [c.strip() for c in line.strip("┃").split("┃")]
            # a header that wrapped continues on the next line
            if headers:
                headers = [f"{a} {b}".strip() for a, b in zip(headers, cells, strict=True)]
            else:
                headers = cells
        elif line.startswith("┡"):
            state = "body"
        elif line.startswith("│") and state == "body":
            cells = [c.strip() for c in line.strip("│").split("│")]
            record = dict(zip(headers, cells, strict=True))
            if not record.get(key[-1]):
                for header, cell in record.items():
                    if cell:
                        last[header] = f"{last[header]} {cell}"
                continue
            last = rows.setdefault(tuple(record.get(k, "") for k in key), {})
            last.update(record)
        elif line.startswith("└"):
            state = None
    return list(rows.values())


@pytest.fixture
def tables():
    return parse_tables


@pytest.fixture
def fabricate():
    return write_run
