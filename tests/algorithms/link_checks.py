"""What the link-prediction tests run on each real rank (imported by name there)."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.algorithms.minibatch import DistributedMinibatch, step_key
from gnnrun.algorithms.sources import LocalGraphSource, make_minibatch, pair_keys
from gnnrun.comm import Communicator
from gnnrun.data import load_for_task
from gnnrun.data.dataset import GraphDataset
from gnnrun.models.hetero import TypedInput
from gnnrun.ops.block import Block
from gnnrun.timers import PhaseTimer


def block_pairs(block: Block) -> torch.Tensor:
    """Each edge of a block as (source << 32) | destination, in global ids."""
    u = block.src_ids[block.indices]
    v = block.src_ids[block.dst_of_edges()]
    return (u << 32) | v


def graph_pairs(dataset: GraphDataset) -> torch.Tensor:
    """Every edge of the message-passing graph as (source << 32) | destination, sorted."""
    v = np.repeat(np.arange(dataset.num_nodes, dtype=np.int64), np.diff(dataset.indptr))
    u = np.asarray(dataset.indices, dtype=np.int64)
    return torch.sort(torch.from_numpy((u << 32) | v)).values


def same_input(a: torch.Tensor | TypedInput, b: torch.Tensor | TypedInput) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return (
        torch.equal(a.types, b.types)
        and torch.equal(a.typed_ids, b.typed_ids)
        and a.feat.keys() == b.feat.keys()
        and all(torch.equal(a.feat[t], b.feat[t]) for t in a.feat)
    )


def link_epoch_checks(rank: int, world: int, cfg) -> dict:
    """Every step of one epoch on this rank: the owners' blocks and features equal one
    process's for the same seeds and key; no block holds a held-out edge or one of the
    step's target edges (either direction); every sampled edge is in the graph."""
    comm = Communicator()
    algorithm = DistributedMinibatch(cfg, comm, PhaseTimer())
    dataset = load_for_task(cfg.dataset, cfg.task)
    local = LocalGraphSource(dataset)
    held_out = pair_keys(
        torch.from_numpy(np.concatenate([dataset.link_val, dataset.link_test], axis=1))
    )
    graph = graph_pairs(dataset)
    steps = algorithm.begin_epoch(0)
    edges = targets_in_graph = remote = positives = 0
    for step in range(steps):
        batch = algorithm.batch(step)
        items = algorithm.step_items(algorithm.order, step)
        seeds, exclude, targets = algorithm.step_targets(items, step_key(cfg.train.seed, 0, step))
        assert torch.equal(targets.positives, batch.targets.positives)
        assert torch.equal(targets.negatives, batch.targets.negatives)
        blocks, x = make_minibatch(
            local, seeds, algorithm.fanouts, step_key(cfg.train.seed, 0, step), exclude
        )
        for mine, single in zip(batch.blocks, blocks, strict=True):
            for name in ("indptr", "indices", "src_ids", "etypes"):
                a, b = getattr(mine, name), getattr(single, name)
                assert (a is None and b is None) or torch.equal(a, b), name
        assert same_input(batch.x, x)
        excluded = pair_keys(exclude)
        for block in batch.blocks:
            pairs = block_pairs(block)
            assert not torch.isin(pairs, held_out).any(), "a held-out edge reached a block"
            assert not torch.isin(pairs, excluded).any(), "a target edge reached a block"
            found = torch.searchsorted(graph, pairs).clamp(max=graph.numel() - 1)
            assert torch.equal(graph[found], pairs), "a sampled edge is not in the graph"
            edges += pairs.numel()
        # The targets were edges of the graph: leaving them out was not vacuous.
        targets_in_graph += int(torch.isin(excluded, graph).sum())
        remote += int((algorithm.source.owner[blocks[0].src_ids] != rank).sum())
        positives += int(exclude.shape[1])
    return {
        "steps": steps,
        "edges": edges,
        "targets_in_graph": targets_in_graph,
        "remote_inputs": remote,
        "positives": positives,
    }
