"""What the algorithm tests run on each real rank (imported by name there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnrun.algorithms.minibatch import DistributedMinibatch
from gnnrun.algorithms.sources import LocalGraphSource, PartitionGraphSource, make_minibatch
from gnnrun.comm import Communicator
from gnnrun.data import load_prepared
from gnnrun.models import build_model
from gnnrun.partition.book import open_partition
from gnnrun.train.timers import PhaseTimer


def minibatch_matches_single_process(rank: int, world: int, cfg, key: int) -> dict:
    """Blocks and features from the owners equal those sampled from the whole graph."""
    dataset = load_prepared(cfg.dataset)
    book = open_partition(
        Path(cfg.partitioner.output_dir), dataset_checksum=dataset.checksum, world_size=world
    )
    distributed = PartitionGraphSource(book, Communicator())
    local = LocalGraphSource(dataset)
    rng = np.random.default_rng(rank)
    seeds = torch.from_numpy(rng.choice(dataset.num_nodes, 64, replace=False).astype(np.int64))
    blocks_d, x_d = make_minibatch(distributed, seeds, cfg.model.fanouts, key)
    blocks_l, x_l = make_minibatch(local, seeds, cfg.model.fanouts, key)
    for bd, bl in zip(blocks_d, blocks_l, strict=True):
        assert torch.equal(bd.indptr, bl.indptr) and torch.equal(bd.indices, bl.indices)
        assert torch.equal(bd.src_ids, bl.src_ids)
    assert torch.equal(x_d, x_l)
    # Every sampled edge exists in the global graph.
    edges = set()
    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices)
    for block in blocks_d:
        dst = block.src_ids[block.dst_of_edges()].numpy()
        src = block.src_ids[block.indices].numpy()
        for u, v in zip(src.tolist(), dst.tolist(), strict=True):
            assert u in indices[indptr[v] : indptr[v + 1]]
            edges.add((u, v))
    remote = int(
        (torch.from_numpy(np.asarray(book.node_owner()))[blocks_d[0].src_ids] != rank).sum()
    )
    return {"edges": len(edges), "remote_inputs": remote, "feature_rows_equal": True}


def parameters_after_one_epoch(rank: int, world: int, cfg) -> list[float]:
    """Train one epoch of `minibatch`; every rank must end with the same weights."""
    comm = Communicator()
    algorithm = DistributedMinibatch(cfg, comm, PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.model.lr)
    torch.manual_seed(100 + rank)  # different dropout per rank: gradients differ before all-reduce
    stats = algorithm.train_epoch(model, optimizer, 0)
    assert stats["steps"] >= 1 and comm.bytes.sent.get("features", 0) > 0
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
