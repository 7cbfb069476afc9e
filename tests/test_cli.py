"""The command line, run in-process through `gnnrun.cli.main` (one test through the real script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnrun.cli import main


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
    assert code == 0
    written = sorted(
        p.name for p in (tmp_path / "data" / "partitions" / "synthetic-tiny").iterdir()
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
        (["partition", "dataset=nope"], "Available options in 'dataset'"),
        (["partition", "partitioner=metsi"], "Available options in 'partitioner'"),
        (["partition", "partitioner.num_parts=abc"], "could not be converted to Integer"),
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
    ],
)
def test_bad_input_fails_with_a_clear_message(capsys, args, expected):
    code, _, err = run(capsys, *args)
    assert code != 0
    assert expected in " ".join(err.split()), err


def test_unknown_command_suggests(capsys):
    code, _, err = run(capsys, "partiton")
    assert code == 2 and "Did you mean `gnnrun partition`?" in err


def test_nothing_is_written_to_the_working_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(capsys, "data", "info", "dataset=synthetic-tiny")
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_cfg_job_prints_the_composed_config(capsys):
    code, out, err = run(capsys, "train", "--cfg", "job", "algorithm=hec", "algorithm.delay=3")
    assert code == 0 and "cache_size: 1000000" in out and "delay: 3" in out
