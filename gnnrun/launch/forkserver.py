"""How the launcher starts its ranks: forked from a server that has imported torch.

A rank started afresh (multiprocessing's "spawn") spends its first 2-3 s
importing torch, torch._dynamo and gnnrun, every rank at once on the machine's
cores. The forkserver imports them once, in a server process of its own, and
forks each rank from it: on two cores, two ranks that only meet their peers
took 1.93 s spawned and 0.25 s forked once the server ran, four 3.7 s and
0.29 s (benchmarks/2026-11-29-rank-start.md). A sweep's points, a restart's
attempts and every command of one Python process start from the same server;
`gnnrun train` starts it while it prepares the dataset and partition.

The server holds no state of the launcher (it is a fresh interpreter: no
threads, no CUDA context, which a forked rank could not use), but it has the
environment and the standard output and error the launcher had when it started
it, and each rank it forks has them too. So it is started again whenever they
have changed since (a caller that set a variable between two launches, a test
whose output is captured on its own), and the variables gnnrun sets anew for
each launch (`LAUNCH_VARIABLES`) travel with the rank's arguments instead
(`in_launch_environment`); a rank then sees what a spawned one would.

A forked rank leaves through os._exit once its job has returned and its output
is flushed (multiprocessing's way for forked children): exit handlers a rank
registers (atexit) do not run, as they would in a spawned one.

GNNRUN_START_METHOD=spawn starts every rank afresh, as before.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import sys
from collections.abc import Callable
from typing import Any

from gnnrun import RANK_STARTING_ENV
from gnnrun.attempt import ATTEMPT_ENV, RUN_ID_ENV
from gnnrun.errors import GnnrunError

START_METHOD_ENV = "GNNRUN_START_METHOD"

# What the server imports before it forks: what every rank would import before its
# first step. gnnrun first: with GNNRUN_RANK_STARTING set, it makes the server, and the
# ranks it forks, leave quietly on Ctrl-C while they start (gnnrun/__init__). torch;
# torch._dynamo, which torch.optim imports at its first step (1.3 s of a rank's 3 s of
# imports); gnnrun.cli, which a rank imports as the gnnrun command's main module does;
# gnnrun's rank jobs and what they build (their registries import every algorithm,
# model, task and dataset). Not torch.utils.cpp_extension (the native kernels' builds): on
# a CUDA build it asks torch.cuda.is_available(), and a rank forked from a process
# that has asked cannot use the GPU.
PRELOAD = [
    "gnnrun",
    "torch",
    "torch._dynamo",
    "gnnrun.cli",
    "gnnrun.launch.worker",
    "gnnrun.algorithms",
    "gnnrun.train.trainer",
    "gnnrun.infer.run",
    "gnnrun.tracking",
    "gnnrun.ops.native",
    "gnnrun.launch.preloaded",  # last: freezes what the others made
]
# Set by the launcher for each launch: not a reason to start the server again.
LAUNCH_VARIABLES = (RUN_ID_ENV, ATTEMPT_ENV, RANK_STARTING_ENV)

# The elastic agent's settings, for this process (it sets TORCHELASTIC_SIGNALS_TO_HANDLE
# here at its first launch); it hands each rank the ones a rank reads.
AGENT_PREFIX = "TORCHELASTIC_"

_server_started_with: tuple | None = None  # what the running server inherited


def start_method() -> str:
    """The start method for this launch's ranks: "forkserver", the server running with this
    process's environment and standard streams (started again if they changed), or
    "spawn" when GNNRUN_START_METHOD=spawn asks for it or multiprocessing cannot restart a
    forkserver (not on Linux, say)."""
    global _server_started_with
    start_resource_tracker_quietly()  # before the server, which would start it otherwise
    server = multiprocessing.forkserver._forkserver
    chosen = os.environ.get(START_METHOD_ENV, "forkserver")
    if chosen not in ("forkserver", "spawn"):
        raise GnnrunError(
            f"{START_METHOD_ENV}={chosen}: the ranks start as forkserver (the default) or spawn"
        )
    if (
        chosen == "spawn"
        or "forkserver" not in multiprocessing.get_all_start_methods()
        or not hasattr(server, "_stop")
    ):
        return "spawn"
    inherited = _inherited()
    if inherited != _server_started_with:
        server._stop()  # returns at once when none runs
        multiprocessing.forkserver.set_forkserver_preload(PRELOAD)
        # Started with it, the server's `import gnnrun` makes its ranks leave quietly on
        # Ctrl-C until they install their own handler, as spawned ones do.
        before = os.environ.get(RANK_STARTING_ENV)
        os.environ[RANK_STARTING_ENV] = "1"
        try:
            server.ensure_running()
        finally:
            if before is None:
                del os.environ[RANK_STARTING_ENV]
            else:
                os.environ[RANK_STARTING_ENV] = before
        _server_started_with = inherited
    return "forkserver"


def start_ahead() -> None:
    """Start the server now, so that it imports while this process prepares the dataset
    and the partition: the launch then finds it ready (or starts another, if the
    environment has changed meanwhile)."""
    start_method()


def server_pid() -> int | None:
    """The process id of the server this process's ranks are forked from, if it runs."""
    return multiprocessing.forkserver._forkserver._forkserver_pid if _server_started_with else None


def launch_variables() -> dict[str, str]:
    """This launch's own variables, as `in_launch_environment` takes them."""
    return {name: os.environ[name] for name in LAUNCH_VARIABLES if name in os.environ}


def in_launch_environment(
    variables: dict[str, str], entrypoint: Callable[..., Any], *args: Any
) -> Any:
    """entrypoint(*args) in a rank, with this launch's variables set as the launcher had
    them (a forked rank has the server's, from an earlier launch)."""
    for name in LAUNCH_VARIABLES:
        if name in variables:
            os.environ[name] = variables[name]
        else:
            os.environ.pop(name, None)
    return entrypoint(*args)


def _inherited() -> tuple:
    """What a process started now inherits from this one that a rank would see: the
    environment, but for the launch's own variables, and where its output goes."""
    environment = tuple(
        sorted(
            (k, v)
            for k, v in os.environ.items()
            if k not in LAUNCH_VARIABLES and not k.startswith(AGENT_PREFIX)
        )
    )
    streams = []
    for fd in (1, 2):
        try:
            stat = os.fstat(fd)
        except OSError:  # closed
            streams.append(None)
        else:
            streams.append((stat.st_dev, stat.st_ino))
    return environment, tuple(streams)


def start_resource_tracker_quietly() -> None:
    """Start multiprocessing's resource tracker (the launch's queues and the ranks use
    it) with its stderr on /dev/null, unless it runs already.

    It unlinks the semaphores of a launcher that died without doing so (SIGKILL), and
    then warns "There appear to be N leaked semaphore objects to clean up at shutdown"
    on the terminal: nothing for the user to do, since it has cleaned them up."""
    from multiprocessing import resource_tracker

    if getattr(resource_tracker._resource_tracker, "_fd", None) is not None:
        return
    if os.environ.get("GNNRUN_DEBUG") == "1":
        resource_tracker.ensure_running()
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)  # the tracker inherits this process's stderr as it starts
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
