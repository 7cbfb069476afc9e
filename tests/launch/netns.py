"""A test bed of "hosts" on this machine: Linux network namespaces joined by a switch.

Each host is a network namespace with one interface (eth0) and an address of the
test bed's own (10.213.<bed>.<i+1>/24); its veth peer sits in a switch namespace,
on a bridge. Cutting a host's link (`cut`) takes the peer down on the switch side:
packets vanish, as with a pulled cable. `close` kills every process in every
namespace and deletes them (the switch's veth ends go with it), whatever happened;
it also runs at exit. `unavailable()` says why namespaces cannot be made here (not
root, no `ip`, a sandbox without CAP_SYS_ADMIN), for the tests' skip reason.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    name = f"gnnrun-probe-{os.getpid()}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip() or 'ip netns add failed'}"
    _ip("netns", "del", name, check=False)
    return None


@dataclass
class TestBed:
    hosts: int
    tag: str = field(default_factory=lambda: f"g{os.getpid() % 100000}")
    subnet: int = field(default_factory=lambda: 10 + os.getpid() % 240)

    def __post_init__(self) -> None:
        self.switch = f"{self.tag}-sw"
        self.names = [f"{self.tag}-h{i}" for i in range(self.hosts)]
        self._closed = False
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def address(self, host: int) -> str:
        return f"10.213.{self.subnet}.{host + 1}"

    def _peer(self, host: int) -> str:
        return f"{self.tag}p{host}"

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
            # Made in the host's namespace, the peer then moved to the switch's.
            _ip("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", self._peer(i))
            _ip("-n", name, "link", "set", self._peer(i), "netns", self.switch)
            _ip("-n", self.switch, "link", "set", self._peer(i), "master", "br0")
            _ip("-n", self.switch, "link", "set", self._peer(i), "up")
            _ip("-n", name, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")

    def popen(self, host: int, command: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start `command` inside host `host`'s namespace."""
        return subprocess.Popen(["ip", "netns", "exec", self.names[host], *command], **kwargs)

    def cluster_overrides(self, host: int, port: int) -> list[str]:
        """cluster=hosts as host `host` of this bed gives it (node 0 at `port`)."""
        return [
            "cluster=hosts",
            f"cluster.nodes={self.hosts}",
            f"cluster.node_rank={host}",
            f"cluster.rdzv_endpoint={self.address(0)}:{port}",
        ]

    def train_command(self, host: int, port: int, run_dir, overrides: Sequence[str]) -> list[str]:
        """`gnnrun train cluster=hosts` as host `host` of this bed runs it (node 0 at `port`),
        writing its run directory under `run_dir`/host<host>."""
        return [
            str(Path(sys.executable).with_name("gnnrun")),
            "train",
            *self.cluster_overrides(host, port),
            f"hydra.run.dir={run_dir}/host{host}",
            *overrides,
        ]

    def pids(self, host: int) -> list[int]:
        listed = _ip("netns", "pids", self.names[host], check=False).stdout.split()
        return [int(pid) for pid in listed]

    def kill_host(self, host: int) -> None:
        """SIGKILL every process of a host: the machine is gone."""
        for _ in range(5):  # children started meanwhile get the next round
            pids = self.pids(host)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def cut(self, host: int) -> None:
        """Take the host's link down at the switch: its packets vanish."""
        _ip("-n", self.switch, "link", "set", self._peer(host), "down")

    def strike(self, fault: str, host: int, procs, wait_s: float) -> dict[int, float]:
        """Inflict `fault` on `host` (kill_host, cut_link; stop_rank: the rank stops itself,
        by GNNRUN_FAULT) and wait for the other hosts' commands in `procs` (and the struck
        one's, unless killed) to end: {host: seconds from the fault to its exit}."""
        start = time.monotonic()
        if fault == "kill_host":
            self.kill_host(host)
        elif fault == "cut_link":
            self.cut(host)
        ended = {}
        for other, proc in enumerate(procs):
            if fault == "kill_host" and other == host:
                continue
            proc.wait(timeout=wait_s)
            ended[other] = time.monotonic() - start
        return ended

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for i in range(self.hosts):
            self.kill_host(i)
        for name in [*self.names, self.switch]:
            _ip("netns", "del", name, check=False)
