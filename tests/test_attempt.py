"""Which run and attempt a process is, from what each launcher sets."""

from __future__ import annotations

from gnnrun.attempt import Attempt, current_attempt


def test_gnnrun_launcher_sets_run_and_attempt():
    env = {"GNNRUN_ATTEMPT": "2", "GNNRUN_RUN_ID": "abc", "SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}
    assert current_attempt(env) == Attempt("abc", 2)
    assert current_attempt(env).restarted


def test_a_requeued_slurm_job_keeps_its_job_id_as_run_id():
    env = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "1", "SLURM_RESTART_COUNT": "1"}
    assert current_attempt(env) == Attempt("slurm-77", 1)
    array = {**env, "SLURM_ARRAY_JOB_ID": "70", "SLURM_ARRAY_TASK_ID": "3"}
    assert current_attempt(array).run_id == "slurm-70_3"


def test_a_process_no_launcher_started_is_a_first_attempt_of_no_run():
    assert current_attempt({}) == Attempt(None, 0)
    assert current_attempt({"GNNRUN_ATTEMPT": "x"}).number == 0
