"""Partitioning chunked input on ranks: the same bytes as one process, rounds that fit the
memory budget, and a budget too small refused with the smallest that works."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch.distributed as dist

from gnnrun.data import build_dataset, prepare_dataset
from gnnrun.data.chunked import ChunkedDatasetConfig, write_chunks
from gnnrun.data.chunked_ranks import GIB, MIB
from gnnrun.data.synthetic import SyntheticDatasetConfig
from gnnrun.errors import GnnrunError
from gnnrun.partition import partition_dataset
from gnnrun.partition.distributed import partition_chunked, partition_on_rank
from gnnrun.partition.multilevel import MultilevelPartitionerConfig
from gnnrun.partition.registry import PartitionerConfig
from gnnrun.testing import run_on_ranks

from ..conftest import REPO

TINY = {"name": "synthetic-tiny", "num_nodes": 2000, "avg_degree": 10, "num_classes": 8}
TINY |= {"feat_dim": 32, "max_degree_fraction": 0.05}


@pytest.fixture(scope="module")
def chunks(tmp_path_factory) -> Path:
    """synthetic-tiny drawn chunk by chunk: 8 edge files, 4 row files."""
    root = tmp_path_factory.mktemp("chunks")
    cfg = SyntheticDatasetConfig(**TINY)
    return write_chunks(root / "tiny", cfg, build=None, edges_per_file=1250, rows_per_file=500)


@contextlib.contextmanager
def one_rank():
    """A process group of this process alone (gloo)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _config(
    metadata: Path, out: Path, num_parts: int, memory_gb: float | None = None, name="random"
):
    dataset = ChunkedDatasetConfig(name="tiny-chunked", path=str(metadata))
    dataset.prepared_dir = str(out / "prepared")
    schema = MultilevelPartitionerConfig if name == "multilevel" else PartitionerConfig
    partitioner = schema(name=name, num_parts=num_parts, memory_gb=memory_gb)
    partitioner.output_dir = str(out / "dist")
    return SimpleNamespace(
        dataset=dataset, partitioner=partitioner, cluster=SimpleNamespace(name="local")
    )


def _same_partition(a: Path, b: Path) -> None:
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    for key in ("kind", "method", "num_parts", "config", "dataset", "parts", "summary"):
        assert ma[key] == mb[key], key
    assert ma["files"] == mb["files"]  # every array: shape, dtype, bytes, sha256
    for rel in ma["files"]:
        assert np.array_equal(np.load(a / rel), np.load(b / rel)), rel


def test_one_rank_writes_the_one_process_partition_in_many_rounds(chunks, tmp_path, monkeypatch):
    """Three parts on one rank, in rounds of a few thousand edges (a tight budget): the same
    files as `partitioner=random` in one process on the prepared copy, whose checksum the
    partition records, so training takes it."""
    config = _config(chunks, tmp_path, num_parts=3)
    with one_rank():
        roomy = partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
        rounds_roomy = roomy.manifest["distributed"]["ranks"][0]["rounds"]
        # The process as the planner sees it: 200 MiB (a figure of its own, so that the
        # rounds do not depend on this process's size); a budget 2.5 MiB above it.
        monkeypatch.setattr("gnnrun.memory.resident_mb", lambda: 200.0)
        config.partitioner.memory_gb = 202.5 * MIB / GIB
        config.partitioner.output_dir = str(tmp_path / "tight")
        tight = partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    figures = tight.manifest["distributed"]["ranks"][0]
    assert rounds_roomy == 1 and figures["rounds"] > 1
    assert figures["edges_read"] == 10_000 and figures["rows_read"] == 2000
    assert figures["peak_rss_mb"] > 0 and figures["parts_written"] == 3
    dataset = prepare_dataset(config.dataset)
    one = partition_dataset(
        dataset, PartitionerConfig(name="random", num_parts=3), tmp_path / "one"
    )
    assert tight.dataset_checksum == roomy.dataset_checksum == dataset.checksum
    _same_partition(tight.path, one.path)
    _same_partition(roomy.path, one.path)


