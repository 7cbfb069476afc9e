"""`gnnrun train` on several local ranks through the command line: 4 ranks end to end, Ctrl-C.

(2 ranks through `gnnrun.cli.main` are covered by tests/train/test_trainer.py.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from gnnrun.algorithms import checks
from gnnrun.cli import main
from gnnrun.memory import allocator_library


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm=cd0", "model=gat"], "supports model.name in ('sage', 'gcn'), not 'gat'"),
        (
            ["algorithm=cd0", "partitioner=metis"],
            "partitioner=metis makes edge_cut partitions but algorithm=cd0 trains on vertex_cut "
            "partitions: choose partitioner= one of libra",
        ),
        (["algorithm=cdr", "algorithm.delay_epochs=-1"], "algorithm.delay_epochs must be >= 0"),
        (["algorithm=cdr", "algorithm.backward=stale"], "algorithm.backward must be one of"),
        (
            ["algorithm=hec", "partitioner=two_level"],
            "partitioner=two_level makes one part per machine, shared by its trainers, which "
            "algorithm=hec does not share",
        ),
    ],
)
def test_distgnn_refuses_what_it_cannot_run_before_any_rank_starts(
    tmp_path, monkeypatch, capsys, overrides, message
):
    monkeypatch.chdir(tmp_path)
    code = main(["train", "dataset=synthetic-tiny", *overrides, "train.epochs=1"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and message in err
    assert "rank 0 failed" not in err  # refused in the launcher, not by a rank
    assert not (tmp_path / "data").exists()  # nothing prepared, partitioned or saved first


@pytest.mark.parametrize("given", ["afile", "afile/sub"])
def test_a_checkpoint_dir_that_is_a_file_is_refused_before_training(
    tmp_path, monkeypatch, capsys, given
):
    """The checkpoint is written after the first epochs: a file in its way is found first."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("kept")
    args = ["train", "dataset=synthetic-tiny", "algorithm=single", "train.epochs=1"]
    code = main([*args, f"train.checkpoint_dir={given}"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1
    assert f"train.checkpoint_dir={given}: afile is a file, not a directory" in err
    assert not (tmp_path / "data").exists()  # refused before preparing
    assert (tmp_path / "afile").read_text() == "kept"


def test_full_batch_trains_any_depth_without_fanouts(tmp_path, monkeypatch, capsys):
    """Fanouts are the sampled algorithms' (algorithm.fanouts): full batch takes every
    neighbour, so a third layer needs no third fanout."""
    monkeypatch.chdir(tmp_path)
    args = ["train", "dataset=synthetic-tiny", "algorithm=single", "algorithm.mode=full"]
    code = main([*args, "model.layers=3", "train.epochs=1", "hydra.run.dir=run"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs"] == 1


def test_one_process_training_takes_the_threads_a_rank_would(tmp_path, monkeypatch, capsys):
    """algorithm=single trains in gnnrun's own process: cluster.threads_per_rank sets its
    threads as it does a rank's (several such runs side by side would otherwise each take
    every core), the summary says how many, and the caller's count comes back. A
    cluster.nprocs given for it is not used, and the run says so; so are GPUs that torch
    sees and the run leaves idle."""
    monkeypatch.chdir(tmp_path)
    # One GPU seen by the check alone: torch.cuda itself must stay as it is (a CUDA build
    # of torch without a GPU would try to use it).
    monkeypatch.setattr(checks, "visible_gpus", lambda: 1)
    before = torch.get_num_threads()
    args = ["train", "dataset=synthetic-tiny", "algorithm=single", "train.epochs=1"]
    code = main([*args, "cluster.threads_per_rank=1", "cluster.nprocs=2", "hydra.run.dir=run"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "algorithm=single trains in one process: cluster.nprocs=2 is not used" in err
    assert "this torch sees 1 GPU and the run trains on CPU ranks: cluster.device=cuda" in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["threads_rank0"] == 1 and summary["ranks"] == 1
    assert torch.get_num_threads() == before


@pytest.mark.slow  # make test-slow (the default suite keeps under 10 minutes)
def test_four_ranks_train_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = [
        "train",
        "dataset=synthetic-tiny",
        "model=sage",
        "algorithm=minibatch",
        "cluster.nprocs=4",
        "train.epochs=2",
        "hydra.run.dir=run",
    ]
    assert main(args) == 0, capsys.readouterr().err
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ranks"] == 4 and summary["epochs"] == 2 and summary["complete"]
    assert 0 < summary["final"]["test_acc"] <= 1
    library = allocator_library()  # ranks inherit the preload (tcmalloc where installed)
    assert summary["allocator_rank0"] == (Path(library).name if library else "system (glibc)")
    assert summary["cpu_block_cache_rank0"].startswith("large blocks kept for reuse, ")
    for rank in range(4):
        lines = (run_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert [(r["epoch"], r["rank"]) for r in records] == [(0, rank), (1, rank)]
        assert all(r["steps"] >= 1 and "test_acc" in r for r in records)
    assert "run directory:" in capsys.readouterr().out


# ------------------------------------------------------------------ Ctrl-C


def _process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, start time) for every process now."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        table[int(stat.parent.name)] = (int(fields[1]), fields[0], fields[19])
    return table


def descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every process below `pid` (ranks, the agent's helpers)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found[child] = table[child][2]
        todo += children.get(child, [])
    return found


def still_running(processes: dict[int, str]) -> list[int]:
    """Those of `processes` still alive (the same pid and start time, not a zombie)."""
    table = _process_table()
    return [
        pid
        for pid, started in processes.items()
        if pid in table and table[pid][2] == started and table[pid][1] != "Z"
    ]


def wait_for(condition, timeout_s: float, process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.2)
    return False


@pytest.mark.faults  # signals to gnnrun and its ranks: make test-faults
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the rank processes in /proc")
@pytest.mark.parametrize(
    ("whom", "sig", "code", "message", "algorithm"),
    [
        ("group", signal.SIGINT, 130, "interrupted", "minibatch"),  # Ctrl-C in a terminal
        # The pipeline's stage threads stop with the trainer.
        ("group", signal.SIGINT, 130, "interrupted", "pipeline"),
        # kill -INT <gnnrun pid>: the ranks hear of it from the agent only
        ("launcher", signal.SIGINT, 130, "interrupted", "minibatch"),
        (
            "launcher",
            signal.SIGTERM,
            1,
            "stopped by SIGTERM; all 2 ranks were stopped",
            "minibatch",
        ),
    ],
)
def test_a_signal_stops_every_rank(tmp_path, whom, sig, code, message, algorithm):
    # A signal is the user's word: never restarted, restarts allowed or not.
    process, _ = _start_training(
        tmp_path, "model=sage", f"algorithm={algorithm}", "cluster.max_restarts=1"
    )
    try:
        ours = descendants(process.pid)
        assert len(ours) >= 2, ours  # at least the two ranks
        start = time.monotonic()
        if whom == "group":
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        process.wait(timeout=30)
        elapsed = time.monotonic() - start
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    err = (tmp_path / "err").read_text()
    assert process.returncode == code, err
    assert message in err and "Traceback" not in err and "restarting" not in err, err
    assert elapsed < 30
    # Ranks are gone by the time gnnrun exits; multiprocessing's resource
    # tracker leaves once it sees gnnrun's end of its pipe close.
    deadline = time.monotonic() + 10
    while still_running(ours) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert still_running(ours) == []


@pytest.mark.faults
def test_a_signal_stops_a_local_sweep_without_failing_its_point(tmp_path):
    """`kill` or `timeout` (SIGTERM) stops the sweep at its point, as Ctrl-C does: the point
    is not recorded as failed (a later --resume-sweep runs it) and no other point starts."""
    sweep = tmp_path / "s"
    gnnrun = Path(sys.executable).with_name("gnnrun")
    command = [str(gnnrun), "train", "-m", "dataset=synthetic-tiny", "cluster.nprocs=2"]
    command += ["train.epochs=100000", "train.seed=0,1", f"hydra.sweep.dir={sweep}"]
    with open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path)
    try:
        metrics = sweep / "0" / "metrics.rank0.jsonl"
        assert wait_for(lambda: metrics.is_file() and metrics.stat().st_size > 0, 180, process)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = " ".join((tmp_path / "err").read_text().split())
    assert process.returncode == 1, err
    assert "error: stopped by SIGTERM" in err, err
    assert "the sweep stopped at point 0 (" in err, err
    assert f"train.seed=0); gnnrun train --resume-sweep {sweep} continues it" in err, err
    assert "going on with the next point" not in err
    assert not (sweep / "failed_points.json").exists() and not (sweep / "1").exists()


@pytest.mark.faults
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the rank processes in /proc")
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_ctrl_c_while_ranks_start_prints_one_line(tmp_path, start_method):
    """Starting ranks spend seconds importing torch: the forkserver's server, or each
    spawned rank (gnnrun.launch.forkserver). Ctrl-C then must not print a traceback."""
    gnnrun = Path(sys.executable).with_name("gnnrun")
    command = [str(gnnrun), "train", "dataset=synthetic-tiny", "cluster.nprocs=2"]
    process = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
        env={**os.environ, "GNNRUN_START_METHOD": start_method},
    )
    # What imports: the server (beside the resource tracker), or the two ranks.
    starting = 2 if start_method == "forkserver" else 3
    try:
        deadline = time.monotonic() + 120
        while len(descendants(process.pid)) < starting and time.monotonic() < deadline:
            time.sleep(0.05)
        # Into their imports (torch's take seconds). The interpreter's own first tenth
        # of a second, before gnnrun is imported, is not covered.
        time.sleep(0.5)
        assert process.poll() is None and not list(tmp_path.glob("outputs/**/metrics.*"))
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()][-1] == "interrupted", err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def _start_training(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, Path]:
    """A 2-rank run (with `overrides`) in its own session and process group (what a
    terminal's Ctrl-C reaches), stderr in tmp_path/err; returned once both ranks train."""
    run_dir = tmp_path / "run"
    gnnrun = Path(sys.executable).with_name("gnnrun")
    command = [
        str(gnnrun),
        "train",
        "dataset=synthetic-tiny",
        "cluster.nprocs=2",
        "train.epochs=100000",  # still training when a signal comes
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    with open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, start_new_session=True
        )
    training = wait_for(
        lambda: all(
            (run_dir / f"metrics.rank{r}.jsonl").is_file()
            and (run_dir / f"metrics.rank{r}.jsonl").stat().st_size > 0
            for r in range(2)
        ),
        180,
        process,
    )
    if not training:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail("ranks never started training: " + (tmp_path / "err").read_text())
    return process, run_dir


def _ranks(processes: dict[int, str]) -> list[int]:
    """Those of `processes` that are ranks: the children of the server they are forked
    from (gnnrun.launch.forkserver), whose command line they share, or spawned ones."""
    commands = {}
    for pid in processes:
        with contextlib.suppress(OSError):
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
    table = _process_table()
    forked = {pid for pid, command in commands.items() if b"multiprocessing.forkserver" in command}
    return sorted(
        pid
        for pid, command in commands.items()
        if b"spawn_main" in command or (pid in table and table[pid][0] in forked)
    )


@pytest.mark.faults
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the rank processes in /proc")
def test_sigint_to_one_rank_names_it_without_the_interpreters_abort(tmp_path):
    """kill -INT of one rank: that rank is named as interrupted, and no rank prints
    "terminate called without an active exception" / "Fatal Python error: Aborted"."""
    process, _ = _start_training(tmp_path)
    try:
        ours = descendants(process.pid)
        ranks = _ranks(ours)
        assert len(ranks) == 2, ours
        os.kill(ranks[-1], signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    err = (tmp_path / "err").read_text()
    assert process.returncode == 1, err
    assert "failed: interrupted (SIGINT)" in err, err
    for noise in (
        "Fatal Python error",
        "terminate called",
        "Traceback",
        "Extension modules",
        "frame #",
    ):
        assert noise not in err, err


@pytest.mark.slow  # make test-slow: a warning on the terminal, not a result
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the rank processes in /proc")
def test_a_killed_launcher_leaves_no_resource_tracker_warning(tmp_path):
    """SIGKILL of gnnrun: multiprocessing's resource tracker cleans up its semaphores
    without warning of "leaked semaphore objects" on the terminal."""
    process, _ = _start_training(tmp_path)
    ours = descendants(process.pid)
    try:
        process.kill()
        process.wait()
        deadline = time.monotonic() + 30  # the ranks leave with their launcher
        while still_running(ours) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in _ranks({p: s for p, s in ours.items() if p in still_running(ours)}):
            os.kill(pid, signal.SIGKILL)  # ours, if they outlived it
        deadline = time.monotonic() + 30  # then the tracker, once its pipe closes
        while still_running(ours) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for pid in still_running(ours):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    err = (tmp_path / "err").read_text()
    assert still_running(ours) == []
    assert "leaked semaphore" not in err and "resource_tracker" not in err, err


@pytest.mark.faults  # a lost node 0: make test-faults
def test_the_launchers_store_client_logs_no_cpp_stack(tmp_path):
    """A host's launcher that finds node 0's store closed (the end of a cluster=hosts
    run), or cannot reach it (node 0 not started), prints no c10d message with a C++
    stack: the launcher reports the failure in one line. Ranks keep torch's log level."""
    script = textwrap.dedent(
        """
        import os, socket, time
        from datetime import timedelta
        from gnnrun import cli
        cli._import_torch_quietly()
        assert "TORCH_CPP_LOG_LEVEL" not in os.environ  # what ranks and jobs inherit
        import torch.distributed as dist
        from gnnrun.launch.watchdog import AbortWatcher
        server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        with AbortWatcher("127.0.0.1", server.port, "r", node=1):
            time.sleep(1.2)
            del server  # node 0's launcher left
            time.sleep(1.5)
        with socket.socket() as s:  # a port where no store listens
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=1))
            reached = True
        except Exception:  # the failure the launcher reports in one line
            reached = False
        assert not reached, "a store with no server answered"
        print("done")
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_CPP_LOG_LEVEL", "GNNRUN_DEBUG")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    assert "frame #" not in done.stderr and "[c10d]" not in done.stderr, done.stderr
