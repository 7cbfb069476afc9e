"""cluster=slurm on a real single-node SLURM (scripts/slurm_cluster.sh): `make test-slurm`.

The session starts SLURM (installing it with apt-get when missing) and stops
it again if it was not already running; the tests skip, saying why, only where
SLURM cannot be installed or started. Every job here really goes through
sbatch and srun: a sweep of 1- and 2-task jobs, a run without -m, a failing
rank, and the same sweep started again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gnnrun.memory import allocator_library

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm_cluster.sh"
EPOCHS = 10
SWEEP = [
    "-m",
    "dataset=synthetic-tiny",
    "algorithm=minibatch",
    f"train.epochs={EPOCHS}",
    "cluster=slurm",
    "cluster.tasks_per_node=1,2",
    "hydra.sweep.dir=sweep",
]
# A sweep's point N (overrides); a run without -m has no point.
JOB_LINE = re.compile(r"(?:point (\d+) \((.*?)\): )?SLURM job (\S+), (\d+) task")


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory) -> dict[str, str]:
    """The environment a gnnrun subprocess needs to reach the test SLURM."""
    was_running = subprocess.run([SCRIPT, "status"], capture_output=True).returncode == 0
    try:
        started = subprocess.run([SCRIPT, "start"], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip("SLURM could not be installed within 15 minutes (apt-get)")
    reason = started.stderr.strip().splitlines()[-1] if started.stderr.strip() else ""
    if started.returncode == 3:
        pytest.skip(f"SLURM cannot be installed here: {reason}")
    if started.returncode != 0:
        pytest.skip(f"SLURM could not be started here: {reason}")
    conf = subprocess.run([SCRIPT, "env"], capture_output=True, text=True, check=True).stdout
    env = dict(os.environ)
    env["SLURM_CONF"] = conf.strip().split("=", 1)[1]
    env["GNNRUN_DATA_ROOT"] = str(tmp_path_factory.mktemp("slurm-data"))
    env.pop("SLURM_JOB_ID", None)  # never look like a job step ourselves
    env.pop("SLURM_STEP_ID", None)
    yield env
    if not was_running:
        subprocess.run([SCRIPT, "stop"], capture_output=True)


def gnnrun(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 480):
    return subprocess.run(
        [sys.executable, "-m", "gnnrun.cli", "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def preloaded_allocator() -> str:
    """What a gnnrun process started here runs on (gnnrun.memory.allocator_in_use's names)."""
    library = allocator_library()
    return Path(library).name if library else "system (glibc)"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def sweep(slurm_env, tmp_path_factory):
    """The 1- and 2-task sweep, submitted once: (working dir, finished process)."""
    cwd = tmp_path_factory.mktemp("slurm-sweep")
    done = gnnrun(SWEEP, cwd, slurm_env)
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd, done


def test_every_point_of_the_sweep_ran_as_its_own_job(sweep):
    cwd, done = sweep
    jobs = {int(m[0]): (m[2], int(m[3])) for m in JOB_LINE.findall(" ".join(done.stderr.split()))}
    assert sorted(jobs) == [0, 1] and jobs[0][1] == 1 and jobs[1][1] == 2
    assert jobs[0][0] != jobs[1][0]
    assert done.stdout.splitlines()[-1] == "sweep directory: sweep"
    for point, (job_id, tasks) in jobs.items():
        run_dir = cwd / "sweep" / str(point)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["complete"] is True and summary["epochs"] == EPOCHS
        assert summary["ranks"] == tasks
        assert summary["algorithm"] == "minibatch" and summary["dataset"] == "synthetic-tiny"
        assert 0.6 < summary["final"]["test_acc"] <= 1.0  # 8 classes: chance is 0.125
        # the job's logs are where gnnrun said, one pair per task
        logs = cwd / "sweep" / ".submitit" / job_id
        for task in range(tasks):
            assert (logs / f"{job_id}_{task}_log.out").is_file()
            assert (logs / f"{job_id}_{task}_log.err").is_file()
        assert "run directory: " + str(run_dir) in " ".join(
            (logs / f"{job_id}_0_log.out").read_text().split()
        )
        assert f"done in job {job_id}" in done.stderr


def test_the_two_tasks_rendezvous_as_two_ranks(sweep, slurm_env, tmp_path):
    cwd, _ = sweep
    run_dir = cwd / "sweep" / "1"
    ranks = [read_jsonl(run_dir / f"metrics.rank{r}.jsonl") for r in (0, 1)]
    for rank, records in enumerate(ranks):
        assert [(r["epoch"], r["rank"]) for r in records] == [(e, rank) for e in range(EPOCHS)]
        # each rank pulled remote features from the other: the ranks really talked
        assert all(r["bytes"]["features"] > 0 and r["bytes"]["allreduce"] > 0 for r in records)
    assert not (cwd / "sweep" / "0" / "metrics.rank1.jsonl").exists()
    # Two SLURM tasks train exactly as two local ranks of the elastic launcher do.
    local = gnnrun([*SWEEP[1:4], "cluster.nprocs=2", "hydra.run.dir=local"], tmp_path, slurm_env)
    assert local.returncode == 0, local.stderr[-3000:]
    reference = read_jsonl(tmp_path / "local" / "metrics.rank0.jsonl")
    assert [r["loss"] for r in ranks[0]] == pytest.approx([r["loss"] for r in reference], rel=1e-4)


def test_the_same_sweep_again_submits_nothing(sweep, slurm_env):
    cwd, _ = sweep
    before = sorted(p.name for p in (cwd / "sweep" / ".submitit").iterdir())
    again = gnnrun(SWEEP, cwd, slurm_env, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    err = " ".join(again.stderr.split())
    assert "SLURM job" not in err
    assert err.count(", skipped") == 2
    assert sorted(p.name for p in (cwd / "sweep" / ".submitit").iterdir()) == before


def test_a_run_without_m_submits_one_job_and_waits(slurm_env, tmp_path):
    args = ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=2", "cluster=slurm"]
    args.append("cluster.tasks_per_node=2")
    done = gnnrun([*args, "hydra.run.dir=run"], tmp_path, slurm_env)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = JOB_LINE.findall(" ".join(done.stderr.split()))
    assert len(jobs) == 1 and jobs[0][3] == "2"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["complete"] is True
    # sbatch exports the submitting environment, so the job's ranks inherit the
    # allocator gnnrun preloaded into itself (tcmalloc where it is installed).
    assert summary["allocator_rank0"] == preloaded_allocator()
    assert (tmp_path / "run" / ".submitit" / jobs[0][2]).is_dir()
    assert f"run directory: {tmp_path / 'run'}" in " ".join(done.stdout.split())


def test_a_job_the_cluster_will_never_start_is_cancelled_and_named(slurm_env, tmp_path):
    """Two nodes on this one-node cluster: SLURM queues the job for ever (PartitionConfig
    or PartitionNodeLimit); gnnrun cancels it and says what to change."""
    args = ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=1", "cluster=slurm"]
    done = gnnrun([*args, "cluster.nodes=2", "hydra.run.dir=run"], tmp_path, slurm_env, 120)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1, err[-3000:]
    assert "SLURM will not start job" in err and "so it was cancelled" in err, err[-3000:]
    assert "cluster.nodes" in err and "cancelled SLURM job(s)" in err
    (job_id,) = [j for _, _, j, _ in JOB_LINE.findall(err)]
    queued = subprocess.run(
        ["squeue", "-h", "-t", "PD,R,CG", "-j", job_id],
        env=slurm_env,
        capture_output=True,
        text=True,
    )
    assert queued.stdout.strip() == ""


def test_a_rank_that_fails_fails_its_point_with_the_message(slurm_env, tmp_path):
    start = time.monotonic()
    args = ["dataset=cora", "paths.raw_root=/nonexistent", "algorithm=minibatch", "train.epochs=1"]
    done = gnnrun([*args, "cluster=slurm", "cluster.tasks_per_node=2"], tmp_path, slurm_env)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1, err[-3000:]
    assert "failed in job" in err and "/nonexistent/cora/raw" in err  # rank 0's own error
    assert "error: the run failed. Resume with: gnnrun train --resume-sweep" in err
    assert "point 0" not in err  # a run, not a sweep
    assert time.monotonic() - start < 120  # rank 1 did not wait for the collective timeout


def test_srun_tasks_become_ranks_directly(slurm_env, tmp_path):
    """`srun -n 2 gnnrun train cluster=slurm ...`: no submission, each task is a rank."""
    args = ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=2", "cluster=slurm"]
    command = [sys.executable, "-m", "gnnrun.cli", "train", *args, "cluster.tasks_per_node=2"]
    done = subprocess.run(
        ["srun", "-n", "2", *command], cwd=tmp_path, env=slurm_env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SLURM job" not in done.stderr
    (run_dir,) = (tmp_path / "outputs" / "train").iterdir()  # both tasks chose the same one
    assert run_dir.name.startswith("slurm-")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["allocator_rank0"] == preloaded_allocator()
    assert (run_dir / "metrics.rank1.jsonl").is_file()


def test_ctrl_c_cancels_the_submitted_jobs(slurm_env, tmp_path):
    args = ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=10000", "cluster=slurm"]
    # As in a terminal, whatever this test runs under: a shell starts background jobs
    # with SIGINT ignored, and Python then never turns Ctrl-C into KeyboardInterrupt.
    process = subprocess.Popen(
        [sys.executable, "-m", "gnnrun.cli", "train", *args, "hydra.run.dir=run"],
        cwd=tmp_path, env=slurm_env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        seen = ""
        while (match := JOB_LINE.search(" ".join(seen.split()))) is None:
            line = process.stderr.readline()
            assert line, f"gnnrun ended before submitting: {seen[-2000:]}"
            seen += line
        time.sleep(3)  # let the job start
        process.send_signal(signal.SIGINT)
        # Generous: on a loaded machine (the tests took 60 s here once, under another
        # suite) stopping the launcher and scancel take a while.
        _, rest = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, rest[-2000:]
    job_id = match.group(3)
    assert f"cancelled SLURM job(s) {job_id}" in " ".join(rest.split())
    for _ in range(40):  # scancel is asynchronous; KillWait is 5 s on the test SLURM
        queue = subprocess.run(
            ["squeue", "-h", "-t", "PD,R,CG", "-j", job_id], env=slurm_env, capture_output=True,
            text=True,
        )  # fmt: skip
        if not queue.stdout.strip():
            break
        time.sleep(0.5)
    assert not queue.stdout.strip(), f"job {job_id} still queued or running: {queue.stdout}"


def test_a_job_warned_of_its_end_checkpoints_requeues_and_resumes(slurm_env, tmp_path):
    """SIGUSR2 (what SLURM sends cluster.signal_delay_s before the time limit, and sites
    before preemption): the ranks checkpoint after their epoch, the job is requeued and
    resumes, and the finished run is the uninterrupted one."""
    run = ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=300"]
    run.append("train.checkpoint_every=1000")  # no checkpoint but the one the warning asks for
    args = [*run, "cluster=slurm", "cluster.tasks_per_node=2", "hydra.run.dir=run"]
    process = subprocess.Popen(
        [sys.executable, "-m", "gnnrun.cli", "train", *args],
        cwd=tmp_path, env=slurm_env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    metrics = tmp_path / "run" / "metrics.rank0.jsonl"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 20:
                break
            time.sleep(0.1)
        (job_dir,) = [p for p in (tmp_path / "run" / ".submitit").iterdir() if p.is_dir()]
        subprocess.run(
            ["scancel", "--signal=USR2", job_dir.name], env=slurm_env, check=True, timeout=30
        )
        out, err = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["restarts"] == 1 and summary["complete"] is True
    # SLURM_RESTART_COUNT: the job ran again (its log files are the second run's).
    # Every epoch once, the losses of a run that was never stopped (same 2 ranks).
    local = tmp_path / "local"
    done = subprocess.run(
        [sys.executable, "-m", "gnnrun.cli", "train", *run, "cluster.nprocs=2",
         f"hydra.run.dir={local}"],
        cwd=tmp_path, env=slurm_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        resumed = read_jsonl(tmp_path / "run" / f"metrics.rank{rank}.jsonl")
        plain = read_jsonl(local / f"metrics.rank{rank}.jsonl")
        assert [r["epoch"] for r in resumed] == list(range(300))
        assert [r["loss"] for r in resumed] == [r["loss"] for r in plain]


def test_a_job_at_its_time_limit_is_requeued_then_ends_checkpointed(slurm_env, tmp_path):
    """A real time limit (2 minutes, warned 30 s before; SLURM may warn up to a minute
    early, never before the job has started training then): the job checkpoints and is requeued
    once (cluster.max_requeues=1); the requeued job continues from that checkpoint, meets its
    own limit and ends, checkpointed, saying how to continue."""
    args = [
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "train.epochs=1000000",
        "cluster=slurm",
        "cluster.time_limit_min=2",
        "cluster.signal_delay_s=30",
        "cluster.max_requeues=1",
        f"train.checkpoint_dir={tmp_path}/checkpoints",
        "hydra.run.dir=run",
    ]
    done = gnnrun(args, tmp_path, slurm_env, timeout=900)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1, err[-3000:]
    assert "it was requeued 1 time(s) already (cluster.max_requeues=1)" in err, err[-3000:]
    assert "continue with train.resume=true" in err
    epochs = [r["epoch"] for r in read_jsonl(tmp_path / "run" / "metrics.rank0.jsonl")]
    assert epochs == list(range(len(epochs)))  # the second job went on from the first's end
    from gnnrun.train.checkpoint import load_checkpoint

    assert load_checkpoint(tmp_path / "checkpoints")["epoch"] == len(epochs)


def test_srun_tasks_prepare_and_partition_chunked_input_as_local_ranks(slurm_env, tmp_path):
    """`srun -n 2 gnnrun data prepare|partition cluster=slurm ...` of chunked input: task 0
    makes the directory and announces it, each task is a rank; the files are those of
    2 local ranks."""
    from gnnrun.data.chunked import write_chunks
    from gnnrun.data.synthetic import SyntheticDatasetConfig

    write_chunks(tmp_path / "tiny", SyntheticDatasetConfig(num_nodes=2000), None, 1000, 500)
    data = ["dataset=chunked", "dataset.name=tiny", "dataset.path=tiny/metadata.json"]
    roots = {"slurm": tmp_path / "slurm-data", "local": tmp_path / "local-data"}
    for command in (["data", "prepare", *data], ["partition", *data, "partitioner=random"]):
        gnnrun_command = [sys.executable, "-m", "gnnrun.cli", *command]
        done = subprocess.run(
            ["srun", "-n", "2", *gnnrun_command, "cluster=slurm", "cluster.tasks_per_node=2"],
            cwd=tmp_path, env=slurm_env | {"GNNRUN_DATA_ROOT": str(roots["slurm"])},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert "task 1: its rank wrote its share of" in done.stdout + done.stderr
        done = subprocess.run(
            [*gnnrun_command, "cluster.nprocs=2"], cwd=tmp_path, capture_output=True, text=True,
            env=slurm_env | {"GNNRUN_DATA_ROOT": str(roots["local"])}, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    for rel in ("prepared/tiny/meta.json", "partitions/tiny/random-2/manifest.json"):
        slurm_made, local_made = (json.loads((r / rel).read_text()) for r in roots.values())
        assert slurm_made["files"] == local_made["files"], rel
        assert len(slurm_made["distributed"]["ranks"]) == 2


def test_srun_tasks_predict_as_local_ranks(slurm_env, tmp_path):
    """`srun -n 2 gnnrun predict run=DIR cluster=slurm ...`: task 0 plans and prepares the
    work directory while task 1 waits, each task computes its share as a rank, task 0
    writes the manifest: the files 2 local ranks write."""
    run = tmp_path / "run"
    train = [sys.executable, "-m", "gnnrun.cli", "train", f"hydra.run.dir={run}"]
    train += ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=2", "cluster.nprocs=2"]
    done = subprocess.run(train, cwd=tmp_path, env=slurm_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    predict = [sys.executable, "-m", "gnnrun.cli", "predict", f"run={run}"]
    on_slurm = ["cluster=slurm", "cluster.tasks_per_node=2", "predict.output_dir=slurm-out"]
    done = subprocess.run(
        ["srun", "-n", "2", *predict, *on_slurm], cwd=tmp_path, env=slurm_env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "task 1: its rank wrote its share of the predictions" in done.stdout + done.stderr
    done = subprocess.run(
        [*predict, "cluster.nprocs=2", "predict.output_dir=local-out"], cwd=tmp_path,
        env=slurm_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(p.name for p in (tmp_path / "local-out").glob("*.npy"))
    assert files == sorted(p.name for p in (tmp_path / "slurm-out").glob("*.npy")) and files
    for name in files:
        assert (tmp_path / "slurm-out" / name).read_bytes() == (
            tmp_path / "local-out" / name
        ).read_bytes(), name
