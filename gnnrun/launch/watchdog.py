"""Naming the rank a run lost, and stopping every host's ranks when one is lost.

A collective only says that it failed: "Connection closed by peer" when a peer's
process died, a timeout after cluster.timeout_s when a peer hangs (SIGSTOP, a
deadlock) or the link to its host is cut. Which rank, on which host, it cannot say.

- Every rank gathers a roster once (rank, node, host name, the address it reaches
  the rendezvous from, pid) and runs a heartbeat thread that bumps its counter in
  the rendezvous store (a connection of its own) every `BEAT_S`.
- A rank whose collective failed reads every counter twice, `WINDOW_S` apart: the
  ranks whose counter stood still are the lost ones. When the store itself cannot
  be reached, node 0 (which holds it) is the lost one. An abort another rank wrote
  first (a rank that raised its own error) wins: it names the cause.
- The rank writes its finding under the launch's abort key and waits up to
  `ACK_WAIT_S` for each host's launcher to acknowledge it: the launcher's
  `AbortWatcher` stops that host's ranks, a stopped (SIGSTOP) one included, which
  nothing else would end, and reports the finding as the host's error.

Keys live under gnnrun/<elastic run id>/ in the rendezvous store (each attempt is a
launch of its own). Rank 0 also hands its run id (gnnrun.attempt) to every rank
there, so that the hosts agree on the id their checkpoints record.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from gnnrun.attempt import ATTEMPT_ENV, RUN_ID_ENV
from gnnrun.errors import GnnrunError
from gnnrun.launch.forkserver import server_pid

BEAT_S = 1.0  # heartbeat period
WINDOW_S = 3.0  # a counter that did not move in this long belongs to a lost rank
ACK_WAIT_S = 3.0  # how long a rank that found a loss waits for every host to hear of it
STORE_TIMEOUT = timedelta(seconds=5)  # a store operation this slow means its host is lost
PROBE_S = 2.0  # a store host that does not accept a connection in this long is lost

# What a collective's error says when a peer went away or stopped answering.
LOST_PEER_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Connection refused",
    "Broken pipe",
    "Socket Timeout",
    "Timed out",
    "timed out",
    "No route to host",
    "Network is unreachable",
)
LOST_PREFIX = "lost "  # how a finding starts: the launcher ranks it after a rank's own error


def run_key(env=None) -> str:
    """Where this run's keys live in the rendezvous store."""
    env = os.environ if env is None else env
    run = env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID") or "run"
    return f"gnnrun/{run}"


def abort_key(prefix: str) -> str:
    return f"{prefix}/abort"


def ack_key(prefix: str, node: int) -> str:
    return f"{prefix}/ack{node}"


def connect(host: str, port: int, timeout: timedelta = STORE_TIMEOUT) -> dist.TCPStore:
    """A client of the rendezvous store; OSError at once when its host does not answer (a
    store client would retry every address for all of `timeout`)."""
    socket.create_connection((host, port), timeout=PROBE_S).close()
    return dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)


@dataclass(frozen=True)
class Member:
    rank: int
    node: int
    host: str
    address: str
    pid: int

    def where(self) -> str:
        return f"node {self.node} ({self.host}, {self.address})"


