"""CPU topology from a fake sysfs tree, and backend probing on this machine."""

from __future__ import annotations

import os

from gnnrun.launch.backends import probe_backend
from gnnrun.launch.topology import read_topology


def test_two_sockets_with_hyperthreads(tmp_path, monkeypatch):
    cpu_root = tmp_path / "cpu"
    # CPUs 0-3 on socket 0, 4-7 on socket 1; pairs of CPUs share a core.
    for cpu in range(8):
        topo = cpu_root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{cpu // 4}\n")
        (topo / "core_id").write_text(f"{(cpu % 4) // 2}\n")
    for node in range(2):
        (tmp_path / "node" / f"node{node}").mkdir(parents=True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    topo = read_topology(cpu_root)
    assert topo.sockets == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert topo.physical_cores == 4 and topo.logical_cpus == 8 and topo.numa_nodes == 2


def test_affinity_limits_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1})
    topo = read_topology(tmp_path / "missing")  # no sysfs: everything on socket 0
    assert topo.sockets == {0: (1,)} and topo.numa_nodes == 1


def test_gloo_works_and_missing_backends_say_why():
    assert probe_backend("gloo").works
    ccl = probe_backend("ccl")
    assert ccl.works or "oneccl_bindings_for_pytorch" in ccl.detail
