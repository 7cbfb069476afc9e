"""Real local ranks through the elastic launcher: results, a rank that raises, a rank killed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.launch.rank import choose_backend, rank_cpus
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import rank_fns  # noqa: E402


def child_processes() -> list[int]:
    me = str(os.getpid())
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cmdline = (stat.parent / "cmdline").read_bytes()
        if fields[1] == me and b"resource_tracker" not in cmdline:  # python's own helper process
            children.append(int(stat.parent.name))
    return children


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
