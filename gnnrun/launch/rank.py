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


@contextlib.contextmanager
def own_process_threads(cluster) -> Iterator[None]:
    """A job that runs in gnnrun's own process (a one-process algorithm: `single`) takes
    `cluster.threads_per_rank` threads, as a rank does (0: torch's default, the machine's
    cores); the caller's count comes back afterwards."""
    before = torch.get_num_threads()
    if cluster.threads_per_rank:
        torch.set_num_threads(cluster.threads_per_rank)
    try:
        yield
    finally:
        if cluster.threads_per_rank:
            torch.set_num_threads(before)


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
    cfg, backend: str, local_rank: int, cpus: list[int], threads: int, job: str, **init: Any
) -> Iterator[None]:
    """Pin this rank, pick its device, join the process group (`init`: how) of ranks that
    all run `job` with the same settings, leave at the end."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    if cfg.cluster.device == "cuda":  # one GPU per rank (ranks share them only under gloo)
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if "gloo" in backend:
        choose_gloo_interface()
    dist.init_process_group(backend, timeout=collective_timeout(cfg), **init)
    try:
        check_same_config(cfg, job)
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


def check_same_config(cfg, job: str) -> None:
    """Refuse, on every rank, ranks started with different settings (say, one host given
    optimizer.lr and the other not): they would train apart without a word; or by
    different commands (`job`: one host's `gnnrun partition` meeting another's `gnnrun
    train`), whose collectives would wait for each other until the timeout. Each rank
    gathers every rank's config hash, and the flattened configs where the hashes differ."""
    world = dist.get_world_size()
    if world == 1:
        return
    flat = comparable_config(cfg) | {"command": job}
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


def infer_rank(cfg, rank: int, plan) -> list[dict[str, Any]]:
    """Layer-wise inference (gnnrun.infer) in the process group this rank has joined, with
    the plan of the process that prepared it (node 0's launcher, or SLURM task 0: the other
    hosts' ranks are given None); every rank's figures, in rank order, on every rank."""
    from gnnrun.infer.run import infer_on_rank

    announced = [plan]
    dist.broadcast_object_list(announced, src=0)
    plan = announced[0]
    if not Path(plan.work_dir).is_dir():
        raise GnnrunError(
            f"{plan.work_dir} (made by node 0, SLURM task 0) is not here: every host must see "
            "the run's directory and the inference's output on storage the hosts share, at the "
            "same path"
        )
    figures = infer_on_rank(cfg, plan)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, figures)
    return every


def in_announced_dir(
    fn: Callable[[Any, int, str], Any], cfg, rank: int, output: Path, tmp_dir: str | None
) -> list[Any] | None:
    """fn(cfg, rank, tmp) in the temporary directory node 0's launcher made beside
    `output` (this rank's own path to the output, on storage every host shares); every
    rank's result, in rank order, on every rank, or None where there was nothing to do.

    Under cluster=hosts and cluster=slurm only node 0's launcher (SLURM task 0) takes the
    writer lock and makes the directory, so only rank 0 is given it (`tmp_dir`; the
    other hosts' ranks None): rank 0 announces its name over the process group and each
    rank finds it beside its own `output` (the shared storage may be mounted elsewhere
    on each host). Rank 0 announces None when node 0 found nothing to do (a current
    copy), and every rank leaves. The results are gathered so that node 0's launcher,
    which writes the manifest, has the other hosts' ranks' too.
    """
    announced = [Path(tmp_dir).name if tmp_dir is not None else None]
    dist.broadcast_object_list(announced, src=0)
    if announced[0] is None:
        return None
    if announced[0] != Path(announced[0]).name or not announced[0].startswith(output.name):
        raise GnnrunError(f"rank 0 announced an unexpected directory {announced[0]!r}")
    tmp = output.absolute().parent / announced[0]
    if not tmp.is_dir():
        raise GnnrunError(
            f"{tmp} (made by node 0) is not here: every host must see {output.parent} on "
            "storage the hosts share, with the same contents"
        )
    result = fn(cfg, rank, str(tmp))
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, result)
    return every


def partition_rank(cfg, rank: int, tmp_dir: str | None) -> list[dict[str, Any]] | None:
    """This rank's parts of a partition of chunked input (gnnrun.partition.distributed);
    every rank's figures (`in_announced_dir`)."""
    from gnnrun.partition.distributed import partition_on_rank

    output = Path(cfg.partitioner.output_dir)
    return in_announced_dir(partition_on_rank, cfg, rank, output, tmp_dir)


def prepare_rank(cfg, rank: int, tmp_dir: str | None) -> list[dict[str, Any]] | None:
    """This rank's rows of a prepared dataset from chunked input (gnnrun.data.prepare_ranks);
    every rank's figures (`in_announced_dir`)."""
    from gnnrun.data.prepare_ranks import prepare_on_rank

    output = Path(cfg.dataset.prepared_dir)
    return in_announced_dir(prepare_on_rank, cfg, rank, output, tmp_dir)


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
