"""cluster=hosts across network namespaces (tests/launch/netns.py): the same training as
one host with the same ranks, and lost hosts, cut links and hung ranks named and ended;
chunked input prepared and partitioned on the hosts' ranks as on one host's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import netns  # noqa: E402

pytestmark = pytest.mark.faults  # make test-faults

GNNRUN = str(Path(sys.executable).with_name("gnnrun"))
PORT = 29517
TIMEOUT_S = 15  # cluster.timeout_s of the fault runs
MARGIN_S = 12  # finding the lost rank, telling the other hosts, leaving


@pytest.fixture
def bed(request):
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"multi-host tests need network namespaces: {reason}")
    made = netns.TestBed(getattr(request, "param", 2))
    yield made
    made.close()


def start_hosts(bed, tmp_path: Path, overrides: list[str], env: dict | None = None):
    procs = []
    for host in range(bed.hosts):
        command = bed.train_command(host, PORT, tmp_path, overrides)
        with open(tmp_path / f"host{host}.err", "w") as err:
            procs.append(
                bed.popen(
                    host, command, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tmp_path
                )
            )
    return procs


def losses(run_dir: Path, rank: int) -> list[float]:
    lines = (run_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


def train_local(tmp_path: Path, name: str, overrides: list[str]) -> Path:
    run_dir = tmp_path / name
    command = [GNNRUN, "train", f"hydra.run.dir={run_dir}", *overrides]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.parametrize(
    "bed, algorithm",
    [(2, "minibatch"), (2, "cd0"), (2, "hec"), (3, "minibatch")],
    indirect=["bed"],
)
def test_hosts_train_as_one_host_with_the_same_ranks(bed, tmp_path, algorithm):
    run = ["dataset=synthetic-tiny", f"algorithm={algorithm}", "train.epochs=3"]
    procs = start_hosts(bed, tmp_path, run)
    for proc in procs:
        proc.wait(timeout=300)
    errors = [(tmp_path / f"host{h}.err").read_text() for h in range(bed.hosts)]
    assert [proc.returncode for proc in procs] == [0] * bed.hosts, errors
    one_host = train_local(tmp_path, "local", [*run, f"cluster.nprocs={bed.hosts}"])
    for rank in range(bed.hosts):  # host h ran rank h and wrote its metrics there
        assert losses(tmp_path / f"host{rank}", rank) == losses(one_host, rank)
    summary = json.loads((tmp_path / "host0" / "summary.json").read_text())
    assert summary["final"] == json.loads((one_host / "summary.json").read_text())["final"]
    assert not (tmp_path / "host1" / "summary.json").exists()


def wait_for_epochs(run_dir: Path, rank: int, epochs: int, procs, seconds: float = 240) -> None:
    metrics = run_dir / f"metrics.rank{rank}.jsonl"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= epochs:
            return
        if any(proc.poll() is not None for proc in procs):
            break
        time.sleep(0.05)
    pytest.fail(f"{metrics} never reached {epochs} epochs")


@pytest.mark.parametrize("fault", ["kill_host", "cut_link", "stop_rank"])
def test_a_lost_host_ends_every_rank_in_time_and_the_run_resumes(bed, tmp_path, fault):
    checkpoints = tmp_path / "checkpoints"
    run = [
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "train.epochs=8",
        "train.checkpoint_every=2",
        f"train.checkpoint_dir={checkpoints}",
    ]
    env = dict(os.environ)
    if fault == "stop_rank":  # rank 1 stops itself (SIGSTOP) after a step of epoch 5
        env["GNNRUN_FAULT"] = "stop:rank=1:epoch=5"
    procs = start_hosts(
        bed, tmp_path, [*run, "train.epochs=100000", f"cluster.timeout_s={TIMEOUT_S}"], env
    )
    try:
        wait_for_epochs(tmp_path / "host1", 1, 5, procs)
        ended = bed.strike(fault, 1, procs, TIMEOUT_S + 60)
    finally:
        bed.close()
    errors = {h: (tmp_path / f"host{h}.err").read_text() for h in range(bed.hosts)}
    for host, seconds in ended.items():
        assert procs[host].returncode == 1, errors[host]
        assert seconds < TIMEOUT_S + MARGIN_S, (fault, host, seconds)
        assert "Traceback" not in errors[host]
    # Node 0 names the lost rank and its host.
    assert f"lost rank 1 on node 1 ({os.uname().nodename}, {bed.address(1)})" in errors[0], errors[
        0
    ]
    if fault == "cut_link":  # node 1 names node 0, which it cannot reach any more
        assert f"lost node 0 ({os.uname().nodename}, {bed.address(0)})" in errors[1], errors[1]
    if fault == "stop_rank":  # node 1's launcher heard it from node 0 and ended its rank
        assert "lost rank 1 on node 1" in errors[1] and "were stopped" in errors[1]
    # Nothing half-written: no temporary files, a checkpoint that loads.
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    from gnnrun.train.checkpoint import load_checkpoint

    saved = load_checkpoint(checkpoints)
    assert saved is not None and saved["epoch"] % 2 == 0 and saved["epoch"] >= 4
    # train.resume=true on one host with the same ranks continues the same trajectory.
    resumed = train_local(tmp_path, "resumed", [*run, "cluster.nprocs=2", "train.resume=true"])
    plain = train_local(
        tmp_path,
        "plain",
        [*run[:-1], f"train.checkpoint_dir={tmp_path}/plain-ck", "cluster.nprocs=2"],
    )
    assert losses(resumed, 0) == losses(plain, 0)[saved["epoch"] :]


def test_every_host_restarts_after_a_rank_dies_and_the_run_ends_as_one_host(bed, tmp_path):
    run = ["dataset=synthetic-tiny", "algorithm=minibatch", "train.epochs=6"]
    run.append("train.checkpoint_every=2")
    env = dict(os.environ, GNNRUN_FAULT="kill:rank=1:epoch=3")  # host 1's rank, SIGKILLed
    procs = start_hosts(
        bed, tmp_path, [*run, "cluster.max_restarts=1", f"train.checkpoint_dir={tmp_path}/ck"], env
    )
    for proc in procs:
        proc.wait(timeout=300)
    errors = [(tmp_path / f"host{h}.err").read_text() for h in range(bed.hosts)]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    assert all("restart 1 of 1" in err for err in errors), errors
    assert json.loads((tmp_path / "host0" / "summary.json").read_text())["restarts"] == 1
    one_host = train_local(tmp_path, "local", [*run, "cluster.nprocs=2"])
    for rank in (0, 1):
        assert losses(tmp_path / f"host{rank}", rank) == losses(one_host, rank)


def on_hosts(bed, tmp_path: Path, port: int, command: list[str], name: str) -> list[str]:
    """`gnnrun COMMAND cluster=hosts ...` on every host at once; each host's console."""
    procs, logs = [], []
    for host in range(bed.hosts):
        logs.append(tmp_path / f"{name}-host{host}.log")
        with open(logs[-1], "w") as log:
            args = [GNNRUN, *command, *bed.cluster_overrides(host, port)]
            procs.append(bed.popen(host, args, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path))
    for proc in procs:
        proc.wait(timeout=300)
    texts = [log.read_text() for log in logs]
    assert [proc.returncode for proc in procs] == [0] * bed.hosts, texts
    return texts