def test_a_budget_below_the_process_is_refused_before_anything_is_read(chunks, tmp_path):
    config = _config(chunks, tmp_path, num_parts=2, memory_gb=0.05)
    with one_rank(), pytest.raises(GnnrunError, match="smallest that works"):
        partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    assert not Path(config.partitioner.output_dir).exists()


def _rank_job(rank: int, world: int, config, tmp: str):
    return partition_on_rank(config, rank, tmp)


@pytest.mark.parametrize("undirected", [True, False])
def test_multilevel_on_one_rank_writes_the_one_process_partition(chunks, tmp_path, undirected):
    """partitioner=multilevel computes its assignment on the ranks and writes it through
    node_owner.npy: byte for byte the files one process writes from the prepared dataset.
    On a directed graph the ranks symmetrise it (each edge sent to both ends) and count
    in-degrees as METIS's input does."""
    if not undirected:  # the same files, read as a directed graph
        doc = json.loads(chunks.read_text()) | {"undirected": False}
        (tmp_path / "directed").mkdir()
        for entry in chunks.parent.iterdir():
            if entry.name != "metadata.json":
                (tmp_path / "directed" / entry.name).symlink_to(entry)
        chunks = tmp_path / "directed" / "metadata.json"
        chunks.write_text(json.dumps(doc))
    config = _config(chunks, tmp_path, num_parts=3, name="multilevel")
    with one_rank():
        ranks = partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    assert ranks.manifest["summary"]["levels"] >= 1
    dataset = prepare_dataset(config.dataset)
    assert dataset.directed != undirected
    one = partition_dataset(dataset, MultilevelPartitionerConfig(num_parts=3), tmp_path / "one")
    _same_partition(ranks.path, one.path)
    random_cfg = PartitionerConfig(name="random", num_parts=3)
    random = partition_dataset(dataset, random_cfg, tmp_path / "random")
    assert one.manifest["summary"]["cut_edges"] < 0.6 * random.manifest["summary"]["cut_edges"]


def test_multilevel_on_two_ranks_writes_the_one_process_partition(tmp_path):
    """On 2 ranks, each holding half the vertices (their labels and parts exchanged every
    sub-round), the same assignment and files as one process: nothing depends on which
    rank holds a vertex."""
    small = SyntheticDatasetConfig(**(TINY | {"num_nodes": 600, "feat_dim": 4}))
    metadata = write_chunks(tmp_path / "small", small, build=None, edges_per_file=700)
    config = _config(metadata, tmp_path, num_parts=4, name="multilevel")
    two = partition_chunked(config, lambda tmp: run_on_ranks(_rank_job, 2, config, tmp))
    assert [r["parts_written"] for r in two.manifest["distributed"]["ranks"]] == [2, 2]
    dataset = prepare_dataset(config.dataset)
    one = partition_dataset(dataset, MultilevelPartitionerConfig(num_parts=4), tmp_path / "one")
    _same_partition(two.path, one.path)


def test_multilevel_refuses_a_budget_that_cannot_hold_its_share_of_the_graph(
    chunks, tmp_path, monkeypatch
):
    monkeypatch.setattr("gnnrun.memory.resident_mb", lambda: 200.0)
    # Enough for the rounds and a part (about 201.8 MiB with a process of 200), not for the
    # graph's share (20,000 stored edges and 2,000 vertices: about 8.8 MiB).
    config = _config(chunks, tmp_path, num_parts=2, memory_gb=202 * MIB / GIB, name="multilevel")
    with one_rank(), pytest.raises(GnnrunError, match="rank.s share of the graph") as refused:
        partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    assert "the smallest that works is partitioner.memory_gb=0.21;" in str(refused.value)
    assert not Path(config.partitioner.output_dir).exists()


