"""SLURM's environment -> rendezvous, without SLURM: host lists, task layouts, errors, config.

(The real thing, jobs on a single-node SLURM, is tests/launch/test_slurm_cluster.py.)
"""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR
from gnnrun.config import to_objects
from gnnrun.errors import GnnrunError
from gnnrun.launch import slurm
from gnnrun.launch.slurm import (
    expand_hostlist,
    expand_tasks_per_node,
    in_slurm_step,
    port_for_job,
    rendezvous_from_env,
    slurm_rank_cpus,
)
from gnnrun.schemas import register_schemas

# ------------------------------------------------------------------ host lists


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("node07", ["node07"]),
        ("node[01-04]", ["node01", "node02", "node03", "node04"]),
        ("a1,b[2-3,7]", ["a1", "b2", "b3", "b7"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("node[08-11]", ["node08", "node09", "node10", "node11"]),  # padding from the low bound
        ("c[9-11]", ["c9", "c10", "c11"]),
        ("gpu[1-2],cpu[001-002],login", ["gpu1", "gpu2", "cpu001", "cpu002", "login"]),
        ("r[1-2]n[3,5]", ["r1n3", "r1n5", "r2n3", "r2n5"]),  # several ranges: rack-major
        ("x-[1-2]-y[7],z", ["x-1-y7", "x-2-y7", "z"]),
        ("10.0.0.[1-2]", ["10.0.0.1", "10.0.0.2"]),
        (" host-a , host-b ", ["host-a", "host-b"]),
    ],
)
def test_host_lists_expand_in_slurm_order(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["", "node[1-", "node1-2]", "n[a-b]", "n[3-1]", "a,,b", "n[[1]]"])
def test_host_lists_it_cannot_read_raise(bad):
    with pytest.raises(ValueError):
        expand_hostlist(bad)


def test_scontrol_is_only_a_fallback(monkeypatch):
    calls = []
    monkeypatch.setattr(slurm.subprocess, "run", lambda *a, **k: calls.append(a))
    assert slurm.hostnames("node[01-02]") == ["node01", "node02"]
    assert calls == []  # expanded here, scontrol never asked
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    with pytest.raises(GnnrunError, match="cannot expand the SLURM node list 'n\\[1-'"):
        slurm.hostnames("n[1-")


@pytest.mark.parametrize(
    ("text", "counts"),
    [("2", [2]), ("2(x3)", [2, 2, 2]), ("2(x3),1", [2, 2, 2, 1]), ("4,2(x2)", [4, 2, 2])],
)
def test_tasks_per_node(text, counts):
    assert expand_tasks_per_node(text) == counts


# ------------------------------------------------------------------ rendezvous


def job_env(**extra: str) -> dict[str, str]:
    """What srun gives one task: 8 tasks, 2 per node on node[01-04], this one rank 5."""
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NODELIST": "node[01-04]",
        "SLURM_TASKS_PER_NODE": "2(x4)",
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v != "-"}


def test_rank_world_and_master_come_from_slurm():
    r = rendezvous_from_env(job_env())
    assert (r.rank, r.world_size, r.local_rank, r.local_world_size, r.node_rank) == (5, 8, 1, 2, 2)
    assert r.master_addr == "node01"
    assert r.nodes == ("node01", "node02", "node03", "node04")
    assert r.master_port == port_for_job("4242")
    assert r.env() == {
        "MASTER_ADDR": "node01",
        "MASTER_PORT": str(port_for_job("4242")),
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "2",
    }


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # one task on one node
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
             "SLURM_JOB_NODELIST": "vm", "SLURM_TASKS_PER_NODE": "1"},
            ("vm", 0, 1, 0, 1),
        ),
        # uneven layout: 3 tasks on the first node, 1 on the second; this is the last rank
        (
            {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
             "SLURM_JOB_NODELIST": "a1,b[2-3,7]", "SLURM_TASKS_PER_NODE": "3,1"},
            ("a1", 3, 4, 0, 1),
        ),
        # interface-suffixed names, SLURM_NODELIST only (older SLURM), no per-node counts
        (
            {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
             "SLURM_JOB_NODELIST": "-", "SLURM_NODELIST": "n[1-2]-ib", "SLURM_TASKS_PER_NODE": "-"},
            ("n1-ib", 2, 4, 0, 2),
        ),
        # a mixed list; the step's own counts win over the job's
        (
            {"SLURM_PROCID": "1", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
             "SLURM_JOB_NODELIST": "gpu[07-08],cpu3", "SLURM_TASKS_PER_NODE": "4(x3)",
             "SLURM_STEP_TASKS_PER_NODE": "2(x3)"},
            ("gpu07", 1, 6, 1, 2),
        ),
    ],
)  # fmt: skip
def test_task_layouts(layout, expected):
    r = rendezvous_from_env(job_env(**layout))
    assert (r.master_addr, r.rank, r.world_size, r.local_rank, r.local_world_size) == expected


