"""cluster=slurm inside a job: every SLURM task is one rank.

SLURM's environment gives the rendezvous, with no ssh and no ip_config file:
rank = SLURM_PROCID, world size = SLURM_NTASKS, local rank = SLURM_LOCALID,
the master is the first host of the step's node list (SLURM_STEP_NODELIST,
else SLURM_JOB_NODELIST, else SLURM_NODELIST: with SLURM's block distribution
rank 0 runs there) and the port is derived from the job id, so that every task
computes the same address without talking to the others. Host lists are
expanded here (`node[01-04]`, `a1,b[2-3,7]`, `n[1-2]-ib`, several ranges in
one name); `scontrol show hostnames` is only a fallback for syntax this parser
does not know.

`run_slurm_rank` is what `gnnrun train cluster=slurm` runs in each task: join
the process group (env://), let rank 0 prepare the dataset and partition while
the others wait, train, leave. `run_slurm_inference` does the same for `gnnrun
predict|embed` (rank 0 prepares the work directory, every rank infers), and
`run_slurm_job` runs the rank jobs of `gnnrun data prepare` and `partition`.

Near its time limit SLURM sends the job SIGUSR2 (sbatch --signal=USR2@<cluster.
signal_delay_s>, which submitit asks for; a site may send it ahead of preemption,
and `scancel --signal=USR2 JOBID` does it by hand). gnnrun takes the signal over from
submitit, whose handler would requeue at once and lose the epochs since the last
checkpoint: the ranks finish the epoch, checkpoint, and rank 0 requeues the job
(`scontrol requeue`, at most cluster.max_requeues times). The requeued job runs the
same task again; SLURM_RESTART_COUNT tells it to resume from this job's checkpoint
(gnnrun.attempt).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gnnrun.errors import GnnrunError

PORT_BASE = 15000  # rendezvous ports lie in [PORT_BASE, PORT_BASE + PORT_SPAN)
PORT_SPAN = 15000  # below Linux's ephemeral range (32768-60999)
NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
# How long ranks wait for rank 0 to prepare the dataset and partition. Generous:
# partitioning a large graph takes minutes; the job's time limit bounds it anyway.
PREPARE_TIMEOUT = timedelta(hours=12)


# ------------------------------------------------------------------ host lists


def expand_hostlist(hostlist: str) -> list[str]:
    """`a1,b[2-3,7],n[01-02]-ib` -> a1, b2, b3, b7, n01-ib, n02-ib (SLURM's order).

    Zero padding follows the range's lower bound (`[08-10]` -> 08, 09, 10).
    Raises ValueError on syntax it does not understand.
    """
    text = hostlist.strip()
    if not text:
        raise ValueError("empty host list")
    hosts: list[str] = []
    for item in _split_top_level(text):
        if not item:
            raise ValueError(f"empty host name in {hostlist!r}")
        hosts.extend(_expand_host(item, hostlist))
    return hosts


def _split_top_level(text: str) -> list[str]:
    """Split at the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested brackets in {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced '[' in {text!r}")
    items.append(text[start:].strip())
    return items


def _expand_host(pattern: str, hostlist: str) -> list[str]:
    """One host pattern, any number of bracket groups: their cartesian product."""
    open_at = pattern.find("[")
    if open_at < 0:
        if "]" in pattern:
            raise ValueError(f"unbalanced ']' in {hostlist!r}")
        return [pattern]
    close_at = pattern.index("]", open_at)
    prefix, body, rest = pattern[:open_at], pattern[open_at + 1 : close_at], pattern[close_at + 1 :]
    tails = _expand_host(rest, hostlist)
    return [prefix + number + tail for number in _expand_ranges(body, hostlist) for tail in tails]


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_ranges(body: str, hostlist: str) -> list[str]:
    numbers: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise ValueError(f"cannot read the range {part!r} in {hostlist!r}")
        low, high = match.group(1), match.group(2)
        if high is None:
            numbers.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"descending range {part!r} in {hostlist!r}")
        width = len(low) if low.startswith("0") else 0
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return numbers


def hostnames(hostlist: str) -> list[str]:
    """expand_hostlist, falling back to `scontrol show hostnames` for syntax it does not know."""
    try:
        return expand_hostlist(hostlist)
    except ValueError as exc:
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            raise GnnrunError(f"cannot expand the SLURM node list {hostlist!r}: {exc}") from None
        done = subprocess.run(
            [scontrol, "show", "hostnames", hostlist], capture_output=True, text=True, timeout=30
        )
        hosts = done.stdout.split()
        if done.returncode != 0 or not hosts:
            raise GnnrunError(
                f"cannot expand the SLURM node list {hostlist!r}: {exc}; "
                f"scontrol said: {done.stderr.strip() or 'nothing'}"
            ) from None
        return hosts


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE `2(x3),1` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise ValueError(f"cannot read tasks per node {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


# ------------------------------------------------------------------ rendezvous


@dataclass(frozen=True)
class SlurmRendezvous:
    """Where this task stands in the job, and where every task meets."""

    job_id: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nodes: tuple[str, ...]
    master_addr: str
    master_port: int

    def env(self) -> dict[str, str]:
        """The variables torch.distributed's env:// rendezvous reads (and torchrun sets)."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node_rank),
        }


def port_for_job(job_id: str | int) -> int:
    """The rendezvous port of a job: the same in every task, different for neighbouring ids."""
    digits = re.match(r"\d+", str(job_id))
    if digits is None:
        raise GnnrunError(f"SLURM_JOB_ID {job_id!r} is not a number")
    return PORT_BASE + int(digits.group()) % PORT_SPAN


def in_slurm_step(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a task of a SLURM job step (started by srun), not a batch script."""
    env = os.environ if env is None else env
    return "SLURM_STEP_ID" in env and "SLURM_PROCID" in env and "SLURM_JOB_ID" in env


def rendezvous_from_env(
    env: Mapping[str, str] | None = None, master_port: int = 0
) -> SlurmRendezvous:
    """Read this task's place in the job from SLURM's variables (`master_port` 0: from the job id)."""
    env = os.environ if env is None else env
    nodelist_var = next((name for name in NODELIST_VARS if env.get(name)), None)
    required = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
    missing = [name for name in required if not env.get(name)]
    if nodelist_var is None:
        missing.append("SLURM_JOB_NODELIST (or SLURM_NODELIST)")
    if missing:
        raise GnnrunError(
            f"cluster=slurm: not inside a SLURM job step ({', '.join(missing)} not set). "
            "Ranks are the tasks srun starts in a job: run `gnnrun train cluster=slurm ...` "
            "where sbatch works and gnnrun submits the job, or start it with srun inside an "
            "allocation (srun -n WORLD gnnrun train cluster=slurm ...)"
        )
    rank = _int_var(env, "SLURM_PROCID")
    world = _int_var(env, "SLURM_NTASKS")
    local_rank = _int_var(env, "SLURM_LOCALID")
    node_rank = _int_var(env, "SLURM_NODEID") if env.get("SLURM_NODEID") else 0
    nodes = tuple(hostnames(env[nodelist_var]))
    local_world = _local_world_size(env, node_rank, world, len(nodes))
    if not 0 <= rank < world:
        raise GnnrunError(f"SLURM_PROCID={rank} lies outside SLURM_NTASKS={world}")
    if not 0 <= local_rank < local_world:
        raise GnnrunError(
            f"SLURM_LOCALID={local_rank} lies outside this node's {local_world} task(s)"
        )
    job_id = env["SLURM_JOB_ID"]
    return SlurmRendezvous(
        job_id=job_id,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=node_rank,
        nodes=nodes,
        master_addr=nodes[0],
        master_port=master_port or port_for_job(job_id),
    )


def _int_var(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise GnnrunError(f"{name}={env[name]!r} is not a number") from None


def _local_world_size(env: Mapping[str, str], node_rank: int, world: int, num_nodes: int) -> int:
    """Tasks on this node: the step's per-node counts, else the job's, else an even split."""
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if env.get(name):
            try:
                counts = expand_tasks_per_node(env[name])
            except ValueError as exc:
                raise GnnrunError(f"{name}: {exc}") from None
            if node_rank < len(counts):
                return counts[node_rank]
    if env.get("SLURM_NTASKS_PER_NODE"):
        return _int_var(env, "SLURM_NTASKS_PER_NODE")
    return max(1, world // max(1, num_nodes))


# ------------------------------------------------------------------ the rank


def slurm_rank_cpus(local_rank: int, local_world: int, cluster) -> tuple[list[int], int]:
    """CPUs and compute threads of this task.

    When SLURM (task/affinity, cgroups) or the user already confined the task
    to fewer CPUs than the node has, that set is the task's own; otherwise the
    node's CPUs are shared out among its tasks socket by socket, as for
    cluster=local.
    """
    from gnnrun.launch.rank import rank_cpus

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    node_cpus = os.cpu_count() or len(allowed)
    if allowed and len(allowed) < node_cpus:
        threads = cluster.threads_per_rank or max(1, len(allowed) - cluster.comm_cores)
        return allowed, threads
    return rank_cpus(local_rank, local_world, cluster.threads_per_rank, cluster.comm_cores)


READY = "ready"

# RANK_JOBS that run as the tasks of a job step, and the command that starts each.
STEP_COMMANDS = {"prepare": "gnnrun data prepare", "partition": "gnnrun partition"}


def _rendezvous(cfg) -> SlurmRendezvous:
    """This task's place, checked against the config, in the environment env:// reads."""
    rdzv = rendezvous_from_env(master_port=cfg.cluster.master_port)
    if rdzv.world_size != cfg.cluster.nprocs:
        raise GnnrunError(
            f"SLURM started {rdzv.world_size} task(s) but the config asks for "
            f"cluster.nprocs={cfg.cluster.nprocs} (cluster.nodes x cluster.tasks_per_node): "
            "start one task per rank"
        )
    os.environ.update(rdzv.env())
    return rdzv


def is_lead_task() -> bool:
    """Whether this SLURM task is rank 0 (the one that writes a job's shared output)."""
    return os.environ.get("SLURM_PROCID", "0") == "0"


def check_in_step(command: str, cfg, local_hint: str = "") -> None:
    """Refuse `command cluster=slurm` outside a job step: its tasks are its ranks."""
    if not in_slurm_step():
        raise GnnrunError(
            f"{command} cluster=slurm runs as the tasks of a job step, one per rank: start it "
            f"with srun inside an allocation (sbatch script or salloc), e.g. `srun -N NODES "
            f"-n {cfg.cluster.nprocs} {command} cluster=slurm cluster.nodes=NODES "
            f"cluster.tasks_per_node=T ...`; only gnnrun train submits its own job{local_hint}"
        )


@contextlib.contextmanager
def _task_process_group(cfg, job: str) -> Iterator[SlurmRendezvous]:
    """This task's rank in the job step's process group (env://), for `job`."""
    from gnnrun.launch.rank import choose_backend, process_group

    rdzv = _rendezvous(cfg)
    backend = choose_backend(cfg.cluster.backend, cfg.cluster.device)
    cpus, threads = slurm_rank_cpus(rdzv.local_rank, rdzv.local_world_size, cfg.cluster)
    init = {"init_method": "env://", "rank": rdzv.rank, "world_size": rdzv.world_size}
    with process_group(cfg, backend, rdzv.local_rank, cpus, threads, job, **init):
        yield rdzv


def _rank0_prepares(rank: int, prepare: Callable[[], Any] | None) -> Any:
    """Rank 0 runs `prepare` and returns what it returns, while the other ranks wait for
    it in a broadcast with a long timeout (PREPARE_TIMEOUT) and get None; if it fails,
    they stop with its message instead of going on without what it makes."""
    import torch.distributed as dist

    gate = dist.new_group(backend="gloo", timeout=PREPARE_TIMEOUT)
    status: list[Any] = [READY]
    prepared = None
    if rank == 0:
        assert prepare is not None
        try:
            prepared = prepare()
        except BaseException as exc:
            status = [f"{exc}" or type(exc).__name__]
            dist.broadcast_object_list(status, src=0, group=gate)
            raise
    dist.broadcast_object_list(status, src=0, group=gate)
    if status[0] != READY:
        raise GnnrunError(f"rank 0 could not prepare the run: {status[0]}")
    return prepared


def run_slurm_job(cfg, job: str, *args: Any) -> list[Any]:
    """Be one rank of `job` (gnnrun.launch.worker.RANK_JOBS: prepare, partition) as this
    task of a job step: `srun -n WORLD gnnrun partition cluster=slurm ...`, every task the
    same command. Returns this rank's result, as a list of one."""
    from gnnrun.launch.worker import RANK_JOBS

    check_in_step(STEP_COMMANDS.get(job, f"gnnrun {job}"), cfg)
    with _task_process_group(cfg, job) as rdzv:
        return [RANK_JOBS[job](cfg, rdzv.rank, *args)]


def run_slurm_inference(cfg, kind: str, prepare: Callable[[], Any] | None) -> tuple[Any, list[Any]]:
    """Be one rank of `srun ... gnnrun predict|embed cluster=slurm`: task 0 runs `prepare`
    (the checkpoint, dataset, partition and work directory; it returns the plan) while the
    others wait, then every rank computes its share. Returns (the plan on task 0, None on
    the others; every rank's figures)."""
    from gnnrun.launch.rank import infer_rank

    check_in_step(
        f"gnnrun {kind} run=RUN_DIR", cfg, " (or give cluster=local to run on this machine)"
    )
    with _task_process_group(cfg, "infer") as rdzv:
        plan = _rank0_prepares(rdzv.rank, prepare)
        return plan, infer_rank(cfg, rdzv.rank, plan)


def run_slurm_rank(cfg, run_dir: Path, prepare: Callable[[], None]) -> dict[str, Any] | None:
    """Be one rank of a cluster=slurm run; rank 0 returns the summary.

    Rank 0 runs `prepare` (dataset, partition, run directory) while the other
    ranks wait for it; if it fails, they stop with its message instead of training
    on a partition that is not there.
    """
    from gnnrun.attempt import RunStopped, watch_for_stop
    from gnnrun.launch.rank import train_rank

    with _task_process_group(cfg, "train") as rdzv:
        _rank0_prepares(rdzv.rank, prepare)
        watch_for_stop(signal.SIGUSR2)
        try:
            return train_rank(cfg, rdzv.rank, run_dir)
        except RunStopped as stopped:
            requeue(cfg, rdzv, stopped.epoch)  # leaves this process


def requeue(cfg, rdzv: SlurmRendezvous, epoch: int) -> None:
    """After every rank checkpointed at `epoch`: rank 0 requeues the job (unless it was
    requeued cluster.max_requeues times already); every task then leaves at once, so that
    no result is recorded for an attempt that goes on in the requeued job."""
    from gnnrun.attempt import current_attempt
    from gnnrun.progress import console

    done = current_attempt().number
    if done >= cfg.cluster.max_requeues:
        raise GnnrunError(
            f"SLURM is ending job {rdzv.job_id} (its time limit, or preemption) after epoch "
            f"{epoch}; it was requeued {done} time(s) already (cluster.max_requeues="
            f"{cfg.cluster.max_requeues}). The checkpoint is in {cfg.train.checkpoint_dir}: "
            "continue with train.resume=true"
        )
    if rdzv.rank == 0:
        done_run = subprocess.run(
            ["scontrol", "requeue", rdzv.job_id], capture_output=True, text=True, timeout=60
        )
        if done_run.returncode != 0:
            raise GnnrunError(
                f"SLURM is ending job {rdzv.job_id} after epoch {epoch}, checkpointed, but "
                f"`scontrol requeue` failed: {done_run.stderr.strip()}; continue with "
                "train.resume=true"
            )
        console.print(
            f"job {rdzv.job_id} checkpointed after epoch {epoch} and requeued "
            f"({done + 1} of at most {cfg.cluster.max_requeues})",
            markup=False,
            soft_wrap=True,
        )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
