"""Ranks through PyTorch's elastic launcher (torchrun's machinery): `cluster=local`, N
ranks on this machine, and `cluster=hosts`, one `gnnrun train` per host (or `gnnrun
partition` / `data prepare` of chunked input, whose ranks write into the directory node
0 makes: gnnrun.launch.rank.in_announced_dir).

Rendezvous, failure propagation and teardown are PyTorch's: when one rank raises or
dies, the agent stops the others and `elastic_launch` raises ChildFailedError naming
the failed rank, which gnnrun reports. Restarts (cluster.max_restarts) are gnnrun's:
each is a new launch, with a rendezvous of its own, whose ranks resume from the run's
last checkpoint (gnnrun.attempt says which attempt they are). The agent's own restarts
are not used: with gloo they reconnect to the failed attempt's addresses now and then
(torch 2.13: `connectFullMesh ... Connection refused`, or a hang). Hosts meet through
the static rendezvous at node 0's endpoint (one host: a free loopback port), so that
a host's cluster.node_rank is its place (ranks node_rank x tasks_per_node onwards),
as torchrun --node-rank gives. The agent only watches its own host's ranks:
gnnrun.launch.watchdog's AbortWatcher stops them when a rank on another host finds a
loss. On SIGINT (Ctrl-C) or SIGTERM the agent stops every rank,
then gnnrun raises KeyboardInterrupt (SIGINT) or GnnrunError (other signals).

Under cluster=hosts the user runs the same command on every host with its own
cluster.node_rank. Node 0 holds the rendezvous (a TCP store in its agent) and
prepares the dataset and partition before it joins (gnnrun.job) while the other
hosts wait for it (cluster.join_timeout_s), so every rank finds them on the storage
the hosts share; rank 0, on node 0, writes the summary and the checkpoints.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnnrun import RANK_STARTING_ENV
from gnnrun.attempt import ATTEMPT_ENV, RUN_ID_ENV
from gnnrun.errors import GnnrunError, Stopped
from gnnrun.launch import forkserver
from gnnrun.launch.rank import choose_backend
from gnnrun.launch.watchdog import LOST_PREFIX, AbortWatcher
from gnnrun.torch_support import dataclass_accepts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_rendezvous(cluster) -> None:
    """Under cluster=hosts, before anything is prepared (node 0 prepares for minutes, the
    others would wait cluster.join_timeout_s): refuse an endpoint that does not resolve
    here, and on node 0, which holds the rendezvous, one that is not an address of this
    host or whose port is taken (the hosts would never meet, blaming each other)."""
    if cluster.name != "hosts":
        return
    endpoint = cluster.rdzv_endpoint
    host, port = endpoint.rsplit(":", 1)
    host = host.strip("[]")
    try:
        found = socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise GnnrunError(
            f"cluster.rdzv_endpoint={endpoint}: {host} does not resolve on this host: give "
            "node 0's host name or IP address, the same on every host"
        ) from None
    if cluster.node_rank != 0:
        return
    problem = _cannot_hold(found)
    if problem is not None:
        raise GnnrunError(f"cluster.rdzv_endpoint={endpoint}: {problem}")


def _cannot_hold(addresses: list[tuple]) -> str | None:
    """Why node 0 cannot listen at any of an endpoint's `addresses` (getaddrinfo's), None
    when it can: an address another machine holds, or a port in use here."""
    in_use = None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                return None
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    in_use = address[1]
    if in_use is not None:
        return (
            f"port {in_use} is in use on this host (another gnnrun, or another program): "
            "choose a free port, the same on every host"
        )
    return (
        "it is not an address of this host, and node 0 (cluster.node_rank=0) holds the "
        "rendezvous there: give this host's name or one of its addresses that the other "
        "hosts reach"
    )


# Signals torch's elastic agent takes over (TORCHELASTIC_SIGNALS_TO_HANDLE's default).
_AGENT_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
SHUTDOWN_GRACE_S = 10  # after Ctrl-C, how long ranks have to leave before SIGKILL


@dataclass(frozen=True)
class ElasticGroup:
    """This host's part in a launch, and where the hosts meet."""

    nproc_per_node: int
    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None  # HOST:PORT of node 0; None: a free loopback port (one node)
    run_id: str | None = None  # the same on every host; None: a fresh one (one node)
    join_timeout_s: int = 300  # how long hosts wait for each other
    max_restarts: int = 0

    @classmethod
    def of(cls, cluster) -> ElasticGroup:
        """This host's part of the launch that a cluster=local or cluster=hosts config asks for."""
        if cluster.name != "hosts":
            return cls(
                cluster.nprocs, join_timeout_s=cluster.timeout_s, max_restarts=cluster.max_restarts
            )
        return cls(
            cluster.tasks_per_node,
            nnodes=cluster.nodes,
            node_rank=cluster.node_rank,
            endpoint=cluster.rdzv_endpoint,
            # The same on every host (the run's own id is node 0's: gnnrun.launch.watchdog).
            run_id="gnnrun-" + re.sub(r"[^A-Za-z0-9]+", "-", cluster.rdzv_endpoint),
            join_timeout_s=cluster.join_timeout_s,
            max_restarts=cluster.max_restarts,
        )

    def ranks(self) -> range:
        """The global ranks of this host."""
        first = self.node_rank * self.nproc_per_node
        return range(first, first + self.nproc_per_node)