def test_the_step_node_list_comes_first():
    """srun on part of an allocation: rank 0 runs on the step's first node, not the job's."""
    env = job_env(SLURM_JOB_NODELIST="node[01-04]", SLURM_STEP_NODELIST="node[03-04]")
    assert rendezvous_from_env(env).master_addr == "node03"


def test_port_is_derived_from_the_job_id_only():
    ports = {port_for_job(job) for job in range(1000, 1100)}
    assert len(ports) == 100  # neighbouring jobs (array elements) never share a port
    assert all(15000 <= p < 30000 for p in ports)
    assert (
        port_for_job("123")
        == port_for_job(123)
        == rendezvous_from_env(job_env(SLURM_JOB_ID="123", SLURM_PROCID="0")).master_port
    )
    assert rendezvous_from_env(job_env(), master_port=29555).master_port == 29555


def test_outside_slurm_the_error_names_what_is_missing():
    with pytest.raises(GnnrunError) as caught:
        rendezvous_from_env({"HOME": "/root"})
    message = str(caught.value)
    assert "not inside a SLURM job step" in message
    for name in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        assert name in message
    assert "SLURM_JOB_NODELIST" in message and "gnnrun train cluster=slurm" in message
    # in an allocation (salloc) but not in a step: only the task variables are missing
    allocation = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1", "SLURM_NTASKS": "2"}
    with pytest.raises(GnnrunError, match=r"\(SLURM_PROCID, SLURM_LOCALID not set\)"):
        rendezvous_from_env(allocation)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 lies outside SLURM_NTASKS=8"),
        ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID=2 lies outside this node's 2 task"),
        ({"SLURM_NTASKS": "eight"}, "SLURM_NTASKS='eight' is not a number"),
        ({"SLURM_TASKS_PER_NODE": "2(y4)"}, "SLURM_TASKS_PER_NODE: cannot read"),
    ],
)
def test_inconsistent_variables_are_refused(change, message):
    with pytest.raises(GnnrunError, match=message.replace("(", r"\(")):
        rendezvous_from_env(job_env(**change))


def test_a_batch_script_is_not_a_step():
    assert in_slurm_step(job_env())
    batch = job_env(SLURM_STEP_ID="-")  # sbatch's script: SLURM_PROCID=0 but no step
    assert not in_slurm_step(batch)
    assert not in_slurm_step({})


# ------------------------------------------------------------------ CPUs


class _Cluster:
    threads_per_rank = 0
    comm_cores = 0


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs sched_getaffinity")
def test_a_task_slurm_confined_keeps_its_cpus(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    mine = sorted(os.sched_getaffinity(0))  # fewer than 64: as if task/affinity bound us
    assert slurm_rank_cpus(1, 2, _Cluster()) == (mine, max(1, len(mine)))


# ------------------------------------------------------------------ config


@pytest.fixture(scope="module")
def compose_slurm():
    register_schemas()

    def compose_with(*overrides: str):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose("config", overrides=["cluster=slurm", *overrides])

    return compose_with


def test_world_size_is_nodes_times_tasks(compose_slurm):
    config = to_objects(compose_slurm("cluster.nodes=3", "cluster.tasks_per_node=2"))
    assert config.cluster.nprocs == 6 and config.partitioner.num_parts == 6


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["cluster.nprocs=4"], "cluster.nprocs (4) must be the world size under SLURM"),
        (["cluster.tasks_per_node=0"], "cluster.tasks_per_node must be at least 1"),
        (["cluster.time_limit_min=0"], "cluster.time_limit_min must be at least 1"),
        (["+cluster.sbatch.ntasks=4"], "cluster.sbatch.ntasks: gnnrun sets --ntasks from"),
        (["+cluster.sbatch.time=10"], "sets --time from cluster.time_limit_min"),
        (["cluster.master_port=80"], "cluster.master_port must be 0"),
    ],
)
def test_slurm_config_is_validated(compose_slurm, overrides, message):
    with pytest.raises(GnnrunError, match=message.replace("(", r"\(").replace(")", r"\)")):
        to_objects(compose_slurm(*overrides))