def _gnnrun(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"GNNRUN_DATA_ROOT": str(cwd / "data"), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "gnnrun.cli", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_two_ranks_partition_as_one_process_and_train_to_the_same_losses(tmp_path):
    """`gnnrun partition` of chunked synthetic-tiny on 2 ranks, then training on it and on
    the one-process partition: equal arrays, equal losses."""
    chunk = [
        "data",
        "chunk",
        "dataset=synthetic-tiny",
        "--output",
        "tiny",
        "--edges-per-file",
        "1000",
    ]
    assert _gnnrun(tmp_path, *chunk).returncode == 0
    data = ["dataset=chunked", "dataset.name=tiny-chunked", "dataset.path=tiny/metadata.json"]
    run = _gnnrun(tmp_path, "partition", *data, "partitioner=random", "cluster.nprocs=2")
    assert run.returncode == 0, run.stderr
    assert "rank 1: part 1 written" in run.stderr
    prepare = _gnnrun(tmp_path, "data", "prepare", *data, "cluster.nprocs=2")
    assert prepare.returncode == 0, prepare.stderr
    assert "rank 1: rows [1,000, 2,000) written" in prepare.stderr
    distributed = tmp_path / "data" / "partitions" / "tiny-chunked" / "random-2"
    losses = {}
    for name, extra in (
        ("distributed", []),
        ("one", [f"partitioner.output_dir={tmp_path / 'one-part'}"]),
    ):
        train = ["train", *data, "partitioner=random", "train.epochs=3", "cluster.nprocs=2"]
        run = _gnnrun(tmp_path, *train, f"hydra.run.dir={tmp_path / name}", *extra)
        assert run.returncode == 0, run.stderr
        assert name == "one" or "partitioning" not in run.stderr  # the ranks' one is taken
        metrics = (tmp_path / name / "metrics.rank0.jsonl").read_text().splitlines()
        losses[name] = [json.loads(line)["loss"] for line in metrics]
    _same_partition(distributed, tmp_path / "one-part")
    one = build_dataset(
        ChunkedDatasetConfig(name="tiny-chunked", path=str(tmp_path / "tiny" / "metadata.json"))
    )
    one.save(tmp_path / "one-prepared")
    ranks = json.loads((tmp_path / "data" / "prepared" / "tiny-chunked" / "meta.json").read_text())
    assert (
        ranks["files"] == json.loads((tmp_path / "one-prepared" / "meta.json").read_text())["files"]
    )
    assert ranks["checksum"] == one.checksum and len(ranks["distributed"]["ranks"]) == 2
    assert len(losses["one"]) == 3 and losses["distributed"] == losses["one"]


@pytest.mark.slow
def test_multilevel_on_two_ranks_trains_to_the_losses_of_the_one_process_partition(tmp_path):
    """`gnnrun partition partitioner=multilevel` of chunked input on 2 ranks, then training
    on it and on the one-process partition of the prepared dataset: equal files, equal
    losses."""
    chunk = ["data", "chunk", "dataset=synthetic-tiny", "--output", "tiny"]
    assert _gnnrun(tmp_path, *chunk, "--edges-per-file", "1000").returncode == 0
    data = ["dataset=chunked", "dataset.name=tiny-chunked", "dataset.path=tiny/metadata.json"]
    run = _gnnrun(tmp_path, "partition", *data, "partitioner=multilevel", "cluster.nprocs=2")
    assert run.returncode == 0, run.stderr
    assert "rank 1: part 1 written" in run.stderr and "runs in one process" not in run.stderr
    losses = {}
    for name, extra in (
        ("ranks", []),
        ("one", [f"partitioner.output_dir={tmp_path / 'one-part'}"]),
    ):
        train = ["train", *data, "partitioner=multilevel", "train.epochs=3", "cluster.nprocs=2"]
        run = _gnnrun(tmp_path, *train, f"hydra.run.dir={tmp_path / name}", *extra)
        assert run.returncode == 0, run.stderr
        assert name == "one" or "partitioning" not in run.stderr  # the ranks' one is taken
        metrics = (tmp_path / name / "metrics.rank0.jsonl").read_text().splitlines()
        losses[name] = [json.loads(line)["loss"] for line in metrics]
    _same_partition(
        tmp_path / "data" / "partitions" / "tiny-chunked" / "multilevel-2", tmp_path / "one-part"
    )
    assert len(losses["one"]) == 3 and losses["ranks"] == losses["one"]
