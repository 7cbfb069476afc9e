"""`cluster=local`: N ranks on this machine through PyTorch's elastic launcher (torchrun's machinery).

Rendezvous, failure propagation and teardown are PyTorch's: when one rank
raises or dies, the agent stops the others and `elastic_launch` raises
ChildFailedError naming the failed rank, which gnnrun reports. On SIGINT
(Ctrl-C) or SIGTERM the agent stops every rank, then gnnrun raises
KeyboardInterrupt (SIGINT) or GnnrunError (other signals).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gnnrun import RANK_STARTING_ENV
from gnnrun.errors import GnnrunError
from gnnrun.launch.rank import choose_backend


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Signals torch's elastic agent takes over (TORCHELASTIC_SIGNALS_TO_HANDLE's default).
_AGENT_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
SHUTDOWN_GRACE_S = 10  # after Ctrl-C, how long ranks have to leave before SIGKILL


def launch_local(
    entrypoint: Callable[..., Any], args: tuple, nprocs: int, timeout_s: int
) -> list[Any]:
    """Run entrypoint(*args) on `nprocs` local ranks; return every rank's result, rank order.

    A rank that raises or dies makes the agent stop all others; the error
    then names the first failed rank and its message.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # Each rank's error file lands here, so that the root cause can be found
    # even when the agent noticed a rank that only failed because of another.
    log_dir = Path(tempfile.mkdtemp(prefix="gnnrun-launch-"))
    launch = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=uuid.uuid4().hex[:12],
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{_free_port()}",
        rdzv_configs={"timeout": timeout_s},
        max_restarts=0,
        monitor_interval=0.2,
        shutdown_timeout=SHUTDOWN_GRACE_S,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=str(log_dir)),
    )
    # The agent replaces these handlers with its own, which raise SignalException,
    # and leaves them installed: put ours back afterwards (only the main thread can).
    main_thread = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in _AGENT_SIGNALS} if main_thread else {}
    os.environ[RANK_STARTING_ENV] = "1"  # inherited by the ranks only while they start
    try:
        with _quiet_agent():
            results = elastic_launch(launch, entrypoint)(*args)
    except ChildFailedError as exc:
        raise GnnrunError(_describe_failures(exc.failures, log_dir)) from None
    except SignalException as exc:  # the agent has already stopped every rank
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise GnnrunError(
            f"stopped by {signal.Signals(exc.sigval).name}; all {nprocs} ranks were stopped"
        ) from None
    finally:
        os.environ.pop(RANK_STARTING_ENV, None)
        for sig, handler in handlers.items():
            if handler is not None:  # None: set outside Python, cannot be restored
                signal.signal(sig, handler)
        shutil.rmtree(log_dir, ignore_errors=True)
    return [results[rank] for rank in range(nprocs)]


# Messages of ranks that failed only because another rank went away first.
_SECONDARY = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Socket Timeout",
)


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


def _describe_failures(failures: dict, log_dir: Path) -> str:
    """Name the rank that failed first for its own reasons, then the ones it took down."""
    messages = {rank: _failure_message(failure) for rank, failure in failures.items()}
    times = {rank: failure.timestamp for rank, failure in failures.items()}
    for error_file in log_dir.glob("**/error.json"):  # ranks the agent did not report
        rank = int(error_file.parent.name)
        if rank not in messages:
            data = json.loads(error_file.read_text()).get("message", {})
            messages[rank] = _first_line(
                data.get("message", "") if isinstance(data, dict) else str(data)
            )
            times[rank] = (
                int(data.get("extraInfo", {}).get("timestamp", 0)) if isinstance(data, dict) else 0
            )

    def cause_order(rank: int) -> tuple[bool, int, int]:
        secondary = any(marker in messages[rank] for marker in _SECONDARY)
        return secondary, times[rank], rank

    first, *others = sorted(messages, key=cause_order)
    message = messages[first].removeprefix("GnnrunError: ").removeprefix(f"rank {first}: ")
    text = f"rank {first} failed: {message}"
    if others:
        text += (
            f" ({'ranks' if len(others) > 1 else 'rank'} {', '.join(map(str, others))} failed too)"
        )
    # An exception that is not one of gnnrun's own (those name the fix) is a bug:
    # its traceback helps. A rank killed by a signal has none.
    if not messages[first].startswith(("GnnrunError: ", "killed by signal", "exit code")):
        text += "; GNNRUN_DEBUG=1 shows every rank's traceback"
    return text


def _first_line(text: str) -> str:
    return text.strip().split("\n")[0] if text else ""


def _failure_message(failure) -> str:
    """The failed rank's exception message (from its error file), or how it died."""
    data = failure.error_file_data or {}
    message = data.get("message")
    if isinstance(message, dict):
        return _first_line(message.get("message", "")) or str(message)
    if failure.exitcode and failure.exitcode < 0:
        return f"killed by signal {-failure.exitcode}"
    return message or f"exit code {failure.exitcode}"


def run_ranks(cfg, run_dir: Path) -> Any:
    """Train on cluster.nprocs local ranks; return rank 0's summary."""
    return run_rank_job(cfg, "train", str(run_dir))[0]


def run_rank_job(cfg, job: str, *args: Any) -> list[Any]:
    """Run a job of gnnrun.launch.worker.RANK_JOBS on cluster.nprocs local ranks; return
    every rank's result, in rank order."""
    from gnnrun.launch.worker import rank_main  # a rank's entry point: its module runs there

    backend = choose_backend(cfg.cluster.backend, cfg.cluster.device)
    return launch_local(
        rank_main, (cfg, backend, job, *args), cfg.cluster.nprocs, cfg.cluster.timeout_s
    )
