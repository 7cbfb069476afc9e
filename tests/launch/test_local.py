"""Real local ranks through the elastic launcher: results, a rank that raises, a rank killed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.launch.forkserver import server_pid
from gnnrun.launch.rank import choose_backend, rank_cpus
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import rank_fns  # noqa: E402


def child_processes() -> list[int]:
    """This process's descendants but Python's helpers: the resource tracker, and the
    server the ranks are forked from (gnnrun.launch.forkserver), whose children they are."""
    parents, commands = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[stat.parent.name] = stat.read_text().rsplit(")", 1)[1].split()[1]
            commands[stat.parent.name] = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
    found, frontier = [], {str(os.getpid())}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        found += [int(pid) for pid in frontier if b"resource_tracker" not in commands[pid]]
    # Its forks share its command line: it is known by its process id.
    return sorted(set(found) - {server_pid()})


@pytest.mark.parametrize(
    "nprocs", [2, pytest.param(4, marks=pytest.mark.slow)]
)  # 4 ranks: make test-slow
def test_ranks_start_and_communicate(nprocs):
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    assert run_on_ranks(rank_fns.sum_of_ranks, nprocs) == [nprocs * (nprocs - 1) // 2] * nprocs
    # The elastic agent's handlers are gone: Ctrl-C raises KeyboardInterrupt again.
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers


def test_a_rank_that_raises_brings_all_down_with_its_message(capfd, monkeypatch):
    monkeypatch.delenv("GNNRUN_DEBUG", raising=False)
    start = time.monotonic()
    with pytest.raises(GnnrunError, match=r"rank 1 failed: .*boom from rank 1") as failure:
        run_on_ranks(rank_fns.raise_on_rank, 3, 1, timeout_s=60)
    assert time.monotonic() - start < 30
    assert child_processes() == []
    # Not one of gnnrun's own errors: the message says how to see the traceback,
    # and the agent has not printed it (dozens of log lines) ahead of gnnrun's line.
    assert "GNNRUN_DEBUG=1" in str(failure.value)
    assert "boom from rank 1" not in capfd.readouterr().err


def test_a_killed_rank_brings_all_down():
    start = time.monotonic()
    with pytest.raises(GnnrunError, match=r"rank 0 failed: killed by signal 9") as failure:
        run_on_ranks(rank_fns.kill_on_rank, 2, 0, timeout_s=60)
    assert "GNNRUN_DEBUG" not in str(failure.value)  # no traceback to show
    assert time.monotonic() - start < 30
    assert child_processes() == []


def test_backend_choice():
    assert choose_backend("auto") == "gloo"  # no GPU here
    assert choose_backend("gloo") == "gloo"
    with pytest.raises(GnnrunError, match="oneCCL bindings are not installed"):
        choose_backend("ccl")


def test_cpu_sets_split_the_cores():
    cpus0, threads0 = rank_cpus(0, 2, 0, 0)
    cpus1, _ = rank_cpus(1, 2, 0, 0)
    assert threads0 == len(cpus0) >= 1
    if len(os.sched_getaffinity(0)) >= 2:
        assert not set(cpus0) & set(cpus1)
    assert rank_cpus(0, 1, 3, 0)[1] == 3


def test_an_endpoint_node_0_cannot_hold_is_refused_before_any_work():
    """Node 0 holds the rendezvous: an address of another machine, or a port in use, would
    leave every host waiting cluster.join_timeout_s and then blaming the others."""
    import socket

    from gnnrun.config import HostsClusterConfig
    from gnnrun.launch.elastic import check_rendezvous

    def host(endpoint: str, node_rank: int = 0) -> HostsClusterConfig:
        return HostsClusterConfig(nprocs=2, node_rank=node_rank, rdzv_endpoint=endpoint)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GnnrunError, match=f"port {port} is in use on this host"):
            check_rendezvous(host(f"127.0.0.1:{port}"))
        check_rendezvous(host(f"127.0.0.1:{port}", node_rank=1))  # node 1 only connects
    check_rendezvous(host(f"127.0.0.1:{port}"))  # free again
    with pytest.raises(GnnrunError, match="192.0.2.1:29400: it is not an address of this host"):
        check_rendezvous(host("192.0.2.1:29400"))  # TEST-NET-1: nobody's
    with pytest.raises(GnnrunError, match="nohost.invalid does not resolve on this host"):
        check_rendezvous(host("nohost.invalid:29400", node_rank=1))


@pytest.mark.faults  # several hosts: make test-faults
@pytest.mark.parametrize(
    "node_rank, message",
    [
        (
            1,
            r"node 0's rendezvous at 127\.0\.0\.1:\d+ did not answer within cluster\.join_timeout_s=2 s",
        ),
        (0, r"not every host joined the rendezvous .* on the other hosts"),
    ],
)
def test_hosts_that_never_meet_are_told_what_to_start(node_rank, message):
    from gnnrun.launch.elastic import ElasticGroup, _free_port, launch_elastic

    group = ElasticGroup(
        1, nnodes=2, node_rank=node_rank, endpoint=f"127.0.0.1:{_free_port()}", join_timeout_s=2
    )
    start = time.monotonic()
    with pytest.raises(GnnrunError, match=message):
        launch_elastic(rank_fns.sum_of_ranks, (), group)
    assert time.monotonic() - start < 30


HOST = ["cluster=hosts", "cluster.rdzv_endpoint=127.0.0.1:29400", "dataset=synthetic-tiny"]


@pytest.mark.faults  # several hosts (as two local ranks): make test-faults
def test_ranks_started_with_different_settings_are_refused_on_every_rank(monkeypatch):
    monkeypatch.delenv("GNNRUN_DEBUG", raising=False)
    # Node 1 was given optimizer.lr=0.1 and node 0 was not: every rank refuses, naming it.
    apart = [[*HOST, "cluster.node_rank=0"], [*HOST, "cluster.node_rank=1", "optimizer.lr=0.1"]]
    with pytest.raises(GnnrunError) as refused:
        run_on_ranks(rank_fns.check_config, 2, apart, timeout_s=60)
    message = str(refused.value)
    assert "different settings: optimizer.lr (rank 0: 0.003; rank 1: 0.1)" in message, message
    assert "(rank 1 failed too)" in message and "\n" not in message
    assert "GNNRUN_DEBUG" not in message  # gnnrun's own refusal, not a traceback
    # A host's own place, CPUs and paths may differ.
    own = [
        [*HOST, "cluster.node_rank=0", "paths.data_root=/mnt/a"],
        [*HOST, "cluster.node_rank=1", "paths.data_root=/b", "cluster.threads_per_rank=3"],
    ]
    assert run_on_ranks(rank_fns.check_config, 2, own, timeout_s=60) == [None, None]
    # The same settings given to another command on one host (its collectives would wait).
    same = [[*HOST, "cluster.node_rank=0"], [*HOST, "cluster.node_rank=1"]]
    with pytest.raises(GnnrunError, match=r"different settings: command \(rank 0: partition; "):
        run_on_ranks(rank_fns.check_config, 2, same, ["partition", "train"], timeout_s=60)


@pytest.mark.faults  # two gnnrun processes as hosts
def test_two_hosts_on_loopback_with_different_settings_both_refuse(tmp_path):
    import subprocess

    from gnnrun.launch.elastic import _free_port

    endpoint = f"cluster.rdzv_endpoint=127.0.0.1:{_free_port()}"
    run = ["cluster=hosts", endpoint, "dataset=synthetic-tiny", "train.epochs=2"]
    run.append("cluster.join_timeout_s=60")
    hosts = [["cluster.node_rank=0"], ["cluster.node_rank=1", "optimizer.lr=0.1"]]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gnnrun.cli",
                "train",
                *run,
                *own,
                f"hydra.run.dir={tmp_path}/h{n}",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, own in enumerate(hosts)
    ]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [1, 1], errors
    for node, err in enumerate(errors):
        assert (
            f"error: rank {node} failed: the ranks were started with different settings: "
            "optimizer.lr (rank 0: 0.003; rank 1: 0.1)" in err
        ), err
        assert "Traceback" not in err


def test_the_refusal_lists_a_few_keys_and_shortens_long_values():
    from gnnrun.launch.rank import config_mismatch

    first = {f"k{i}": str(i) for i in range(8)} | {"same": "1", "long": '"' + "x" * 100 + '"'}
    second = {f"k{i}": str(i + 1) for i in range(8)} | {"same": "1", "long": '"y"'}
    message = config_mismatch([first, second, first])
    assert message.startswith(
        "the ranks were started with different settings: k0 (ranks 0,2: 0; rank 1: 1), "
    )
    assert f'long (ranks 0,2: "{"x" * 56}...; rank 1: "y")' not in message  # 5 keys shown
    assert "and 4 more;" in message and "same (" not in message
    assert config_mismatch([{"long": "x" * 100}, {"long": "y"}]).startswith(
        f"the ranks were started with different settings: long (rank 0: {'x' * 57}...; rank 1: y)"
    )