def launch_local(
    entrypoint: Callable[..., Any], args: tuple, nprocs: int, timeout_s: int
) -> list[Any]:
    """Run entrypoint(*args) on `nprocs` local ranks; return every rank's result, rank order.

    A rank that raises or dies makes the agent stop all others; the error then names the
    first failed rank and its message.
    """
    return launch_elastic(entrypoint, args, ElasticGroup(nprocs, join_timeout_s=timeout_s))


def launch_elastic(entrypoint: Callable[..., Any], args: tuple, group: ElasticGroup) -> list[Any]:
    """Run entrypoint(*args) on this host's ranks of `group`, again after a failure while
    restarts are left; return their results, in rank order, once every host's are done."""
    from gnnrun.progress import print_warning

    os.environ[RUN_ID_ENV] = uuid.uuid4().hex  # node 0's is the run's (gnnrun.launch.watchdog)
    attempt = 0
    try:
        while True:
            os.environ[ATTEMPT_ENV] = str(attempt)
            try:
                return _launch_once(entrypoint, args, group, attempt)
            except (NotRestartable, Stopped):
                raise
            except GnnrunError as exc:
                if attempt == group.max_restarts:
                    if attempt:
                        raise GnnrunError(f"{exc} (after {attempt} restart(s))") from None
                    raise
                attempt += 1
                print_warning(
                    f"{exc}; restarting every rank from the last checkpoint "
                    f"(restart {attempt} of {group.max_restarts})"
                )
    finally:
        os.environ.pop(ATTEMPT_ENV, None)
        os.environ.pop(RUN_ID_ENV, None)


