"""What the algorithm tests run on each real rank (imported by name there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gnnrun.algorithms import ALGORITHMS, open_own_part
from gnnrun.algorithms.distgnn.drpa import CloneTree, DelayedRemoteAggregates
from gnnrun.algorithms.minibatch.minibatch import DistributedMinibatch
from gnnrun.algorithms.minibatch.sources import (
    LocalGraphSource,
    PartitionGraphSource,
    make_minibatch,
)
from gnnrun.algorithms.single import Single
from gnnrun.comm import Communicator
from gnnrun.data import load_prepared
from gnnrun.models import build_model
from gnnrun.ops.block import Block
from gnnrun.partition.book import Part, open_partition
from gnnrun.timers import PhaseTimer
from gnnrun.train.trainer import initial_model, train_epoch


def minibatch_matches_single_process(rank: int, world: int, cfg, key: int) -> dict:
    """Blocks and features from the owners equal those sampled from the whole graph (64
    seeds); returns the sampled edges, the remote input vertices and the feature rows
    compared."""
    dataset = load_prepared(cfg.dataset)
    book = open_partition(
        Path(cfg.partitioner.output_dir), dataset_checksum=dataset.checksum, world_size=world
    )
    distributed = PartitionGraphSource(book, Communicator())
    local = LocalGraphSource(dataset)
    rng = np.random.default_rng(rank)
    seeds = torch.from_numpy(rng.choice(dataset.num_nodes, 64, replace=False).astype(np.int64))
    blocks_d, x_d = make_minibatch(distributed, seeds, cfg.algorithm.fanouts, key)
    blocks_l, x_l = make_minibatch(local, seeds, cfg.algorithm.fanouts, key)
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
    # The feature rows compared above (equal, or the assertion stopped the rank): one per
    # input vertex of the first block, seeds included.
    return {"edges": len(edges), "remote_inputs": remote, "feature_rows": int(x_d.shape[0])}


def parameters_after_one_epoch(rank: int, world: int, cfg) -> list[float]:
    """Train one epoch of `minibatch`; every rank must end with the same weights (and
    batch normalisation's running statistics, with model.norm=batch)."""
    comm = Communicator()
    algorithm = DistributedMinibatch(cfg, comm, PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optimizer.lr)
    torch.manual_seed(100 + rank)  # different dropout per rank: gradients differ before all-reduce
    stats = train_epoch(algorithm, model, optimizer, 0)
    assert stats["steps"] >= 1 and comm.bytes.sent.get("features", 0) > 0
    state = [t.detach().reshape(-1).float() for t in model.state_dict().values()]
    return torch.cat(state).tolist()


def minibatch_samples_and_weights(rank: int, world: int, sampled, trained) -> tuple:
    """minibatch_matches_single_process on one config, parameters_after_one_epoch on another."""
    return (
        minibatch_matches_single_process(rank, world, sampled, 12345),
        parameters_after_one_epoch(rank, world, trained),
    )


def algorithm_and_model(cfg):
    """This rank's communicator, the config's algorithm, and the model and optimizer the
    trainer would build (the same initial weights on every rank)."""
    comm = Communicator()
    algorithm = ALGORITHMS.get(cfg.algorithm.name)(cfg, comm, PhaseTimer())
    model = initial_model(cfg, algorithm)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optimizer.lr)
    return comm, algorithm, model, optimizer


def distgnn_trajectory(rank: int, world: int, cfg, epochs: int) -> dict:
    """Train a DistGNN algorithm `epochs` epochs; per epoch its loss, summed gradients and bytes,
    then the logits of every local clone with exact aggregation, by original vertex id."""
    comm, algorithm, model, optimizer = algorithm_and_model(cfg)
    epochs_out = []
    for epoch in range(epochs):
        comm.bytes.reset()
        stats = train_epoch(algorithm, model, optimizer, epoch)
        epochs_out.append(
            {
                "loss": stats["loss"],
                "grads": [p.grad.clone() for p in model.parameters()],
                "bytes": comm.bytes.reset(),
            }
        )
    model.eval()
    with torch.no_grad(), algorithm.drpa.exact():
        logits = algorithm.logits(model)
    nodes = torch.from_numpy(
        np.array(open_own_part(cfg, comm, "vertex_cut")[1].load_part(rank)["nodes"])
    )
    return {"epochs": epochs_out, "nodes": nodes, "logits": logits}


def single_trajectory(cfg, epochs: int) -> dict:
    """The same with `single` full batch in this process: the oracle."""
    algorithm = Single(cfg, Communicator(), PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optimizer.lr)
    epochs_out = []
    for epoch in range(epochs):
        stats = train_epoch(algorithm, model, optimizer, epoch)
        epochs_out.append(
            {"loss": stats["loss"], "grads": [p.grad.clone() for p in model.parameters()]}
        )
    model.eval()
    with torch.no_grad():
        logits = algorithm.full_logits(model)
    return {"epochs": epochs_out, "logits": logits}


