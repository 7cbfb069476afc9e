"""Libra on the ranks from chunked input: the files one process writes, for 1, 2 and 3
ranks; training on them gives the one-process losses; a budget too small is refused."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

from gnnrun.data import prepare_dataset
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


def test_one_rank_writes_the_one_process_partition(chunks, tmp_path):  # noqa: F811
    """One rank, 3 parts, a few rounds of a few streams: the files of one-process Libra."""
    config = _config(chunks, tmp_path, num_parts=3)
    _libra(config, 3, streams=4, rounds=7)
    with one_rank():
        ranks = partition_chunked(config, lambda tmp: [partition_on_rank(config, 0, tmp)])
    one = _one_process(config, tmp_path / "one")
    assert ranks.manifest["kind"] == "vertex_cut"
    assert ranks.dataset_checksum == one.dataset_checksum
    _same_partition(ranks.path, one.path)


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
