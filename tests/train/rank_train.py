"""What the accuracy tests run on each real rank (imported by name there)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from gnnrun.launch.rank import rank_cpus
from gnnrun.train.trainer import train


def train_each_config(rank: int, world: int, configs: list, run_root: str) -> list[dict | None]:
    """`gnnrun.train.trainer.train` once per config, all in this one process group.

    Ranks are pinned and threaded as `gnnrun train` pins them
    (gnnrun/launch/worker.py). Rank 0 returns each run's summary.
    """
    cpus, threads = rank_cpus(rank, world, 0, 0)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    summaries = []
    for i, cfg in enumerate(configs):
        run_dir = Path(run_root) / f"run{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        summaries.append(train(cfg, run_dir))
    return summaries
