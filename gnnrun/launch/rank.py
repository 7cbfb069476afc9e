"""One rank's set-up, the same under every launcher: backend, CPUs and threads, device,
process group; then training, with every rank leaving together.

The elastic launcher (`launch.elastic`, through `launch.worker.rank_main`) and SLURM
(`launch.slurm.run_slurm_rank`) differ only in where rank, world size and the
rendezvous come from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import ipaddress
import json
import os
import socket
import struct
from collections.abc import Callable, Iterator
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
        check_same_config(cfg)
        with watching(dist.get_rank(), dist.get_world_size()):
            yield
    finally:
        dist.destroy_process_group()


def in_gloo_group(fn: Callable[..., Any], timeout_s: int, args: tuple) -> Any:
    """fn(rank, world_size, *args) in a gloo process group joined from the environment the
    elastic launcher sets (gnnrun.testing's ranks), leaving it at the end."""
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def body() -> Any:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
        try:
            return fn(dist.get_rank(), dist.get_world_size(), *args)
        finally:
            dist.destroy_process_group()

    return body()


# Settings that may differ between the ranks of one run: a host's own place and CPUs,
# and where files are (a shared file system may be mounted elsewhere on each host).
PER_HOST_KEYS = frozenset({"cluster.node_rank", "cluster.threads_per_rank", "cluster.comm_cores"})
_LOCATION_NAMES = frozenset({"path", "file", "root", "raw_dir"})
_LOCATION_SUFFIXES = ("_dir", "_root", "_path")


def is_per_host_key(key: str) -> bool:
    """Whether `key` (dotted) may differ between the ranks of one run."""
    last = key.rsplit(".", 1)[-1]
    return (
        key in PER_HOST_KEYS
        or key.startswith("paths.")
        or last in _LOCATION_NAMES
        or last.endswith(_LOCATION_SUFFIXES)
    )


def comparable_config(cfg) -> dict[str, str]:
    """The resolved config flattened to dotted keys (values as JSON), per-host keys left out."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif not is_per_host_key(prefix):
            flat[prefix] = json.dumps(value, sort_keys=True, default=str)

    walk("", dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg))
    return flat


def check_same_config(cfg) -> None:
    """Refuse, on every rank, ranks started with different settings (say, one host given
    optimizer.lr and the other not): they would train apart without a word. Each rank
    gathers every rank's config hash, and the flattened configs where the hashes differ."""
    world = dist.get_world_size()
    if world == 1:
        return
    flat = comparable_config(cfg)
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()
    digests: list[Any] = [None] * world
    dist.all_gather_object(digests, digest)
    if len(set(digests)) == 1:
        return
    configs: list[Any] = [None] * world
    dist.all_gather_object(configs, flat)
    raise GnnrunError(config_mismatch(configs))


def config_mismatch(configs: list[dict[str, str]], shown: int = 5) -> str:
    """The one-line refusal naming the keys on which the ranks' `configs` differ."""
    every_key = {key for config in configs for key in config}
    keys = sorted(k for k in every_key if len({c.get(k) for c in configs}) > 1)

    def values(key: str) -> str:
        by_value: dict[str, list[int]] = {}
        for rank, config in enumerate(configs):
            by_value.setdefault(config.get(key, "(unset)"), []).append(rank)
        return "; ".join(
            f"{'ranks' if len(r) > 1 else 'rank'} {','.join(map(str, r))}: "
            + (v if len(v) <= 60 else v[:57] + "...")
            for v, r in by_value.items()
        )

    listed = ", ".join(f"{key} ({values(key)})" for key in keys[:shown])
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return (
        f"the ranks were started with different settings: {listed}{more}; start every host "
        "(or SLURM task) with the same command and overrides, only cluster.node_rank and "
        "paths differing"
    )


def infer_rank(cfg, rank: int, plan) -> dict[str, Any]:
    """Layer-wise inference (gnnrun.infer) in the process group this rank has joined;
    every rank returns its own figures."""
    from gnnrun.infer.run import infer_on_rank

    figures = infer_on_rank(cfg, plan)
    dist.barrier()
    return figures


def partition_rank(cfg, rank: int, tmp_dir: str) -> dict[str, Any]:
    """This rank's parts of a partition of chunked input (gnnrun.partition.distributed)."""
    from gnnrun.partition.distributed import partition_on_rank

    return partition_on_rank(cfg, rank, tmp_dir)


def prepare_rank(cfg, rank: int, tmp_dir: str) -> dict[str, Any]:
    """This rank's rows of a prepared dataset from chunked input (gnnrun.data.prepare_ranks)."""
    from gnnrun.data.prepare_ranks import prepare_on_rank

    return prepare_on_rank(cfg, rank, tmp_dir)


def train_rank(cfg, rank: int, run_dir: str | Path) -> dict[str, Any] | None:
    """Train in the process group this rank has joined; rank 0 shows progress and
    returns the summary. Every rank leaves together (a barrier)."""
    from gnnrun.tracking import make_tracker
    from gnnrun.train.trainer import train

    tracker = make_tracker(cfg, Path(run_dir), rank, dist.get_world_size())
    if rank != 0:
        summary = train(cfg, Path(run_dir), tracker=tracker)
    else:
        from gnnrun.train.display import TrainingDisplay

        with TrainingDisplay(cfg) as display:
            summary = train(cfg, Path(run_dir), display, tracker)
    dist.barrier()
    return summary
