"""CPU topology from sysfs: sockets, physical cores, the CPUs this process may use."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

_CPU_ROOT = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class Topology:
    # socket id -> logical CPUs of that socket that this process may run on
    sockets: dict[int, tuple[int, ...]]
    physical_cores: int
    numa_nodes: int

    @property
    def logical_cpus(self) -> int:
        return sum(len(cpus) for cpus in self.sockets.values())


def read_topology(cpu_root: Path = _CPU_ROOT) -> Topology:
    allowed = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(os.cpu_count() or 1))
    )
    sockets: dict[int, list[int]] = defaultdict(list)
    cores: set[tuple[int, int]] = set()
    for cpu in allowed:
        topo = cpu_root / f"cpu{cpu}" / "topology"
        socket = _read_int(topo / "physical_package_id", default=0)
        sockets[socket].append(cpu)
        cores.add((socket, _read_int(topo / "core_id", default=cpu)))
    numa = len(list((cpu_root.parent / "node").glob("node[0-9]*"))) or 1
    return Topology({s: tuple(c) for s, c in sorted(sockets.items())}, len(cores), numa)


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default