def drpa_on_hand_built_tree(
    rank: int, world: int, delay: int | None, bins: int, epochs: int, backward: str = "delayed"
):
    """DRPA on two ranks over a hand-built clone tree; per epoch the outputs and input gradients.

    Vertices 0 and 3 are split: vertex 0 has its root on rank 0, vertex 3 on
    rank 1. Vertex 1 lives only on rank 0, vertex 2 only on rank 1.
    """
    nodes = {0: [0, 1, 3], 1: [0, 2, 3]}[rank]
    root_part = {0: [0, 0, 1], 1: [0, 1, 1]}[rank]
    # (my local id, other part, other local id), sorted by (other part, vertex id).
    links = {0: [[0, 1, 0], [2, 1, 2]], 1: [[0, 0, 0], [2, 0, 2]]}[rank]
    part = Part(
        rank,
        2,
        "vertex_cut",
        {
            "nodes": np.array(nodes),
            "root_part": np.array(root_part),
            "clone_links": np.array(links),
        },
        {},
    )
    comm = Communicator()
    tree = CloneTree(part, rank, world, bins)
    drpa = DelayedRemoteAggregates(tree, comm, PhaseTimer(), delay, bins, backward)
    out = []
    for epoch in range(epochs):
        drpa.begin_epoch(epoch)
        # Values that say who sent them and when: 1000 * (rank + 1) + 10 * epoch + local id.
        p = torch.tensor([[1000.0 * (rank + 1) + 10 * epoch + i] for i in range(3)])
        p.requires_grad_(True)
        y = drpa(p * 1)  # the completion adds in place: it takes a fresh sum, as aggregate() gives
        g = torch.tensor([[-(1000.0 * (rank + 1) + 10 * epoch + i)] for i in range(3)])
        y.backward(g)
        drpa.end_epoch()
        out.append({"y": y.detach().reshape(-1).tolist(), "grad": p.grad.reshape(-1).tolist()})
    return out


def drpa_on_three_clone_tree(rank: int, world: int, cases: list, epochs: int) -> list:
    """DRPA on three ranks whose only split vertex, 0, has a clone on each (its root on rank 1);
    vertex 10 + r lives only on rank r. Per (delay, bins[, semantics]) case and epoch, the outputs and the
    input gradients (backward `delayed`), the phase of every exchange in flight after the
    epoch and the share of communication hidden."""
    part = Part(
        rank,
        3,
        "vertex_cut",
        {
            "nodes": np.array([0, 10 + rank]),
            "root_part": np.array([1, rank]),
            # (my local id, other part, other local id): a leaf links to its root, the root
            # to each leaf.
            "clone_links": np.array([[0, 0, 0], [0, 2, 0]] if rank == 1 else [[0, 1, 0]]),
        },
        {},
    )
    comm = Communicator()
    results = []
    for delay, bins, *semantics in cases:
        tree = CloneTree(part, rank, world, bins)
        drpa = DelayedRemoteAggregates(
            tree, comm, PhaseTimer(), delay, bins, "delayed", semantics=(semantics or ["fresh"])[0]
        )
        out = []
        for epoch in range(epochs):
            drpa.begin_epoch(epoch)
            p = torch.tensor([[1000.0 * (rank + 1) + 10 * epoch + i] for i in range(2)])
            p.requires_grad_(True)
            y = drpa(p * 1)
            y.backward(-p.detach())
            stats = drpa.end_epoch()
            # After the epoch: (epoch started, phase) of every exchange still in flight.
            phases = [
                (e.epoch, 1 if e.in_phase1 else 2)
                for slot in drpa._slots.values()
                for e in slot.in_flight
            ]
            out.append(
                {
                    "y": y.detach().reshape(-1).tolist(),
                    "grad": p.grad.reshape(-1).tolist(),
                    "phases": phases,
                    **stats,
                }
            )
        results.append(out)
    return results


def drpa_cases_on_hand_built_tree(rank: int, world: int, cases: list, epochs: int) -> list:
    """drpa_on_hand_built_tree for each (delay, bins, backward) case, one after another."""
    return [
        drpa_on_hand_built_tree(rank, world, delay, bins, epochs, backward)
        for delay, bins, backward in cases
    ]


