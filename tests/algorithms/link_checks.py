"""What the link-prediction tests run on each real rank (imported by name there)."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.algorithms.minibatch.minibatch import DistributedMinibatch, step_key
from gnnrun.algorithms.minibatch.sources import LocalGraphSource, make_minibatch
from gnnrun.comm import Communicator
from gnnrun.data.dataset import GraphDataset
from gnnrun.models.hetero import TypedInput
from gnnrun.ops.block import Block
from gnnrun.tasks import load_for_task
from gnnrun.timers import PhaseTimer


def block_pairs(block: Block) -> set[tuple[int, int]]:
    """Each edge of a block as a (source, destination) pair of global ids."""
    u = block.src_ids[block.indices].tolist()
    v = block.src_ids[block.dst_of_edges()].tolist()
    return set(zip(u, v, strict=True))


def graph_pairs(dataset: GraphDataset) -> set[tuple[int, int]]:
    """Every edge of the message-passing graph as a (source, destination) pair."""
    pairs = set()
    for v in range(dataset.num_nodes):
        for u in dataset.indices[dataset.indptr[v] : dataset.indptr[v + 1]].tolist():
            pairs.add((u, v))
    return pairs


def both_directions(pairs) -> set[tuple[int, int]]:
    """The vertex pairs of a [2, E] array, each in both directions."""
    a, b = np.asarray(pairs)[0].tolist(), np.asarray(pairs)[1].tolist()
    return set(zip(a, b, strict=True)) | set(zip(b, a, strict=True))


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
    held_out = both_directions(np.concatenate([dataset.link_val, dataset.link_test], axis=1))
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
        excluded = both_directions(exclude)
        for block in batch.blocks:
            pairs = block_pairs(block)
            assert not pairs & held_out, "a held-out edge reached a block"
            assert not pairs & excluded, "a target edge reached a block"
            assert pairs <= graph, "a sampled edge is not in the graph"
            edges += len(pairs)
        # The targets were edges of the graph: leaving them out was not vacuous.
        targets_in_graph += len(excluded & graph)
        remote += int((algorithm.source.owner[blocks[0].src_ids] != rank).sum())
        positives += int(exclude.shape[1])
    return {
        "steps": steps,
        "edges": edges,
        "targets_in_graph": targets_in_graph,
        "remote_inputs": remote,
        "positives": positives,
    }
