"""One rank's set-up, the same under every launcher: backend, CPUs and threads, device,
process group; then training, with every rank leaving together.

The elastic launcher (`launch.elastic`, through `launch.worker.rank_main`) and SLURM
(`launch.slurm.run_slurm_rank`) differ only in where rank, world size and the
rendezvous come from.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gnnrun.errors import GnnrunError
from gnnrun.launch.backends import CCL_INSTALL_HINT
from gnnrun.launch.topology import read_topology
from gnnrun.launch.watchdog import local_address, watching

# GPU ranks: NCCL for CUDA tensors, gloo for the few CPU ones (losses, metrics).
GPU_BACKEND = "cpu:gloo,cuda:nccl"


def choose_backend(requested: str, device: str = "cpu") -> str:
    """auto: gloo for CPU ranks, NCCL beside gloo for GPU ranks (cluster.device=cuda).
    ccl only when asked for and importable."""
    if requested == "auto" or (requested == "nccl" and device == "cuda"):
        return GPU_BACKEND if device == "cuda" and torch.cuda.is_available() else "gloo"
    if requested == "ccl":
        try:
            import oneccl_bindings_for_pytorch  # noqa: F401
        except ImportError:
            raise GnnrunError(
                f"cluster.backend=ccl: oneCCL bindings are not installed; {CCL_INSTALL_HINT}"
            ) from None
    if requested == "nccl" and not torch.cuda.is_available():
        raise GnnrunError(
            "cluster.backend=nccl needs CUDA devices; use cluster.backend=gloo on CPU"
        )
    return requested


def rank_cpus(
    rank: int, nprocs: int, threads_per_rank: int, comm_cores: int
) -> tuple[list[int], int]:
    """The CPUs rank `rank` is pinned to and its compute thread count.

    CPUs are handed out socket by socket, so with one rank per socket each rank
    gets its socket. `comm_cores` of each rank's CPUs are left out of the compute
    threads for the communication library, as DistGNN does.
    """
    cpus = [c for socket_cpus in read_topology().sockets.values() for c in socket_cpus]
    share = max(1, len(cpus) // nprocs)
    mine = [cpus[(rank * share + i) % len(cpus)] for i in range(share)]
    threads = threads_per_rank or max(1, share - comm_cores)
    return mine, threads


def choose_gloo_interface() -> None:
    """Let gloo listen on the interface that reaches node 0 (MASTER_ADDR), unless the user
    named one (GLOO_SOCKET_IFNAME). Left alone, gloo takes the address its host name
    resolves to, often a loopback one, which ranks on other hosts cannot reach."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if "GLOO_SOCKET_IFNAME" in os.environ or ipaddress_is_loopback(master):
        return
    address = local_address(master, int(os.environ.get("MASTER_PORT", "0")))
    for _, name in socket.if_nameindex():
        if interface_address(name) == address:
            os.environ["GLOO_SOCKET_IFNAME"] = name
            return


def ipaddress_is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface `name` (SIOCGIFADDR), None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def collective_timeout(cfg) -> timedelta:
    return timedelta(seconds=cfg.cluster.timeout_s)


@contextlib.contextmanager
def process_group(
    cfg, backend: str, local_rank: int, cpus: list[int], threads: int, **init: Any
) -> Iterator[None]:
    """Pin this rank, pick its device, join the process group (`init`: how), leave at the end."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    if cfg.cluster.device == "cuda":  # one GPU per rank (ranks share them only under gloo)
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if "gloo" in backend:
        choose_gloo_interface()
    dist.init_process_group(backend, timeout=collective_timeout(cfg), **init)
    try:
        with watching(dist.get_rank(), dist.get_world_size()):
            yield
    finally:
        dist.destroy_process_group()


def infer_rank(cfg, rank: int, plan) -> dict[str, Any]:
    """Layer-wise inference (gnnrun.infer) in the process group this rank has joined;
    every rank returns its own figures."""
    from gnnrun.infer.run import infer_on_rank

    figures = infer_on_rank(cfg, plan)
    dist.barrier()
    return figures


def train_rank(cfg, rank: int, run_dir: str | Path) -> dict[str, Any] | None:
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
