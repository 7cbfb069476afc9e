"""Ranks forked from a server that has imported torch: what they inherit is what the
launcher has at each launch (gnnrun.launch.forkserver)."""

from __future__ import annotations

import json
import multiprocessing.forkserver
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnrun.attempt import ATTEMPT_ENV, RUN_ID_ENV
from gnnrun.errors import GnnrunError
from gnnrun.launch import forkserver
from gnnrun.launch.elastic import run_ranks
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "algorithms"))
import rank_fns  # noqa: E402
from conftest import prepared  # noqa: E402

NAMES = ["GNNRUN_TEST_SETTING", ATTEMPT_ENV, RUN_ID_ENV]


def test_ranks_are_forked_from_one_server_while_the_environment_stays(monkeypatch):
    monkeypatch.setenv("GNNRUN_TEST_SETTING", "first")
    first = run_on_ranks(rank_fns.environment_and_parent, 2, NAMES)
    server = forkserver.server_pid()
    assert server is not None and [parent for _, parent in first] == [server, server]
    again = run_on_ranks(rank_fns.environment_and_parent, 2, NAMES)
    assert forkserver.server_pid() == server and [parent for _, parent in again] == [server, server]
    # Each launch's own variables reach its ranks, not the server's of an earlier launch.
    (seen, _), (seen_again, _) = first[0], again[0]
    assert seen["GNNRUN_TEST_SETTING"] == "first" and seen[ATTEMPT_ENV] == "0"
    assert seen[RUN_ID_ENV] and seen_again[RUN_ID_ENV] not in (None, seen[RUN_ID_ENV])


def test_a_variable_changed_between_launches_reaches_the_ranks(monkeypatch):
    monkeypatch.setenv("GNNRUN_TEST_SETTING", "before")
    run_on_ranks(rank_fns.environment_and_parent, 2, NAMES)
    before = forkserver.server_pid()
    monkeypatch.setenv("GNNRUN_TEST_SETTING", "after")
    after = run_on_ranks(rank_fns.environment_and_parent, 2, NAMES)
    assert [seen["GNNRUN_TEST_SETTING"] for seen, _ in after] == ["after", "after"]
    # The server was started again, with the new environment.
    assert forkserver.server_pid() != before
    monkeypatch.delenv("GNNRUN_TEST_SETTING")
    gone = run_on_ranks(rank_fns.environment_and_parent, 2, NAMES)
    assert [seen["GNNRUN_TEST_SETTING"] for seen, _ in gone] == [None, None]


def test_a_ranks_output_goes_where_the_launchers_goes_now(tmp_path):
    run_on_ranks(rank_fns.say, 2, "before")  # the server starts with the output of now
    log = tmp_path / "output.txt"
    sys.stdout.flush()
    saved = os.dup(1)
    with open(log, "w") as file:
        os.dup2(file.fileno(), 1)
        try:
            run_on_ranks(rank_fns.say, 2, "after")
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    lines = log.read_text().splitlines()
    assert {"after from rank 0", "after from rank 1"} <= set(lines), lines


def test_spawn_on_request_and_a_wrong_choice_named(monkeypatch):
    monkeypatch.setenv(forkserver.START_METHOD_ENV, "spawn")
    assert forkserver.start_method() == "spawn"
    ranks = run_on_ranks(rank_fns.environment_and_parent, 2, NAMES)
    assert [parent for _, parent in ranks] == [os.getpid()] * 2  # this process's children
    monkeypatch.setenv(forkserver.START_METHOD_ENV, "fork")
    with pytest.raises(GnnrunError, match="GNNRUN_START_METHOD=fork: the ranks start as"):
        forkserver.start_method()


def test_a_server_started_elsewhere_is_replaced_by_one_with_gnnruns_imports():
    multiprocessing.forkserver.set_forkserver_preload([])
    multiprocessing.forkserver._forkserver.ensure_running()
    forkserver._server_started_with = None  # as in a process that has not launched yet
    assert forkserver.start_method() == "forkserver"
    assert multiprocessing.forkserver._forkserver._preload_modules == forkserver.PRELOAD
    assert os.environ.get("GNNRUN_RANK_STARTING") is None  # set only while it starts


def test_the_servers_imports_ask_cuda_nothing_and_start_no_thread():
    """A rank forked from a process that has touched CUDA cannot use it, and a thread
    (OpenMP's pool, say) is not copied by a fork: none of the server's imports may ask
    torch.cuda anything (here each question raises) or start a thread."""
    script = f"""
import os, numpy, torch, torch.cuda
threads = len(os.listdir("/proc/self/task"))  # with numpy's BLAS threads, which survive a fork
def refuse(name):
    def touched(*args, **kwargs):
        raise AssertionError(f"{{name}} asked at import")
    return touched
for name in ("is_available", "device_count", "init", "_lazy_init", "set_device",
             "current_device", "get_device_properties"):
    setattr(torch.cuda, name, refuse(name))
for name in ("_cuda_getDeviceCount", "_cuda_init"):  # what they call, on a CUDA build
    if hasattr(torch._C, name):
        setattr(torch._C, name, refuse(name))
for module in {forkserver.PRELOAD!r}:
    __import__(module)
assert len(os.listdir("/proc/self/task")) == threads, "a thread started at import"
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_ranks_forked_train_exactly_as_spawned_ones(tmp_path, monkeypatch):
    """Nothing a rank takes over from the server (its random number generators, what its
    imports cached) changes a run: the same losses, bit for bit."""
    losses = {}
    for method in ("spawn", "forkserver"):
        monkeypatch.setenv(forkserver.START_METHOD_ENV, method)
        run_dir = tmp_path / method
        run_dir.mkdir()
        cfg = prepared(
            "dataset=synthetic-tiny",
            "algorithm=minibatch",
            "train.epochs=2",
            f"train.checkpoint_dir={tmp_path / 'checkpoints' / method}",
        )
        run_ranks(cfg, run_dir)
        lines = (run_dir / "metrics.rank0.jsonl").read_text().splitlines()
        losses[method] = [json.loads(line)["loss"] for line in lines if '"loss"' in line]
    assert len(losses["spawn"]) == 2 and losses["forkserver"] == losses["spawn"]