def _launch_once(
    entrypoint: Callable[..., Any], args: tuple, group: ElasticGroup, attempt: int
) -> list[Any]:
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from gnnrun.ops import cpu_allocator

    # The ranks do the work from here on: blocks this process freed (partitioning,
    # preparing) go back to the system rather than stay cached while it waits.
    cpu_allocator.release()
    # Each rank's error file lands here, so that the root cause can be found
    # even when the agent noticed a rank that only failed because of another.
    log_dir = Path(tempfile.mkdtemp(prefix="gnnrun-launch-"))
    run_id = f"{group.run_id or uuid.uuid4().hex[:12]}-a{attempt}"
    # The static rendezvous: node_rank is the host's place, and the ranks' store is the
    # agent's at the endpoint, where the AbortWatcher reads (c10d's would be elsewhere).
    if group.endpoint is None:
        endpoint = f"127.0.0.1:{_free_port()}"
    else:  # attempt k meets at port + k: a quick host never joins the failed attempt's store
        host, port = group.endpoint.rsplit(":", 1)
        endpoint = f"{host}:{int(port) + attempt}"
    rendezvous = {"rank": group.node_rank, "timeout": group.join_timeout_s}
    launch = LaunchConfig(
        min_nodes=group.nnodes,
        max_nodes=group.nnodes,
        nproc_per_node=group.nproc_per_node,
        run_id=run_id,
        rdzv_backend="static",
        rdzv_endpoint=endpoint,
        rdzv_configs=rendezvous,
        max_restarts=0,
        monitor_interval=0.2,
        start_method=forkserver.start_method(),
        logs_specs=DefaultLogsSpecs(log_dir=str(log_dir)),
        # torch 2.11 has no such setting (its agent waits 30 s before SIGKILL).
        **(
            {"shutdown_timeout": SHUTDOWN_GRACE_S}
            if dataclass_accepts(LaunchConfig, "shutdown_timeout")
            else {}
        ),
    )
    host, port = endpoint.rsplit(":", 1)
    watcher = AbortWatcher(host, int(port), run_id, group.node_rank)
    # The agent replaces these handlers with its own, which raise SignalException,
    # and leaves them installed: put ours back afterwards (only the main thread can).
    main_thread = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in _AGENT_SIGNALS} if main_thread else {}
    os.environ[RANK_STARTING_ENV] = "1"  # inherited by the ranks only while they start
    if group.nnodes > 1:  # else silent until every host has come, or the timeout
        from gnnrun.progress import console

        console.print(
            f"node {group.node_rank}: waiting for all {group.nnodes} hosts at {endpoint} "
            f"(up to cluster.join_timeout_s={group.join_timeout_s} s)",
            markup=False,
            style="dim",
        )
    try:
        with _quiet_agent(), watcher:
            results = elastic_launch(launch, forkserver.in_launch_environment)(
                forkserver.launch_variables(), entrypoint, *args
            )
    except DistError as exc:  # the hosts never met: no rank ran, nothing to restart
        raise NotRestartable(_rendezvous_failure(exc, group, endpoint)) from None
    except ChildFailedError as exc:
        text, own_cause = _describe_failures(exc.failures, log_dir, group.ranks())
        if watcher.message and not own_cause:  # what a rank found or said, maybe elsewhere
            text = watcher.message
            if watcher.killed:
                text += "; this host's ranks were stopped"
        raise GnnrunError(text) from None
    except SignalException as exc:  # the agent has already stopped every rank
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        here = " of this host" if group.nnodes > 1 else ""
        raise Stopped(
            f"stopped by {signal.Signals(exc.sigval).name}; all {group.nproc_per_node} "
            f"ranks{here} were stopped"
        ) from None
    finally:
        os.environ.pop(RANK_STARTING_ENV, None)
        for sig, handler in handlers.items():
            if handler is not None:  # None: set outside Python, cannot be restored
                signal.signal(sig, handler)
        shutil.rmtree(log_dir, ignore_errors=True)
    return [results[rank] for rank in group.ranks()]


class NotRestartable(GnnrunError):
    """A failure no restart mends: the hosts never met (a signal's stop is `Stopped`)."""


def _rendezvous_failure(error: Exception, group: ElasticGroup, endpoint: str) -> str:
    if group.nnodes == 1:
        return f"the ranks could not meet at {endpoint}: {str(error).splitlines()[0]}"
    waited = f"within cluster.join_timeout_s={group.join_timeout_s} s"
    detail = str(error)
    if "EADDRINUSE" in detail or "address already in use" in detail.lower():
        # A restart meets at port + attempt, which check_rendezvous did not try.
        return (
            f"cannot hold the rendezvous at {endpoint}: the port is in use on this host "
            "(another gnnrun, or another program); choose a free port in "
            "cluster.rdzv_endpoint, the same on every host"
        )
    if group.node_rank == 0:
        return (
            f"not every host joined the rendezvous at {endpoint} {waited} "
            f"({str(error).splitlines()[0]}): start the same command (gnnrun train, "
            f"partition or data prepare) with the same cluster.rdzv_endpoint and "
            f"cluster.nodes={group.nnodes} on the other hosts, each with its own "
            "cluster.node_rank"
        )
    return (
        f"node 0's rendezvous at {endpoint} did not answer {waited}: start the same command "
        "with cluster.node_rank=0 on the host at that address, and check that every host "
        "reaches it (address, port, firewall)"
    )


# Messages of ranks that failed only because another rank went away first.
_SECONDARY = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Socket Timeout",
)


# A rank's error as another rank relays it (gnnrun.launch.watchdog: "rank 1 on node 0 ...").
_RELAYED = re.compile(r"rank \d+ on node \d+ ")


