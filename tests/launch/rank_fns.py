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


def check_config(
    rank: int, world: int, overrides_by_rank: list[list[str]], jobs: list[str] | None = None
) -> None:
    """Compose the config the CLI would from this rank's overrides and compare it, and the
    rank's job (`jobs`, else train), across ranks."""
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.launch.rank import check_same_config
    from gnnrun.schemas import register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=overrides_by_rank[rank]))
    check_same_config(cfg, jobs[rank] if jobs else "train")


def environment_and_parent(rank: int, world: int, names: list[str]) -> tuple[dict, int]:
    """The rank's values of the variables `names` (None where unset), and its parent's pid."""
    return {name: os.environ.get(name) for name in names}, os.getppid()


def say(rank: int, world: int, text: str) -> None:
    # One write of the whole line: print's two (text, then newline) interleave with the
    # other rank's.
    os.write(1, f"{text} from rank {rank}\n".encode())
