"""What the spmm1d tests run on each real rank (imported by name there)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from gnnrun.train.trainer import train_epoch

# rank_checks lies in the folder above, which the ranks do not have on their path.
sys.path.insert(0, str(Path(__file__).parents[1]))
from rank_checks import algorithm_and_model  # noqa: E402


def spmm1d_trajectory(rank: int, world: int, cfg, epochs: int) -> dict:
    """Train `epochs` epochs; per epoch the loss, summed gradients, bytes, the algorithm's
    figures and the staged product's events (issues, products, each product's purpose); then the logits of this rank's rows and their original ids."""
    comm, algorithm, model, optimizer = algorithm_and_model(cfg)
    out = []
    for epoch in range(epochs):
        comm.bytes.reset()
        algorithm.product.events = []
        stats = train_epoch(algorithm, model, optimizer, epoch)
        out.append(
            {
                "loss": stats["loss"],
                "grads": [p.grad.clone() for p in model.parameters()],
                "bytes": comm.bytes.reset(),
                "stats": stats,
                "events": list(algorithm.product.events),
            }
        )
    model.eval()
    with torch.no_grad():
        logits = algorithm.logits(model).clone()
    return {"epochs": out, "nodes": algorithm.nodes, "logits": logits, "rows": algorithm.rows}


def spmm1d_trajectories(rank: int, world: int, cfgs: list, epochs: int) -> list[dict]:
    """spmm1d_trajectory for several configs in one launch."""
    return [spmm1d_trajectory(rank, world, cfg, epochs) for cfg in cfgs]


def spmm1d_on_gpu(rank: int, world: int, cfg, epochs: int) -> dict:
    """spmm1d_trajectory on this rank's GPU."""
    torch.cuda.set_device(rank % torch.cuda.device_count())
    return spmm1d_trajectory(rank, world, cfg, epochs)
