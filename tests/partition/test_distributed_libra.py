"""Libra on the ranks from chunked input: the files one process writes, for 1, 2 and 3
ranks; training on them gives the one-process losses; a budget too small is refused."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from gnnrun.data import prepare_dataset
from gnnrun.data.chunked import ChunkWriter
from gnnrun.data.chunked_ranks import GIB, MIB
from gnnrun.errors import GnnrunError
from gnnrun.partition import partition_dataset
from gnnrun.partition.distributed import partition_chunked, partition_on_rank
from gnnrun.partition.libra import LibraPartitionerConfig

from .test_distributed import _config, _gnnrun, _same_partition, chunks, one_rank  # noqa: F401


def _libra(config, num_parts: int, **settings) -> None:
    config.partitioner = LibraPartitionerConfig(
        num_parts=num_parts, output_dir=config.partitioner.output_dir, **settings
    )


def _one_process(config, out: Path):
    dataset = prepare_dataset(config.dataset)
    cfg = LibraPartitionerConfig(**{
        k: v for k, v in vars(config.partitioner).items() if k not in ("output_dir", "memory_gb")
    })  # fmt: skip
    return partition_dataset(dataset, cfg, out)


def test_one_rank_writes_the_one_process_partition(chunks, tmp_path, monkeypatch):  # noqa: F811
    """One rank, 3 parts, a few rounds of a few streams, reading all edges at once or in
    rounds of a tight budget: the files of one-process Libra."""
    config = _config(chunks, tmp_path, num_parts=3)
    _libra(config, 3, streams=4, rounds=7)
    with one_rank():
        roomy = partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
        # The process as the planner sees it: 200 MiB; a budget 4 MiB above it.
        monkeypatch.setattr("gnnrun.memory.resident_mb", lambda: 200.0)
        config.partitioner.memory_gb = 204 * MIB / GIB
        config.partitioner.output_dir = str(tmp_path / "tight")
        tight = partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    assert roomy.manifest["distributed"]["ranks"][0]["rounds"] == 1
    assert tight.manifest["distributed"]["ranks"][0]["rounds"] > 1
    one = _one_process(config, tmp_path / "one")
    assert roomy.manifest["kind"] == "vertex_cut"
    assert roomy.dataset_checksum == tight.dataset_checksum == one.dataset_checksum
    _same_partition(roomy.path, one.path)
    _same_partition(tight.path, one.path)


def _rank_main(config, rank: int, world: int, store: str, tmp: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        results.put((rank, partition_on_rank(config, rank, tmp)))
    except BaseException as exc:  # the parent reports it
        results.put((rank, exc))
        raise
    finally:
        dist.destroy_process_group()


def _forked_ranks(config, world: int, store: Path):
    """run_ranks for partition_chunked: `world` forked processes in a gloo group."""

    def run(tmp: str) -> list:
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        procs = [
            context.Process(target=_rank_main, args=(config, r, world, str(store), tmp, results))
            for r in range(world)
        ]
        for proc in procs:
            proc.start()
        got = dict(results.get(timeout=120) for _ in procs)
        for proc in procs:
            proc.join(timeout=60)
        failed = [v for v in got.values() if isinstance(v, BaseException)]
        if failed:
            raise failed[0]
        return [got[r] for r in range(world)]

    return run


@pytest.mark.parametrize("world, streams", [(2, 5), (3, 2)])
def test_ranks_write_the_one_process_partition(chunks, tmp_path, world, streams):  # noqa: F811
    """2 ranks (5 streams: one runs more) and 3 ranks (2 streams: one runs none), 4 parts:
    the files of one-process Libra."""
    config = _config(chunks, tmp_path, num_parts=4)
    _libra(config, 4, streams=streams, rounds=16)
    ranks = partition_chunked(config, _forked_ranks(config, world, tmp_path / "store"))
    one = _one_process(config, tmp_path / "one")
    _same_partition(ranks.path, one.path)
    distributed = ranks.manifest["distributed"]["ranks"]
    assert [r["rank"] for r in distributed] == list(range(world))
    assert sum(r["edges_read"] for r in distributed) == 10_000
    assert all(r["edges_sent"] > 0 for r in distributed)  # the pairs did travel
    assert all(r["seconds"]["libra_s"] > 0 for r in distributed)
    assert 1 < ranks.manifest["summary"]["replication_factor"] < 4


def test_a_budget_below_the_process_is_refused_before_anything_is_read(chunks, tmp_path):  # noqa: F811
    config = _config(chunks, tmp_path, num_parts=2)
    _libra(config, 2, memory_gb=0.05)
    with one_rank(), pytest.raises(GnnrunError, match="the smallest that works is"):
        partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    assert not Path(config.partitioner.output_dir).exists()


@pytest.mark.slow
def test_two_ranks_libra_trains_to_the_one_process_losses(tmp_path):
    """`gnnrun partition ... partitioner=libra cluster.nprocs=2` of chunked synthetic-tiny,
    then DistGNN (cd-0) on it and on the one-process partition: equal files, equal losses."""
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
    run = _gnnrun(tmp_path, "partition", *data, "partitioner=libra", "cluster.nprocs=2")
    assert run.returncode == 0, run.stderr
    assert "rank 1: part 1 written" in run.stderr and "libra round 1024/1024" in run.stderr
    distributed = tmp_path / "data" / "partitions" / "tiny-chunked" / "libra-2"
    assert json.loads((distributed / "manifest.json").read_text())["kind"] == "vertex_cut"
    losses = {}
    for name, extra in (
        ("distributed", []),
        ("one", [f"partitioner.output_dir={tmp_path / 'one-part'}"]),
    ):
        train = ["train", *data, "algorithm=cd0", "partitioner=libra", "train.epochs=3"]
        run = _gnnrun(
            tmp_path, *train, "cluster.nprocs=2", f"hydra.run.dir={tmp_path / name}", *extra
        )
        assert run.returncode == 0, run.stderr
        assert name == "one" or "partitioning" not in run.stderr  # the ranks' one is taken
        metrics = (tmp_path / name / "metrics.rank0.jsonl").read_text().splitlines()
        losses[name] = [json.loads(line)["loss"] for line in metrics]
    _same_partition(distributed, tmp_path / "one-part")
    assert len(losses["one"]) == 3 and losses["distributed"] == losses["one"]


def test_a_directed_graph_on_two_ranks_is_the_one_process_partition(tmp_path):
    """Directed edges (duplicates, self-loops, vertices without edges) and the `union` rule:
    2 ranks write the one-process files."""
    rng = np.random.default_rng(3)
    n = 300
    writer = ChunkWriter(tmp_path / "directed")
    for _ in range(3):
        src, dst = rng.integers(0, n - 20, 700), rng.integers(0, n - 20, 700)
        writer.edges(np.r_[src, src[:50], [4]], np.r_[dst, dst[:50], [4]])
    for lo in (0, 200):
        hi = min(lo + 200, n)
        writer.rows("feat", rng.random((hi - lo, 5), dtype=np.float32))
        writer.rows("label", rng.integers(0, 3, hi - lo))
    order = rng.permutation(n)
    splits = np.split(order, [150, 220])
    for split, ids in zip(("train_idx", "val_idx", "test_idx"), splits, strict=True):
        writer.split(split, np.sort(ids))
    metadata = writer.finish("directed", n, 3, 5, undirected=False)
    config = _config(metadata, tmp_path, num_parts=3)
    _libra(config, 3, streams=3, rounds=9, rule="union")
    ranks = partition_chunked(config, _forked_ranks(config, 2, tmp_path / "store"))
    _same_partition(ranks.path, _one_process(config, tmp_path / "one").path)
