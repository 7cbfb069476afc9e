"""What the sar / domain_parallel tests run on each real rank (imported by name there)."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.algorithms import ALGORITHMS
from gnnrun.algorithms.single import Single
from gnnrun.comm import Communicator
from gnnrun.models import build_model
from gnnrun.timers import PhaseTimer
from gnnrun.train.trainer import train_epoch

LR = 0.01


def _model_and_optimizer(cfg, algorithm):
    torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank
    model = build_model(cfg.model, algorithm.in_dim, algorithm.num_classes)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def _epochs(algorithm, model, optimizer, comm, epochs: int) -> list[dict]:
    out = []
    for epoch in range(epochs):
        comm.bytes.reset()
        stats = train_epoch(algorithm, model, optimizer, epoch)
        out.append(
            {
                **stats,
                "grads": [p.grad.clone() for p in model.parameters()],
                "bytes": comm.bytes.reset(),
            }
        )
    return out


def sharded_trajectory(
    rank: int, world: int, cfg, epochs: int, no_training_on: int | None = None
) -> dict:
    """Train `cfg.algorithm` (sar or domain_parallel) `epochs` epochs: per epoch its stats,
    summed-loss share and this rank's gradients; then this rank's logits and vertex ids.
    `no_training_on`: a rank whose training vertices are taken away (the loss is then
    divided by the other ranks' training vertices)."""
    comm = Communicator()
    algorithm = ALGORITHMS.get(cfg.algorithm.name)(cfg, comm, PhaseTimer())
    if no_training_on is not None:
        if rank == no_training_on:
            algorithm.train_ids = algorithm.train_ids[:0]
        remaining = comm.all_reduce_sum(torch.tensor([algorithm.train_ids.numel()]))
        algorithm.num_train = int(remaining)
    model, optimizer = _model_and_optimizer(cfg, algorithm)
    trajectory = _epochs(algorithm, model, optimizer, comm, epochs)
    model.eval()
    with torch.no_grad():
        logits = algorithm.logits(model)
    evaluated = algorithm.evaluate(model)
    part = algorithm.graph.num_dst
    nodes = _solid_nodes(cfg, rank, part)
    return {
        "epochs": trajectory,
        "logits": logits,
        "nodes": nodes,
        "train_nodes": nodes[algorithm.train_ids],
        "val": evaluated["val"],
    }


def sharded_trajectories(
    rank: int, world: int, cfgs: list, epochs: int, no_training_on: int | None = None
) -> list[dict]:
    """sharded_trajectory for several configs in one launch (same ranks)."""
    # More ranks than cores: one thread each, or OpenMP's spinning threads crowd the peers.
    torch.set_num_threads(1)
    return [sharded_trajectory(rank, world, cfg, epochs, no_training_on) for cfg in cfgs]


def _solid_nodes(cfg, rank: int, num_solid: int) -> torch.Tensor:
    from gnnrun.algorithms import open_own_part

    _, book = open_own_part(cfg, Communicator(), "edge_cut")
    nodes = np.asarray(book.load_part(rank)["nodes"][:num_solid], dtype=np.int64)
    return torch.from_numpy(nodes)


def single_trajectory(cfg, epochs: int, train_nodes: torch.Tensor | None = None) -> dict:
    """`single` full batch in this process, the oracle; `train_nodes` replaces its
    training vertices."""
    algorithm = Single(cfg, Communicator(), PhaseTimer())
    if train_nodes is not None:
        algorithm.train_ids = train_nodes
    model, optimizer = _model_and_optimizer(cfg, algorithm)
    trajectory = _epochs(algorithm, model, optimizer, Communicator(), epochs)
    model.eval()
    with torch.no_grad():
        logits = algorithm.full_logits(model)
    return {"epochs": trajectory, "logits": logits}
