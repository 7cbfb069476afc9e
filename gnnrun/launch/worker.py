"""What each rank runs: pin CPUs and threads, join the process group, train, leave."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from gnnrun.launch.local import collective_timeout, rank_cpus


@record  # writes the exception to the error file the launcher reads, for its message
def rank_main(cfg, run_dir: str, backend: str):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Ctrl-C reaches a rank twice: from the terminal and forwarded by the agent.
    # The second must not interrupt the first one's cleanup with a traceback.
    signal.signal(signal.SIGINT, _interrupt_once)
    cpus, threads = rank_cpus(rank, world, cfg.cluster.threads_per_rank, cfg.cluster.comm_cores)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    dist.init_process_group(backend, timeout=collective_timeout(cfg))
    try:
        return train_rank(cfg, run_dir, rank)
    finally:
        dist.destroy_process_group()


def train_rank(cfg, run_dir: str | Path, rank: int):
    """Train in the process group this rank has joined; rank 0 shows progress and
    returns the summary. Every rank leaves together (a barrier)."""
    from gnnrun.train.trainer import train

    if rank != 0:
        summary = train(cfg, Path(run_dir))
    else:
        from gnnrun.train.display import TrainingDisplay

        with TrainingDisplay(cfg) as display:
            summary = train(cfg, Path(run_dir), display)
    dist.barrier()
    return summary


def _interrupt_once(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt
