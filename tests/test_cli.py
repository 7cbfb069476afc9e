"""The command line, run in-process through `gnnrun.cli.main` (one test through the real script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from gnnrun.cli import main
from gnnrun.progress import print_error


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_help_lists_commands_groups_and_options(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for word in (
        "train",
        "partition",
        "data",
        "report",
        "env",
        "synthetic-medium",
        "libra",
        "two_level",
    ):
        assert word in out


def test_console_script_runs(tmp_path):
    gnnrun = Path(sys.executable).with_name("gnnrun")
    result = subprocess.run([str(gnnrun), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "partition" in result.stdout


def test_the_command_spares_its_exit_the_collections_and_a_call_from_python_does_not(capsys):
    """The gnnrun command freezes its objects once its work is done (no collection at the
    interpreter's exit visits them: gnnrun.memory.skip_exit_collection); a call of `main`
    from Python (these tests) must leave its process's collections alone."""
    import gc

    frozen = gc.get_freeze_count()
    assert run(capsys, "env")[0] == 0
    assert gc.get_freeze_count() == frozen
    check = (
        "import gc, sys; from gnnrun.cli import main; sys.argv = ['gnnrun', 'env']; "
        "status = main(); print(status, gc.get_freeze_count())"
    )
    env = {**os.environ, "GNNRUN_ALLOCATOR": "system"}  # no restart under tcmalloc
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, env=env
    )
    status, count = result.stdout.split()[-2:]
    assert status == "0" and int(count) > 10_000, result.stdout + result.stderr


def test_env_reports_backends_and_kernels(capsys):
    code, out, _ = run(capsys, "env")
    assert code == 0
    assert "backend gloo" in out and "works" in out and "native kernels" in out


def test_data_info_and_prepare(capsys, tmp_path):
    code, out, _ = run(capsys, "data", "info", "dataset=synthetic-tiny")
    assert code == 0 and "2,000" in out and "num_edges" in out
    meta = json.loads((tmp_path / "data" / "prepared" / "synthetic-tiny" / "meta.json").read_text())
    assert meta["num_nodes"] == 2000
    code, out, _ = run(capsys, "data", "prepare", "--force", "dataset=synthetic-tiny")
    assert code == 0 and "prepared" in out


def test_partition_writes_and_prints_table(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "partition",
        "dataset=synthetic-tiny",
        "partitioner=libra",
        "partitioner.num_parts=3",
    )
    assert code == 0 and "replication factor" in out
    assert (
        tmp_path / "data" / "partitions" / "synthetic-tiny" / "libra-3" / "manifest.json"
    ).is_file()


def test_partition_of_a_link_run_counts_no_labelled_vertices(capsys, tmp_path):
    """Vertex classification's train/val/test counts mean nothing to a link run."""
    code, out, _ = run(capsys, "partition", "dataset=synthetic-tiny", "task=link")
    assert code == 0 and "cut edges" in out
    header = next(line for line in out.splitlines() if "solid" in line)
    assert "edges" in header and "train" not in header and "test" not in header
    assert "train 1." not in out  # nor their balance in the caption
    code, out, _ = run(capsys, "partition", "dataset=synthetic-tiny")
    assert "train" in next(line for line in out.splitlines() if "solid" in line)


def test_partition_multirun_sweeps(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(
        capsys,
        "partition",
        "-m",
        "dataset=synthetic-tiny",
        "partitioner=metis,random",
        "partitioner.num_parts=2,3",
    )
    assert code == 0, _  # also after a training sweep in the same process (tests)
    written = sorted(
        p.name
        for p in (tmp_path / "data" / "partitions" / "synthetic-tiny").iterdir()
        if not p.name.startswith(".")  # writers' locks
    )
    assert written == ["metis-2", "metis-3", "random-2", "random-3"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["partition", "partitioner.num_part=3"],
            "unknown config key 'partitioner.num_part'. Did you mean 'partitioner.num_parts'?",
        ),
        (["partition", "dataset.nmae=x"], "Keys of 'dataset': "),
        (["partition", "dataset=nope"], "dataset=nope: no such option. Choose from chunked,"),
        (
            ["partition", "partitioner=metsi"],
            "partitioner=metsi: no such option. Did you mean partitioner=metis? Choose from",
        ),
        (
            ["train", "-m", "model=sage,gatt"],  # every point of a sweep
            "model=gatt: no such option. Did you mean model=gat?",
        ),
        (
            ["train", "train.epochs=1,2"],
            "train.epochs=1,2: values separated by commas are a sweep: add -m",
        ),
        (["partition", "partitioner.num_parts=abc"], "partitioner.num_parts takes a whole number"),
        (["partition", "partitioner.num_parts=0"], "partitioner.num_parts must be at least 1"),
        (
            ["partition", "dataset=synthetic-tiny", "partitioner.num_parts=5000"],
            "exceeds the 2000 vertices",
        ),
        (
            [
                "partition",
                "partitioner=two_level",
                "partitioner.num_parts=3",
                "partitioner.num_machines=2",
            ],
            "must be a multiple of",
        ),
        (["data", "info", "dataset=cora", "paths.raw_root=/nonexistent"], "/nonexistent/cora/raw"),
        (["data"], "usage: gnnrun data"),
        (
            ["train", "+train.epochz=5"],
            "unknown config key 'train.epochz'. Did you mean 'train.epochs'?",
        ),
        (["train", "train.stop_after=-3"], "train.stop_after must be >= 0"),
        (["train", "cluster.nprocs=0"], "invalid config: cluster.nprocs must be at least 1"),
        (["train", "model=gat", "model.heads=0"], "model.heads must be at least 1"),
        (["train", "model=gat", "model.hidden=10", "model.heads=4"], "must be a multiple of"),
        (["train", "algorithm.fanouts=[0,0]"], "0 would train without neighbours"),
        (["train", "model.activation=tanh"], "choose one of relu, elu, gelu"),
        (["train", "model.aggregator=max"], "choose one of mean, gcn"),
        (["train", "optimizer.lr=0"], "optimizer.lr must be positive"),
        (
            ["train", "algorithm=cd0", "model.fanouts=[5,5]"],
            "'model.fanouts' is now 'algorithm.fanouts' (CHANGELOG.md): algorithm=cd0 trains "
            "full batch, and algorithm.fanouts belongs to the sampled algorithms (hec, "
            "minibatch, pipeline, single)",
        ),
        (["train", "algorithm=sar", "algorithm.batch_size=64"], "sar trains full batch"),
        (  # a sampled algorithm's mapping takes a new key with +
            ["train", "algorithm=minibatch", "algorithm.relation_fanouts.cites=[5,5]"],
            "'algorithm.relation_fanouts' is a mapping; add a key to it with "
            "+algorithm.relation_fanouts.cites=...",
        ),
        (
            [
                "train",
                "algorithm=single",
                "algorithm.mode=full",
                "+algorithm.relation_fanouts.a=[5]",
            ],
            "algorithm.relation_fanouts samples minibatches, and algorithm.mode=full takes",
        ),
        (
            ["train", "+algorithm.relation_fanouts.cites=[-2,5]"],
            "each entry is 0 or more (0 samples none of the relation's edges), or -1",
        ),
        (
            ["train", "model.fanouts=[3,3]", "algorithm.fanouts=[5,5]"],
            "'model.fanouts' and 'algorithm.fanouts' name one setting",
        ),
        (  # a mapping given whole: the section's check names the keys it takes
            ["train", "algorithm=pipeline", "algorithm.capacity={sampel: 2, fetch: 1}"],
            "algorithm.capacity has no stage 'sampel' (did you mean sample?); its stages are "
            "sample, fetch, device",
        ),
        (  # ... and a free-form mapping the way to add a key
            ["train", "cluster=slurm", "cluster.sbatch={constraint: a100}"],
            "'cluster.sbatch' is a mapping; add a key to it with +cluster.sbatch.constraint=...",
        ),
        (["train", "algorithm=pipeline", "algorithm.capacity.fetch=-1"], "capacity.fetch is -1"),
        (["train", "algorithm=pipeline", "algorithm.mode=full"], "pipeline trains minibatches"),
        (["train", "algorithm=pipeline", "algorithm.stage_nice=20"], "stage_nice is 20: give"),
        (["train", "algorithm=pipeline", "algorithm.stage_threads=-1"], "stage_threads is -1"),
        (["partition", "partitioner=libra", "partitioner.num_parts=65"], "at most 64 parts"),
        (["data", "chunk", "dataset=synthetic-tiny"], "gnnrun data chunk needs --output DIR"),
        (["data", "chunk", "--output", "x", "--edges-per-file", "many"], "give a positive whole"),
        (["data", "chunk", "--output"], "--output needs a value"),
        (
            ["partition", "partitioner=random", "partitioner.memory_gb=-1"],
            "memory_gb must be positive",
        ),
        (
            ["partition", "dataset=chunked", "dataset.path=nowhere/metadata.json"],
            "chunked graph nowhere/metadata.json not found",
        ),
        (["train", "hydra.run.dir=/proc/gnnrun-run"], "cannot write /proc/gnnrun-run"),
        (
            ["train", "dataset=synthetic-tiny", "paths.data_root=/proc/gnnrun-data"],
            "/proc/gnnrun-data",
        ),
        (
            ["train", "-m", "dataset=synthetic-tiny", "model.hidden=16,-1"],
            "sweep point 1 (dataset=synthetic-tiny model.hidden=-1): invalid config: "
            "model.hidden must be positive",
        ),
    ],
)
def test_bad_input_fails_with_a_clear_message(capsys, args, expected):
    code, _, err = run(capsys, *args)
    assert code != 0
    assert expected in " ".join(err.split()), err


@pytest.mark.parametrize(
    ("args", "new"),
    [
        (["model.lr=0.03"], "optimizer.lr"),
        (["model.fanouts=[3,4]"], "algorithm.fanouts"),
        (["algorithm=pipeline", "model.batch_size=64"], "algorithm.batch_size"),
        (["model.relation_fanouts.cites=[2,2]"], "algorithm.relation_fanouts.cites"),
        (["+model.relation_fanouts.cites=[2,2]"], "algorithm.relation_fanouts.cites"),
        (["algorithm=cdr", "algorithm.delay=2"], "algorithm.delay_epochs"),
        (["algorithm=hec", "algorithm.delay=2"], "algorithm.delay_minibatches"),
        (["cluster=hosts", "cluster.nnodes=3"], "cluster.nodes"),
    ],
)
def test_a_renamed_key_still_works_under_its_new_name(capsys, args, new):
    """An old command line runs: the old key's value lands on the new key, with a warning
    that names both."""
    code, out, err = run(capsys, "train", "--cfg", "job", *args)
    old, value = args[-1].lstrip("+").split("=")
    assert code == 0, err
    assert f"warning: '{old}' is now '{new}' (CHANGELOG.md): taken as {new}" in err
    composed = OmegaConf.create(out)
    assert OmegaConf.select(composed, new) == yaml.safe_load(value)
    assert OmegaConf.select(composed, old) is None


def test_unknown_command_suggests(capsys):
    code, _, err = run(capsys, "partiton")
    assert code == 2 and "Did you mean `gnnrun partition`?" in err


def test_nothing_is_written_to_the_working_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(capsys, "data", "info", "dataset=synthetic-tiny")
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_cfg_job_prints_the_composed_config(capsys):
    code, out, err = run(
        capsys, "train", "--cfg", "job", "algorithm=hec", "algorithm.delay_minibatches=3"
    )
    assert code == 0 and "cache_size: 1000000" in out and "delay_minibatches: 3" in out


