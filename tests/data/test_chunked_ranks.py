"""Chunked input on ranks, shared by prepare and partition: the round plan (smaller rounds
for a smaller budget, a budget too small refused naming the smallest that works), and
`gnnrun data prepare` on the ranks writing the one-process prepared copy byte for byte."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch.distributed as dist

from gnnrun.data import build_dataset, prepare_dataset
from gnnrun.data.chunked import ChunkedDatasetConfig, write_chunks
from gnnrun.data.chunked_ranks import GIB, MIB, plan_rounds
from gnnrun.data.prepare_ranks import prepare_chunked, prepare_on_rank
from gnnrun.data.synthetic import SyntheticDatasetConfig
from gnnrun.errors import GnnrunError

TINY = {"name": "synthetic-tiny", "num_nodes": 2000, "avg_degree": 10, "num_classes": 8}
TINY |= {"feat_dim": 32, "max_degree_fraction": 0.05}


@contextlib.contextmanager
def one_rank():
    """A process group of this process alone (gloo)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_smaller_budget_makes_smaller_rounds_and_too_small_is_refused():
    args = dict(
        baseline_bytes=300 * MIB, share_edges=10_000_000, directions=2,
        part_edges=1_000_000, part_vertices=50_000, row_bytes=264,
    )  # fmt: skip
    plans = [plan_rounds(int(gb * GIB), **args) for gb in (0.5, 0.6, 1.0, 4.0)]
    sizes = [p.round_edges for p in plans]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    assert [p.rounds for p in plans] == sorted((p.rounds for p in plans), reverse=True)
    assert plans[0].rounds > plans[-1].rounds >= 1
    minimum = plans[0].minimum_bytes
    plan_rounds(minimum, **args)  # the smallest works
    with pytest.raises(GnnrunError) as refused:
        plan_rounds(minimum - 1, **args)
    message = str(refused.value)
    assert "the smallest that works is partitioner.memory_gb=" in message
    named = float(message.split("partitioner.memory_gb=")[2].split(";")[0])
    assert named * GIB >= minimum  # what it names is enough
    plan_rounds(int(named * GIB), **args)


@pytest.mark.parametrize("row_normalize", [False, True])
def test_prepared_on_a_rank_in_many_rounds_is_the_one_process_copy(
    tmp_path, row_normalize, monkeypatch
):
    metadata = write_chunks(
        tmp_path / "chunks", SyntheticDatasetConfig(**TINY), None, edges_per_file=1250,
        rows_per_file=300,
    )  # fmt: skip

    def config(name: str, memory_gb: float | None = None) -> SimpleNamespace:
        dataset = ChunkedDatasetConfig(
            name="tiny", path=str(metadata), prepared_dir=str(tmp_path / name),
            row_normalize=row_normalize, memory_gb=memory_gb,
        )  # fmt: skip
        return SimpleNamespace(dataset=dataset, cluster=SimpleNamespace(name="local"))

    # The process as the planner sees it: 200 MiB (a figure of its own, so that the
    # rounds do not depend on this process's size); a budget 3 MiB above it.
    monkeypatch.setattr("gnnrun.memory.resident_mb", lambda: 200.0)
    with one_rank():
        tight = config("ranks", memory_gb=203 / 1024)
        made, figures_now = prepare_chunked(tight, lambda tmp: [prepare_on_rank(tight, 0, tmp)])
    meta = json.loads((tmp_path / "ranks" / "meta.json").read_text())
    figures = meta["distributed"]["ranks"][0]
    assert figures["rounds"] > 1 and figures["edges_read"] == 10_000
    one = build_dataset(config("one").dataset)
    one.save(tmp_path / "one")
    assert meta["files"] == json.loads((tmp_path / "one" / "meta.json").read_text())["files"]
    assert made.checksum == one.checksum
    # Current: opened as it is, by the ranks' path and by the one-process one.
    assert prepare_dataset(config("ranks").dataset).checksum == made.checksum
    with one_rank():
        again, none = prepare_chunked(tight, lambda tmp: pytest.fail("prepared again"))
    assert again.path == made.path and none is None and figures_now == meta["distributed"]
    assert np.array_equal(np.asarray(again.indices), np.asarray(one.indices))


def test_a_bad_split_is_refused_naming_it(tmp_path):
    metadata = write_chunks(tmp_path / "c", SyntheticDatasetConfig(**TINY), None)
    doc = json.loads(metadata.read_text())
    label = np.load(tmp_path / "c" / doc["label"][0]["file"])
    train = np.load(tmp_path / "c" / doc["train_idx"][0])
    label[train[0]] = -1
    np.save(tmp_path / "c" / doc["label"][0]["file"], label)
    cfg = SimpleNamespace(
        dataset=ChunkedDatasetConfig(
            name="t", path=str(metadata), prepared_dir=str(tmp_path / "p")
        ),
        cluster=SimpleNamespace(name="local"),
    )
    with one_rank(), pytest.raises(GnnrunError, match="train_idx contains unlabelled vertices"):
        prepare_chunked(cfg, lambda tmp: [prepare_on_rank(cfg, 0, tmp)])
    assert not Path(tmp_path / "p").exists()