def test_hosts_prepare_and_partition_chunked_input_as_one_host_then_train(bed, tmp_path):
    """`gnnrun data prepare` and `gnnrun partition` of chunked input on 2 hosts (a rank
    each, node 0's directory announced to node 1's rank, the rename done once): the files
    one host with 2 ranks writes; then training on the hosts takes that partition and
    follows the one host's losses."""
    from gnnrun.data.chunked import write_chunks
    from gnnrun.data.synthetic import SyntheticDatasetConfig

    from ..partition.test_distributed import TINY, _same_partition

    write_chunks(
        tmp_path / "tiny", SyntheticDatasetConfig(**TINY), None, edges_per_file=1000,
        rows_per_file=500,
    )  # fmt: skip
    data = ["dataset=chunked", "dataset.name=tiny-chunked", "dataset.path=tiny/metadata.json"]
    prepared = on_hosts(bed, tmp_path, PORT + 10, ["data", "prepare", *data], "prepare")
    assert "rank 1: rows [1,000, 2,000) written" in prepared[1]  # node 1's rank did its share
    assert "node 1: its ranks wrote their share of the prepared dataset" in prepared[1]
    assert "ranks preparing tiny-chunked" in prepared[0]
    # Again, at the same endpoint: node 0 finds the copy current and node 1's rank leaves.
    again = on_hosts(bed, tmp_path, PORT + 10, ["data", "prepare", *data], "again")
    assert "ranks preparing" not in again[0] and "prepared tiny-chunked" in again[0]
    assert "node 1: node 0 found the prepared dataset current, nothing to write" in again[1]
    parted = on_hosts(bed, tmp_path, PORT + 10, ["partition", *data, "partitioner=random"], "part")
    assert "rank 1: part 1 written" in parted[1]
    assert "written to" in parted[0] and "written to" not in parted[1]
    hosts_data = tmp_path / "data"
    assert not [p for p in hosts_data.rglob("*") if ".tmp" in p.name]  # renamed once, nothing left
    manifest = json.loads(
        (hosts_data / "partitions/tiny-chunked/random-2/manifest.json").read_text()
    )
    assert [r["rank"] for r in manifest["distributed"]["ranks"]] == [0, 1]

    # One host, 2 ranks, into its own data root: the same files.
    env = dict(os.environ, GNNRUN_DATA_ROOT=str(tmp_path / "one-data"))
    for command in (["data", "prepare", *data], ["partition", *data, "partitioner=random"]):
        done = subprocess.run(
            [GNNRUN, *command, "cluster.nprocs=2"], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    meta = [
        json.loads((d / "prepared/tiny-chunked/meta.json").read_text())
        for d in (hosts_data, tmp_path / "one-data")
    ]
    assert meta[0]["files"] == meta[1]["files"] and meta[0]["checksum"] == meta[1]["checksum"]
    _same_partition(
        hosts_data / "partitions/tiny-chunked/random-2",
        tmp_path / "one-data/partitions/tiny-chunked/random-2",
    )

    run = [*data, "partitioner=random", "algorithm=minibatch", "train.epochs=2"]
    procs = start_hosts(bed, tmp_path, run)
    for proc in procs:
        proc.wait(timeout=300)
    errors = [(tmp_path / f"host{h}.err").read_text() for h in range(bed.hosts)]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    assert "partitioning" not in errors[0]  # the hosts' partition was taken as it is
    done = subprocess.run(
        [GNNRUN, "train", *run, "cluster.nprocs=2", f"hydra.run.dir={tmp_path / 'local'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        assert losses(tmp_path / f"host{rank}", rank) == losses(tmp_path / "local", rank)


def test_hosts_predict_and_embed_as_one_host_with_the_same_ranks(bed, tmp_path):
    """`gnnrun predict` and `embed` of a run on 2 hosts (a rank each; node 0 plans, prepares
    the work directory and writes the manifest, node 1's rank computes and writes its
    shard) write the files one host with 2 ranks writes."""
    run = tmp_path / "run"
    train_local(tmp_path, "run", ["dataset=synthetic-tiny", "algorithm=minibatch",
                                  "train.epochs=2", "cluster.nprocs=2"])  # fmt: skip
    outputs = {}
    for kind in ("predict", "embed"):
        hosts_out, local_out = tmp_path / f"{kind}-hosts", tmp_path / f"{kind}-local"
        command = [kind, f"run={run}", f"predict.output_dir={hosts_out}"]
        texts = on_hosts(bed, tmp_path, PORT + 20, command, kind)
        what = "predictions" if kind == "predict" else "embeddings"
        assert f"node 1: its ranks wrote their share of the {what}" in texts[1]
        assert f"written to {hosts_out}" in texts[0]
        done = subprocess.run(
            [GNNRUN, kind, f"run={run}", f"predict.output_dir={local_out}", "cluster.nprocs=2"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        outputs[kind] = hosts_out, local_out
    # Again onto the finished output: every host refuses at once (node 1 does not wait for
    # node 0's ranks until cluster.join_timeout_s).
    again = ["predict", f"run={run}", f"predict.output_dir={outputs['predict'][0]}"]
    procs = [
        bed.popen(host, [GNNRUN, *again, *bed.cluster_overrides(host, PORT + 21)],
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        for host in range(bed.hosts)
    ]  # fmt: skip
    for proc in procs:
        text, _ = proc.communicate(timeout=120)
        assert proc.returncode == 1 and "already holds a finished output" in text, text
    for hosts_out, local_out in outputs.values():
        files = sorted(p.name for p in local_out.glob("*.npy"))
        assert files and files == sorted(p.name for p in hosts_out.glob("*.npy"))
        for name in files:
            assert (hosts_out / name).read_bytes() == (local_out / name).read_bytes(), name
        manifests = [json.loads((d / "manifest.json").read_text()) for d in (hosts_out, local_out)]
        assert manifests[0]["shards"] == manifests[1]["shards"]
        assert [r["rank"] for r in manifests[0]["per_rank"]] == [0, 1]