def zero_comm_loss_and_parts_alone(rank: int, world: int, cfgs: list) -> list[tuple[float, float]]:
    """Per config: zero_comm's first training loss, and the loss of the same model run on
    every part's edges as a graph of its own (local degrees), summed over ranks."""
    out = []
    for cfg in cfgs:
        comm, algorithm, model, optimizer = algorithm_and_model(cfg)
        graph = algorithm.graph
        alone = Block(graph.indptr, graph.indices, graph.num_src)  # no completion, own degrees
        model.train()  # dropout is off in these configs
        logits = model([alone] * len(model.layers), algorithm.x)
        ids, weights = algorithm.train_ids, algorithm.train_weights
        mine = (
            F.cross_entropy(logits[ids], algorithm.label[ids], reduction="none") * weights
        ).sum()
        alone_loss = comm.all_reduce_sum(mine.detach().reshape(1).double()) / algorithm.num_train
        stats = train_epoch(algorithm, model, optimizer, 0)
        out.append((stats["loss"], float(alone_loss)))
    return out


def distgnn_trajectories(rank: int, world: int, cfgs: list, epochs: int) -> list[dict]:
    """distgnn_trajectory for several configs in one launch (same ranks and partition)."""
    return [distgnn_trajectory(rank, world, cfg, epochs) for cfg in cfgs]


def hec_trace(rank: int, world: int, cfg, epochs: int) -> dict:
    """Train `hec` with dropout off; every layer's sources and every push, load and miss of
    this rank, per-epoch stats, and its part: solid vertices with their degrees, halo
    vertices with their owners."""
    comm, algorithm, model, optimizer = algorithm_and_model(cfg)
    algorithm.trace = []
    epochs_out = []
    for epoch in range(epochs):
        comm.bytes.reset()
        stats = train_epoch(algorithm, model, optimizer, epoch)
        epochs_out.append({**stats, "bytes": comm.bytes.reset()})
    part = algorithm.part
    nodes = np.asarray(part["nodes"], dtype=np.int64)
    return {
        "trace": algorithm.trace,
        "epochs": epochs_out,
        "solid": nodes[: part.num_solid],
        "degree": np.diff(np.asarray(part["indptr"], dtype=np.int64))[: part.num_solid],
        "halos": nodes[part.num_solid :],
        "halo_owner": np.asarray(part["halo_owner"], dtype=np.int64),
        "widths": [algorithm.in_dim] + [cfg.model.hidden] * (cfg.model.layers - 1),
    }


def hec_with_a_layer_unbudgeted(rank: int, world: int, cfg, layer: int) -> dict:
    """One epoch of `hec` whose push budget at `layer` is 0 both ways (as when no rank
    looked up another's vertices there): what was pushed per layer, and the loss."""
    comm, algorithm, model, optimizer = algorithm_and_model(cfg)
    algorithm.send_budget[layer] = 0
    algorithm.receive_budget[layer] = 0
    algorithm.trace = []
    stats = train_epoch(algorithm, model, optimizer, 0)
    pushed = [0] * cfg.model.layers
    for kind, _, at, peer, ids, _ in algorithm.trace:
        if kind == "push" and peer != rank:
            pushed[at] += len(ids)
    return {"pushed": pushed, "loss": stats["loss"]}


def hec_traces(rank: int, world: int, runs: list) -> list[dict]:
    """hec_trace of each (config, epochs), one after another in one launch."""
    return [hec_trace(rank, world, cfg, epochs) for cfg, epochs in runs]


def hec_local_only_logits(rank: int, world: int, cfg) -> dict:
    """With cache size 0, `hec`'s forward equals the model on its local minibatch with
    every edge from a halo vertex removed (removed here, independently of the algorithm)."""
    from gnnrun.algorithms.minibatch.hec import HistoricalEmbeddingCacheTraining
    from gnnrun.ops.block import Block

    comm = Communicator()
    algorithm = HistoricalEmbeddingCacheTraining(cfg, comm, PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes).eval()
    seeds = algorithm.train_ids[:64]
    blocks, x = make_minibatch(algorithm.training_source(), seeds, cfg.algorithm.fanouts, 777)
    owner = algorithm.source.owner
    local_blocks, halo_edges = [], 0
    for block in blocks:
        rows = [[] for _ in range(block.num_dst)]
        for dst in range(block.num_dst):
            for e in range(int(block.indptr[dst]), int(block.indptr[dst + 1])):
                src = int(block.indices[e])
                if int(owner[block.src_ids[src]]) == rank:
                    rows[dst].append(src)
                else:
                    halo_edges += 1
        indptr = torch.tensor([0] + np.cumsum([len(r) for r in rows]).tolist(), dtype=torch.int64)
        indices = torch.tensor([i for r in rows for i in r], dtype=torch.int64)
        local_blocks.append(Block(indptr, indices, block.num_src, block.src_ids))
    with torch.no_grad():
        expected = model(local_blocks, x)
        got = algorithm.forward(model, blocks, x, epoch=0, step=0, steps=1)
    return {
        "max_error": float((got - expected).abs().max()),
        "halo_edges": halo_edges,
        "sent": comm.bytes.sent.get("hec_push", 0),
    }