@contextlib.contextmanager
def _quiet_agent():
    """Keep the elastic agent's logs off the console: it logs every failed rank's whole
    traceback (dozens of lines) and warnings on Ctrl-C, and gnnrun reports both itself
    in one line. GNNRUN_DEBUG=1 lets them through."""
    if os.environ.get("GNNRUN_DEBUG") == "1":
        yield
        return
    # torch sets a level on each of its module loggers, so the parent's is not enough.
    prefixes = ("torch.distributed", "torch.multiprocessing")  # the agent; its process stops
    names = [n for n in logging.root.manager.loggerDict if n.startswith(prefixes)]
    loggers = [logging.getLogger(n) for n in [*prefixes, *names]]
    saved = [(logger, logger.level) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def _describe_failures(failures: dict, log_dir: Path, ranks: range) -> tuple[str, bool]:
    """Name the rank that failed first for its own reasons, then the ones it took down;
    and whether that rank failed for a reason of its own (not a lost peer, not killed)."""
    messages = {rank: _failure_message(failure) for rank, failure in failures.items()}
    times = {rank: failure.timestamp for rank, failure in failures.items()}
    for error_file in log_dir.glob("**/error.json"):  # ranks the agent did not report
        rank = ranks[int(error_file.parent.name)]  # the folder is named by local rank
        if rank not in messages:
            data = json.loads(error_file.read_text()).get("message", {})
            messages[rank] = _first_line(
                data.get("message", "") if isinstance(data, dict) else str(data)
            )
            times[rank] = (
                int(data.get("extraInfo", {}).get("timestamp", 0)) if isinstance(data, dict) else 0
            )

    def cause_order(rank: int) -> tuple[bool, bool, int, int]:
        # A rank's own error first, then what a rank found or heard, then the rest.
        text = messages[rank].removeprefix("GnnrunError: ")
        told = text.startswith(LOST_PREFIX) or _RELAYED.match(text) is not None
        secondary = told or any(marker in text for marker in _SECONDARY)
        return secondary, not told, times[rank], rank

    first, *others = sorted(messages, key=cause_order)
    message = messages[first].removeprefix("GnnrunError: ").removeprefix(f"rank {first}: ")
    text = message if _RELAYED.match(message) else f"rank {first} failed: {message}"
    if others:
        text += (
            f" ({'ranks' if len(others) > 1 else 'rank'} {', '.join(map(str, others))} failed too)"
        )
    # An exception that is not one of gnnrun's own (those name the fix) is a bug:
    # its traceback helps. A rank killed by a signal has none.
    if not messages[first].startswith(
        ("GnnrunError: ", "killed by signal", "exit code", "interrupted")
    ):
        text += "; GNNRUN_DEBUG=1 shows every rank's traceback"
    own_cause = not (cause_order(first)[0] or message.startswith("killed by signal"))
    return text, own_cause


def _first_line(text: str) -> str:
    return text.strip().split("\n")[0] if text else ""


def _failure_message(failure) -> str:
    """The failed rank's exception message (from its error file), or how it died."""
    data = failure.error_file_data or {}
    message = data.get("message")
    if isinstance(message, dict):
        text = _first_line(message.get("message", ""))
        if text and text != "<NONE>":  # <NONE>: torch's placeholder for no error file
            return text
    if failure.exitcode in (128 + signal.SIGINT, -signal.SIGINT):  # gnnrun.launch.worker
        return "interrupted (SIGINT)"
    if failure.exitcode and failure.exitcode < 0:
        return f"killed by signal {-failure.exitcode}"
    if isinstance(message, str) and message and message != "<NONE>":
        return message
    return f"exit code {failure.exitcode}"


def leads(cluster) -> bool:
    """Whether this process writes a job's shared output (takes the writer lock, makes the
    temporary directory, renames it into place): the one process of cluster=local, node 0's
    under cluster=hosts, SLURM task 0 under cluster=slurm. The others only start ranks."""
    if cluster.name == "hosts":
        return cluster.node_rank == 0
    if cluster.name == "slurm":
        from gnnrun.launch.slurm import is_lead_task

        return is_lead_task()
    return True


def run_ranks(cfg, run_dir: Path) -> Any:
    """Train on this host's ranks; return rank 0's summary (None on another host)."""
    return run_rank_job(cfg, "train", str(run_dir))[0]


def run_rank_job(cfg, job: str, *args: Any) -> list[Any]:
    """Run a job of gnnrun.launch.worker.RANK_JOBS on this host's ranks (all cluster.nprocs
    of them for cluster=local; under cluster=slurm this task, one rank); return their
    results, in rank order."""
    from gnnrun.launch.worker import rank_main  # a rank's entry point: its module runs there

    if cfg.cluster.name == "slurm":
        from gnnrun.launch.slurm import run_slurm_job

        return run_slurm_job(cfg, job, *args)
    backend = choose_backend(cfg.cluster.backend, cfg.cluster.device)
    return launch_elastic(rank_main, (cfg, backend, job, *args), ElasticGroup.of(cfg.cluster))
