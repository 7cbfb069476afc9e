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