def test_launcher_gets_the_cluster_fields(compose_slurm):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "cluster=slurm",
                "cluster.nodes=2",
                "cluster.tasks_per_node=4",
                "cluster.cpus_per_task=9",
                "cluster.gpus_per_node=4",
                "cluster.partition=gpu",
                "cluster.account=proj",
                "cluster.time_limit_min=30",
                "+cluster.sbatch.constraint=a100",
            ],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.cpus_per_task) == (2, 4, 9)
    assert (launcher.gpus_per_node, launcher.partition, launcher.account) == (4, "gpu", "proj")
    assert launcher.timeout_min == 30 and dict(launcher.additional_parameters) == {
        "constraint": "a100"
    }


def test_without_slurm_tools_gnnrun_says_so(tmp_path, monkeypatch, capsys):
    from gnnrun.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, srun or squeue here
    code = main(["train", "dataset=synthetic-tiny", "cluster=slurm", "hydra.run.dir=run"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1
    assert "cluster=slurm: sbatch, srun, squeue not found on PATH" in err
    assert "Traceback" not in err


def test_a_bad_slurm_run_is_refused_before_submission(tmp_path, monkeypatch, capsys):
    from gnnrun.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # were anything submitted, sbatch would be missing
    code = main(["train", "dataset=synthetic-tiny", "cluster=slurm", "cluster.nprocs=4"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1
    assert err.startswith("error: invalid config: cluster.nprocs (4) must be the world size")
    assert "not found on PATH" not in err and not (tmp_path / "outputs").exists()


def test_a_sweep_point_its_algorithm_cannot_run_is_refused_before_submission(
    tmp_path, monkeypatch, capsys
):
    from gnnrun.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # were anything submitted, sbatch would be missing
    args = ["train", "-m", "dataset=synthetic-tiny", "cluster=slurm", "algorithm=cd0"]
    code = main([*args, "partitioner=metis", "hydra.sweep.dir=sweep"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1
    assert "partitioner=metis): error: partitioner=metis makes edge_cut partitions" in err
    assert "1 of 1 point(s) failed" in err and "not found on PATH" not in err
    assert not (tmp_path / "data").exists()  # nothing was prepared or partitioned


def test_partition_on_the_ranks_outside_a_job_step_says_how_to_start_it(
    tmp_path, monkeypatch, capsys
):
    from gnnrun.cli import main
    from gnnrun.data.chunked import write_chunks
    from gnnrun.data.synthetic import SyntheticDatasetConfig

    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    write_chunks(tmp_path / "tiny", SyntheticDatasetConfig(num_nodes=200), None)
    data = ["dataset=chunked", "dataset.name=tiny", "dataset.path=tiny/metadata.json"]
    code = main(["partition", *data, "partitioner=random", "cluster=slurm"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "Traceback" not in err
    assert "gnnrun partition cluster=slurm runs as the tasks of a job step" in err
    assert "srun -N NODES -n 1 gnnrun partition cluster=slurm" in err
    left = [p.name for p in (tmp_path / "data").rglob("*") if p.is_dir() or "tmp" in p.name]
    assert "random-1" not in left and not [n for n in left if "tmp" in n]  # nothing half-made


@pytest.mark.parametrize(
    "said, fix",
    [
        ("sbatch: fatal: Could not establish a configuration source", "cannot be reached"),
        ("sbatch: error: invalid partition specified: cpu", "cluster.partition (`sinfo -s`"),
        ("sbatch: error: Batch job submission failed: Invalid account", "cluster.account"),
        ("sbatch: error: something new", None),
    ],
)
def test_an_sbatch_refusal_says_what_to_change(said, fix):
    from gnnrun.launch.slurm_launcher import _sbatch_fix

    assert (fix in _sbatch_fix(said)) if fix else _sbatch_fix(said) == ""
