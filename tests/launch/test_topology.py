"""CPU topology from a fake sysfs tree; backend probing: gloo on this machine, and the
missing-bindings, no-CUDA and failed-start answers with those conditions stood in for."""

from __future__ import annotations

import importlib
import os

import torch
import torch.distributed

from gnnrun.launch.backends import CCL_INSTALL_HINT, BackendStatus, probe_backend
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


def test_gloo_works_on_a_one_rank_group():
    status = probe_backend("gloo")
    assert status == BackendStatus("gloo", True, "1-rank all-reduce ok")


def test_missing_ccl_bindings_say_how_to_install_them(monkeypatch):
    real_import = importlib.import_module

    def no_ccl(name, *args, **kwargs):
        if name == "oneccl_bindings_for_pytorch":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", no_ccl)
    status = probe_backend("ccl")
    assert not status.works
    assert status.detail == "oneccl_bindings_for_pytorch not installed: " + CCL_INSTALL_HINT


def test_nccl_without_a_cuda_device_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe_backend("nccl") == BackendStatus("nccl", False, "no CUDA device")


def test_a_backend_that_fails_to_start_reports_the_error(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("no such backend here\nsecond line")

    monkeypatch.setattr(torch.distributed, "init_process_group", refuse)
    status = probe_backend("gloo")
    assert status == BackendStatus("gloo", False, "RuntimeError: no such backend here")
