"""A one-rank run's partition source: the whole graph's blocks and rows, without routing."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from gnnrun.algorithms.minibatch.sources import (
    LocalGraphSource,
    PartitionGraphSource,
    make_minibatch,
)
from gnnrun.comm import Communicator
from gnnrun.data import load_prepared
from gnnrun.partition.book import open_partition


def test_a_one_rank_part_samples_and_gathers_as_the_whole_graph_without_routing(configure):
    cfg = configure("dataset=synthetic-tiny", "algorithm=minibatch", "cluster.nprocs=1")
    dataset = load_prepared(cfg.dataset)
    book = open_partition(Path(cfg.partitioner.output_dir), world_size=1)
    one_rank = PartitionGraphSource(book, Communicator())
    assert one_rank.whole_graph
    routed = copy.copy(one_rank)
    routed.whole_graph = False  # the path of a rank among several: route, map ids, reorder
    local = LocalGraphSource(dataset)
    seeds = torch.randperm(dataset.num_nodes, generator=torch.Generator().manual_seed(0))[:50]
    fanouts, key = [5, 3], 11
    blocks, x = make_minibatch(one_rank, seeds, fanouts, key)
    for other in (routed, local):
        other_blocks, other_x = make_minibatch(other, seeds, fanouts, key)
        for block, expected in zip(blocks, other_blocks, strict=True):
            assert torch.equal(block.indptr, expected.indptr)
            assert torch.equal(block.indices, expected.indices)
            assert torch.equal(block.src_ids, expected.src_ids)
        assert torch.equal(x, other_x)
    # The pipeline's gather: the rows already in order, into the buffer it is given.
    inputs = blocks[0].src_ids
    buffer = torch.full((inputs.numel() + 3, dataset.feat_dim), float("nan"))
    rows, position = one_rank.gather_rows(inputs, into=lambda n, shape, dtype: buffer[:n])
    assert position is None and rows.data_ptr() == buffer.data_ptr()
    assert torch.equal(rows, x)
    routed_rows, routed_position = routed.gather_rows(inputs)
    assert torch.equal(routed_rows[routed_position], x)


def test_a_part_of_several_is_not_the_whole_graph(configure):
    cfg = configure("dataset=synthetic-tiny", "algorithm=minibatch", "cluster.nprocs=2")
    book = open_partition(Path(cfg.partitioner.output_dir), world_size=2)
    assert not PartitionGraphSource(book, Communicator()).whole_graph
