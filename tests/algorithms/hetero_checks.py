"""What the heterogeneous minibatch tests run on each real rank (imported by name there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnrun.algorithms import ALGORITHMS
from gnnrun.algorithms.minibatch.sources import (
    LocalGraphSource,
    PartitionGraphSource,
    hop_fanouts,
    make_minibatch,
)
from gnnrun.comm import Communicator
from gnnrun.data import load_prepared
from gnnrun.data.dataset import GraphDataset
from gnnrun.models import build_model
from gnnrun.ops.block import Block
from gnnrun.partition.book import open_partition
from gnnrun.timers import PhaseTimer
from gnnrun.train.optimizer import build_optimizer
from gnnrun.train.trainer import train, train_epoch


def sampled_edges_exist(dataset: GraphDataset, blocks: list[Block], fanouts: list) -> int:
    """Assert that every sampled edge is an edge of the graph with its relation, and that
    no vertex got more neighbours of a relation than that relation's fanout; return how
    many edges were sampled."""
    schema = dataset.hetero
    n, relations = dataset.num_nodes, schema.num_relations
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(dataset.indptr))
    graph_keys = (dst * relations + np.asarray(dataset.edge_type)) * n + np.asarray(
        dataset.indices
    )  # sorted: rows list their edges by relation, then source
    total = 0
    for block, fanout in zip(blocks, reversed(fanouts), strict=True):
        v = block.src_ids[block.dst_of_edges()].numpy()
        u = block.src_ids[block.indices].numpy()
        r = block.etypes.numpy()
        keys = (v * relations + r) * n + u
        found = np.searchsorted(graph_keys, keys)
        assert np.all(graph_keys[np.minimum(found, graph_keys.size - 1)] == keys)
        per_row = np.bincount(block.dst_of_edges().numpy() * relations + r)
        limit = np.asarray(fanout)[np.arange(per_row.size) % relations]
        assert np.all((per_row <= limit) | (limit < 0))
        assert torch.equal(block.node_types, torch.from_numpy(schema.type_of(block.src_ids)))
        total += keys.size
    return total


def hetero_sampling_matches_single_process(rank: int, world: int, cfg, key: int) -> dict:
    """The owners' heterogeneous blocks and typed features equal one process's."""
    dataset = load_prepared(cfg.dataset)
    schema = dataset.hetero
    book = open_partition(
        Path(cfg.partitioner.output_dir), dataset_checksum=dataset.checksum, world_size=world
    )
    distributed = PartitionGraphSource(book, Communicator(), schema)
    local = LocalGraphSource(dataset)
    fanouts = hop_fanouts(cfg.algorithm, schema)
    rng = np.random.default_rng(rank)
    # Seeds of every type, so that every relation is sampled at the first hop too.
    seeds = torch.from_numpy(rng.choice(dataset.num_nodes, 48, replace=False).astype(np.int64))
    blocks_d, x_d = make_minibatch(distributed, seeds, fanouts, key)
    blocks_l, x_l = make_minibatch(local, seeds, fanouts, key)
    for bd, bl in zip(blocks_d, blocks_l, strict=True):
        for name in ("indptr", "indices", "src_ids", "etypes", "node_types"):
            assert torch.equal(getattr(bd, name), getattr(bl, name)), name
    assert torch.equal(x_d.types, x_l.types) and torch.equal(x_d.typed_ids, x_l.typed_ids)
    assert x_d.feat.keys() == x_l.feat.keys()
    assert all(torch.equal(x_d.feat[t], x_l.feat[t]) for t in x_d.feat)
    edges = sampled_edges_exist(dataset, blocks_d, fanouts)
    owner = torch.from_numpy(np.asarray(book.node_owner()))
    return {
        "edges": edges,
        "relations": sorted(set(torch.cat([b.etypes for b in blocks_d]).tolist())),
        "remote_inputs": int((owner[blocks_d[0].src_ids] != rank).sum()),
        "input_types": sorted(set(x_d.types.tolist())),
        "featured_types": sorted(x_d.feat),
    }


def hetero_weights_after_one_epoch(rank: int, world: int, cfg) -> list[float]:
    """One epoch of `minibatch` on a heterogeneous graph with the trainer's optimiser: every
    rank ends with the same weights, embedding tables included."""
    comm = Communicator()
    algorithm = ALGORITHMS.get(cfg.algorithm.name)(cfg, comm, PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes, algorithm.schema)
    optimizer = build_optimizer(model, cfg.optimizer)
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(100 + rank)  # different dropout per rank: gradients differ before combining
    train_epoch(algorithm, model, optimizer, 0)
    changed = [not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True)]
    assert all(changed), "every parameter, embedding tables included, must have moved"
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def hetero_checks_and_runs(rank: int, world: int, sampled, trained, runs, run_root: str) -> tuple:
    """The sampling check on each config of `sampled`, the weights check, then
    `gnnrun.train.trainer.train` once per config of `runs` (run directories run0, run1, ...
    under `run_root`), in one launch: starting ranks costs more than the checks."""
    checks = (
        [hetero_sampling_matches_single_process(rank, world, cfg, 4242) for cfg in sampled],
        hetero_weights_after_one_epoch(rank, world, trained),
    )
    for i, cfg in enumerate(runs):
        run_dir = Path(run_root) / f"run{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        train(cfg, run_dir)
    return checks
