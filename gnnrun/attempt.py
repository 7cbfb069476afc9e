"""Which run this process belongs to, and which attempt of it: restarts and requeues.

A run is started once and may be started again without the user: gnnrun's launcher
restarts a failed group (`cluster.max_restarts`), SLURM requeues a preempted or
timed-out job. Each new attempt resumes from the run's last checkpoint, and only
from its own: the run id tells a checkpoint of this run from one an earlier run
left in the same directory. The launchers say which run and attempt through the
environment: gnnrun's elastic launcher sets GNNRUN_ATTEMPT and GNNRUN_RUN_ID (node 0's,
which its ranks hand to the other hosts' through the rendezvous store:
gnnrun.launch.watchdog), SLURM sets SLURM_JOB_ID (the same after a requeue) and
SLURM_RESTART_COUNT.

A SLURM job warned of its end (`watch_for_stop`) stops at the next epoch's end after a
checkpoint (`RunStopped`), so that its requeued attempt loses no epoch.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass

RUN_ID_ENV = "GNNRUN_RUN_ID"
ATTEMPT_ENV = "GNNRUN_ATTEMPT"


@dataclass(frozen=True)
class Attempt:
    run_id: str | None  # None: a process no launcher started (one-process algorithms)
    number: int  # 0: the first; n: after n restarts or requeues

    @property
    def restarted(self) -> bool:
        return self.number > 0


def current_attempt(env: Mapping[str, str] | None = None) -> Attempt:
    env = os.environ if env is None else env
    if ATTEMPT_ENV in env:
        return Attempt(env.get(RUN_ID_ENV), _count(env, ATTEMPT_ENV))
    if "SLURM_JOB_ID" in env and "SLURM_PROCID" in env:
        array = env.get("SLURM_ARRAY_TASK_ID")
        job = f"slurm-{env.get('SLURM_ARRAY_JOB_ID', env['SLURM_JOB_ID'])}"
        return Attempt(f"{job}_{array}" if array else job, _count(env, "SLURM_RESTART_COUNT"))
    return Attempt(None, 0)


def _count(env: Mapping[str, str], name: str) -> int:
    try:
        return max(0, int(env.get(name, "0")))
    except ValueError:
        return 0


# ------------------------------------------------------------------ stopping to be requeued

_stop_requested = threading.Event()
_stop_watched = threading.Event()


class RunStopped(Exception):
    """Every rank stopped after a checkpoint because the run was asked to (a SLURM job
    warned of its time limit or of preemption); the launcher requeues it."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"stopped after epoch {epoch}, checkpointed")
        self.epoch = epoch


def watch_for_stop(signum: int) -> None:
    """Ask the run to stop at its next epoch's end when `signum` arrives (a signal handler
    only sets a flag: the trainer checkpoints and stops where every rank agrees)."""
    _stop_watched.set()
    signal.signal(signum, lambda *_: _stop_requested.set())


def stop_watched() -> bool:
    return _stop_watched.is_set()


def stop_requested() -> bool:
    return _stop_requested.is_set()
