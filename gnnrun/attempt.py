"""Which run this process belongs to, and which attempt of it: restarts and requeues.

A run is started once and may be started again without the user: torch elastic
restarts a failed group (`cluster.max_restarts`), SLURM requeues a preempted or
timed-out job. Each new attempt resumes from the run's last checkpoint, and only
from its own: the run id tells a checkpoint of this run from one an earlier run
left in the same directory. The launchers say which run and attempt through the
environment: torch elastic sets TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT,
SLURM sets SLURM_JOB_ID (the same after a requeue) and SLURM_RESTART_COUNT. Under
torch elastic the run id is a token the ranks draw in the rendezvous store at the first
attempt (gnnrun.launch.watchdog sets it as GNNRUN_RUN_ID), since the elastic run id of
cluster=hosts is the same for every run the user starts with the same settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

RUN_ID_ENV = "GNNRUN_RUN_ID"


@dataclass(frozen=True)
class Attempt:
    run_id: str | None  # None: a process no launcher started (one-process algorithms)
    number: int  # 0: the first; n: after n restarts or requeues

    @property
    def restarted(self) -> bool:
        return self.number > 0


def current_attempt(env: Mapping[str, str] | None = None) -> Attempt:
    env = os.environ if env is None else env
    if "TORCHELASTIC_RUN_ID" in env:
        run_id = env.get(RUN_ID_ENV, env["TORCHELASTIC_RUN_ID"])
        return Attempt(run_id, _count(env, "TORCHELASTIC_RESTART_COUNT"))
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