def local_address(master_addr: str, master_port: int) -> str:
    """The address this host reaches the rendezvous from (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master_addr, master_port))
            return probe.getsockname()[0]
    except OSError:
        return "?"


class Watchdog:
    """A rank's heartbeat and, when a collective fails, its finding of what was lost."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.host = os.environ["MASTER_ADDR"]
        self.port = int(os.environ["MASTER_PORT"])
        self.prefix = run_key()
        self.node = int(os.environ.get("GROUP_RANK", "0"))
        me = Member(
            rank,
            self.node,
            socket.gethostname(),
            local_address(self.host, self.port),
            os.getpid(),
        )
        store = connect(self.host, self.port)
        if ATTEMPT_ENV in os.environ:  # launched by gnnrun: every host takes node 0's run id
            if rank == 0:
                store.set(f"{self.prefix}/run_id", os.environ[RUN_ID_ENV])
            os.environ[RUN_ID_ENV] = store.get(f"{self.prefix}/run_id").decode()
        roster: list[dict | None] = [None] * world
        dist.all_gather_object(roster, asdict(me))
        self.roster = [Member(**entry) for entry in roster]
        self._store: dist.TCPStore | None = None  # the one finding() reached, for publish()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(store,), daemon=True)
        self._thread.start()

    def _beat_key(self, rank: int) -> str:
        return f"{self.prefix}/beat{rank}"

    def _beat(self, store: dist.TCPStore) -> None:
        key = self._beat_key(self.rank)
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a lost store is what finding() reports
                store.add(key, 1)
            self._stop.wait(BEAT_S)

    def close(self) -> None:
        self._stop.set()  # the thread may be stuck on a lost store: it is a daemon, not waited for

    def finding(self, error: BaseException) -> str:
        """What was lost, found after `error` ended a collective; published to every host."""
        try:
            store = self._store = connect(self.host, self.port)
            key = abort_key(self.prefix)
            if store.check([key]):  # another rank already said what happened
                return store.get(key).decode()
            before = [store.add(self._beat_key(r), 0) for r in range(self.world)]
            time.sleep(WINDOW_S)
            after = [store.add(self._beat_key(r), 0) for r in range(self.world)]
        except Exception:  # noqa: BLE001 (the store's host is what was lost)
            self._store = None
            holders = [m for m in self.roster if m.node == 0]
            return (
                f"lost {holders[0].where()}, which holds the rendezvous, with rank(s) "
                f"{', '.join(str(m.rank) for m in holders)}: the host is down or the link "
                f"to it is cut (rank {self.rank} saw: {_first_line(error)})"
            )
        lost = [m for m in self.roster if m.rank != self.rank and after[m.rank] == before[m.rank]]
        if not lost:
            return f"rank {self.rank}: {_first_line(error)}"
        names = "; ".join(f"rank {m.rank} on {m.where()}" for m in lost)
        return (
            f"lost {names}: stopped answering (the process died or hung, or the link to "
            f"its host is down; rank {self.rank} saw: {_first_line(error)})"
        )

    def publish(self, message: str) -> str:
        """Write `message` as the run's abort unless one is there; wait for every
        host's launcher to hear it (bounded); return the abort that stands."""
        try:
            store = self._store or connect(self.host, self.port)
            standing = store.compare_set(abort_key(self.prefix), "", message)
            nodes = {m.node for m in self.roster}
            keys = [ack_key(self.prefix, n) for n in nodes]
            deadline = time.monotonic() + ACK_WAIT_S
            while time.monotonic() < deadline and not store.check(keys):
                time.sleep(0.1)
            return standing.decode() or message
        except Exception:  # noqa: BLE001 (no store: nobody to tell)
            return message


def is_lost_peer(error: BaseException) -> bool:
    return isinstance(error, dist.DistError) or any(m in str(error) for m in LOST_PEER_MARKERS)


@contextlib.contextmanager
def watching(rank: int, world: int) -> Iterator[None]:
    """Run the body under a heartbeat; a collective that failed because a rank was lost
    becomes a GnnrunError naming it, and every host hears of any failure."""
    if world == 1:
        yield
        return
    watchdog = Watchdog(rank, world)
    try:
        yield
    except Exception as error:
        if is_lost_peer(error):
            raise GnnrunError(watchdog.publish(watchdog.finding(error))) from None
        where = watchdog.roster[rank].where()
        cause = _first_line(error).removeprefix(f"rank {rank}: ")
        watchdog.publish(f"rank {rank} on {where} failed: {cause}")
        raise
    finally:
        watchdog.close()


def _first_line(error: BaseException) -> str:
    """An error's first line, without gloo's source location and its boilerplate advice."""
    text = str(error).strip().split("\n")[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\] ", "", text.removeprefix("GnnrunError: "))
    return text.split(". This is typically caused")[0]


# ------------------------------------------------------------------ the launcher's side

POLL_S = 0.5
KILL_GRACE_S = 5.0  # ranks that have not ended this long after an abort are stopped


def local_workers() -> list[int]:
    """The ranks this process's elastic agent started: the forkserver's children
    (gnnrun.launch.forkserver), or this process's spawned ones."""
    server = server_pid()
    pids = []
    for parent in (os.getpid(), server):
        if parent is None:
            continue
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for pid in children.read_text().split():
                    with contextlib.suppress(OSError):
                        command = Path(f"/proc/{pid}/cmdline").read_bytes()
                        if parent == server or b"spawn_main" in command:
                            pids.append(int(pid))
    return pids


class AbortWatcher:
    """In the launcher of each host: when a rank anywhere writes an abort, acknowledge it,
    keep it as the host's error, and stop those of this host's ranks that have not ended
    `KILL_GRACE_S` later (SIGKILL: a stopped rank ends too)."""

    def __init__(self, host: str, port: int, run_id: str, node: int) -> None:
        self.prefix = f"gnnrun/{run_id}"
        self.node = node
        self.message: str | None = None
        self.killed = False  # whether it had to stop a rank of this host
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(host, port), daemon=True)

    def __enter__(self) -> AbortWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()  # a daemon: not waited for when it is stuck on a lost store
        self._thread.join(timeout=POLL_S)

    def _watch(self, host: str, port: int) -> None:
        store = None
        while self.message is None and not self._stop.wait(POLL_S):
            try:
                store = store or connect(host, port, timedelta(seconds=2))
                if store.check([abort_key(self.prefix)]):
                    self.message = store.get(abort_key(self.prefix)).decode()
                    store.set(ack_key(self.prefix, self.node), "1")
            except Exception:  # noqa: BLE001 (no store yet, or no more: the ranks see it too)
                store = None
        if self.message is None:
            return
        doomed = local_workers()
        if not self._stop.wait(KILL_GRACE_S):
            for pid in set(doomed) & set(local_workers()):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    self.killed = True
