"""Functions that the launch tests run on real ranks (imported by name in each rank)."""

from __future__ import annotations

import os
import signal

import torch
import torch.distributed as dist


def sum_of_ranks(rank: int, world: int) -> int:
    value = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(value)
    return int(value.item())


def raise_on_rank(rank: int, world: int, bad: int) -> None:
    if rank == bad:
        raise ValueError(f"boom from rank {rank}")
    dist.barrier()  # the others wait for a rank that never comes


def kill_on_rank(rank: int, world: int, bad: int) -> None:
    if rank == bad:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