def test_required_keys_are_set_as_documented(capsys, tmp_path):
    """`dataset.path=` and `dataset.ogb_name=` fill a required (???) key: no `+` needed."""
    graph = tmp_path / "graph.npz"
    np.savez(graph, edges=np.array([[0, 1], [1, 2]]), feat=np.eye(3), label=np.array([0, 1, 0]))
    args = ["data", "prepare", "dataset=custom", f"dataset.path={graph}", "dataset.name=mine"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "prepared mine" in out
    code, _, err = run(capsys, "data", "info", "dataset=ogbn", "dataset.ogb_name=ogbn-arxiv")
    assert code == 1 and "unknown config key" not in err and "ogbn_arxiv" in err


def test_error_text_is_printed_literally(capsys, tmp_path):
    """Square brackets in paths and in gloo's messages are text, not rich markup."""
    odd = tmp_path / "npz" / "[bold]x.npz"
    code, _, err = run(capsys, "data", "prepare", "dataset=custom", f"dataset.path='{odd}'")
    assert code == 1 and str(odd) in err
    print_error("gloo timeout [/pytorch/third_party/gloo/transport/tcp/unbound_buffer.cc:78]")
    assert "[/pytorch/third_party/gloo/transport/tcp/unbound_buffer.cc:78]" in (
        capsys.readouterr().err
    )


def test_hydra_flags_may_follow_the_overrides(capsys):
    code, out, err = run(
        capsys, "train", "cluster=slurm", "+cluster.sbatch.constraint=icelake", "--cfg", "job"
    )
    assert code == 0, err
    assert "constraint: icelake" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["train", "--resume-swep", "s"],
            "gnnrun train has no option --resume-swep (did you mean --resume-sweep?)",
        ),
        (
            ["train", "--mutlirun", "dataset=cora"],
            "has no option --mutlirun (did you mean --multirun?)",
        ),
        (
            ["data", "chunk", "dataset=synthetic-tiny", "--output", "o", "--edge-per-file", "9"],
            "gnnrun data chunk has no option --edge-per-file (did you mean --edges-per-file?); usage:",
        ),
        (["data", "prepare", "--forc", "dataset=cora"], "(did you mean --force?)"),
        (["train", "+logger=mlflow"], "+logger=mlflow: logger has a default option already"),
        (["train", "+sweep=cdr_delay"], "+sweep=cdr_delay is a sweep: add -m"),
        (
            ["train", "dataset=custom", "dataset.path=my [1].npz"],
            "cannot parse the overrides: mismatched input '[' expecting <EOF>; quote a value",
        ),
        (["train", "-m", "--cfg", "job"], "--cfg and --multirun: give one of them"),
        (
            ["train", "dataset=synthetic-tiny", "--retry-failed"],
            "--retry-failed runs a sweep's failed points again: give it with --resume-sweep",
        ),
    ],
)
def test_wrong_flags_and_group_additions_are_one_line(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 1 and message in " ".join(err.split()) and "usage: gnnrun train [" not in err


def test_data_chunk_help_prints_its_usage(capsys):
    code, out, _ = run(capsys, "data", "chunk", "--help")
    assert code == 0 and "--edges-per-file K" in out


def test_version(capsys):
    from gnnrun import __version__

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"gnnrun {__version__}"


@pytest.mark.filterwarnings("ignore:.*Error importing 'hydra_plugins")  # Hydra's plugin scan
def test_cluster_slurm_without_the_slurm_extra_names_it(capsys, monkeypatch):
    monkeypatch.delitem(sys.modules, "gnnrun.launch.slurm_launcher", raising=False)
    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_submitit_launcher.config", None)
    code, _, err = run(capsys, "train", "cluster=slurm")
    assert code == 1 and "pip install 'submitit>=1.5' 'hydra-submitit-launcher>=1.2'" in err
    code, _, err = run(capsys, "train", "--cfg", "job")  # other runs do not need it
    assert code == 0, err


ENDPOINT = "cluster.rdzv_endpoint=127.0.0.1:29400"


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["cluster=hosts", "cluster.nodes=0", "cluster.node_rank=0", ENDPOINT],
            "error: invalid config: cluster.nodes must be at least 1, not 0\n",
        ),
        (
            ["cluster=hosts", "cluster.tasks_per_node=0", "cluster.node_rank=0", ENDPOINT],
            "error: invalid config: cluster.tasks_per_node must be at least 1, not 0\n",
        ),
        (
            ["dataset=custom"],
            "error: invalid config: dataset.path is required and not given: add dataset.path=...\n",
        ),
        (
            ["model.residual=maybe"],
            "error: model.residual=maybe: model.residual takes true or false; its default is "
            "model.residual=false\n",
        ),
        (
            ["model.norm=null"],
            "error: model.norm=null: model.norm takes a string, not null or a list; its "
            "default is model.norm=none\n",
        ),
        (
            ["algorithm=minibatch", "algorithm.fanouts=3"],
            "error: algorithm.fanouts=3: algorithm.fanouts takes a list, [a,b]; its default "
            "is algorithm.fanouts=[10,25]\n",
        ),
        (
            ["model=gcn", "train.epochs=1.5"],
            "error: train.epochs=1.5: train.epochs takes a whole number; its default is "
            "train.epochs=10\n",
        ),
    ],
)
def test_invalid_config_is_one_line_naming_the_key_given(capsys, args, expected):
    """Not the interpolation that follows the key (partitioner.num_parts), not omegaconf's
    several lines."""
    code, _, err = run(capsys, "train", "dataset=synthetic-tiny", *args)
    assert code == 1 and err == expected, err
