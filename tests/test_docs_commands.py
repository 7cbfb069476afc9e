"""Every `gnnrun` command shown in README.md and docs/ works as documented.

Commands are collected from the code blocks of the Markdown files (a block's
`$ gnnrun ...` line followed by `error: ...` lines documents a refusal: the
command must fail with that message). Each one is:

- checked fast: its overrides compose and validate (`gnnrun.cli.check_overrides`,
  what gnnrun runs before any work), every point of a sweep included;
- run for real, as typed, from an empty directory with a fresh data root and the
  real test datasets as raw root, when it is quick (the rule is `_quick`: one run
  of a small graph); the others run for real under the `slow` marker, except
  those that need a SLURM cluster, data not shipped with the tests (OGB), or
  a run directory the docs name by a placeholder: those are composed only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt

from gnnrun.cli import check_overrides
from gnnrun.config import register_schemas
from gnnrun.errors import GnnrunError

from .conftest import REPO, SHARED_DATASETS

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
HYDRA_COMMANDS = ("train", "partition", "data")
QUICK_DATASETS = ("synthetic-tiny", "cora")
SHIPPED_DATASETS = {"cora": "cora", "facebook": "facebook_pagepage", "tolokers": "tolokers"}


@dataclass
class DocCommand:
    where: str  # file:line
    argv: list[str]  # after `gnnrun`
    error: str | None  # the refusal the docs show, if they show one

    @property
    def overrides(self) -> list[str]:
        return [a for a in self.argv[1:] if "=" in a and not a.startswith("-")]

    def setting(self, key: str) -> str | None:
        values = [a.split("=", 1)[1] for a in self.overrides if a.split("=", 1)[0] == key]
        return values[-1] if values else None


def _commands() -> list[DocCommand]:
    found = []
    for doc in DOCS:
        for token in MarkdownIt().parse(doc.read_text()):
            if token.type not in ("fence", "code_block") or token.map is None:
                continue
            lines = token.content.replace("\\\n", " ").splitlines()
            for offset, line in enumerate(lines):
                text = line.strip().removeprefix("$ ")
                if not text.startswith("gnnrun ") and text != "gnnrun":
                    continue
                text = re.sub(r"\s+#.*$", "", text)
                following = lines[offset + 1] if offset + 1 < len(lines) else ""
                error = following.strip() if following.strip().startswith("error:") else None
                first = token.map[0] + (2 if token.type == "fence" else 1)  # 1-based
                where = f"{doc.relative_to(REPO)}:{first + offset}"
                found.append(DocCommand(where, shlex.split(text)[1:], error))
    return found


COMMANDS = _commands()


def _composes_only(command: DocCommand) -> str | None:
    """Why a command is not run for real (None: it is)."""
    text = " ".join(command.argv)
    if "cluster=slurm" in text or "scaling_slurm" in text:
        return "needs a SLURM cluster (make test-slurm runs those paths)"
    if "ogbn" in text:
        return "needs OGB's files, which the tests do not ship"
    if re.search(r"outputs/\S*20\d\d-|RUN_DIR|SWEEP_DIR|/path/", text):
        return "names a run directory or file by a placeholder"
    dataset = command.setting("dataset") or "synthetic-small"
    if dataset in SHIPPED_DATASETS and not (SHARED_DATASETS / SHIPPED_DATASETS[dataset]).is_dir():
        return f"the real test datasets are not at {SHARED_DATASETS}"
    return None


def _quick(command: DocCommand) -> bool:
    """One short job: help, env, or one run or partition of a small graph."""
    if command.argv[:1] in (["env"], ["--help"], ["help"]) or "--cfg" in command.argv:
        return True
    if command.argv[0] not in HYDRA_COMMANDS or "-m" in command.argv:
        return False
    dataset = command.setting("dataset") or "synthetic-small"
    if command.argv[0] == "train":
        epochs = int(command.setting("train.epochs") or 10)
        nprocs = int(command.setting("cluster.nprocs") or 2)
        return dataset in QUICK_DATASETS and epochs <= 20 and nprocs <= 2
    return dataset in (*QUICK_DATASETS, "synthetic-small", "facebook", "tolokers")


@pytest.fixture(scope="module", autouse=True)
def _schemas():
    register_schemas()


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_composes(command):
    if command.argv[0] not in HYDRA_COMMANDS or "--resume-sweep" in command.argv:
        return  # not a config command: run below
    arguments = command.argv[2:] if command.argv[0] == "data" else command.argv[1:]
    arguments = [a for a in arguments if a != "--force"]
    if command.error is None:
        check_overrides(arguments)
        return
    with pytest.raises(GnnrunError) as refusal:
        check_overrides(arguments)
    assert f"error: {refusal.value}" == command.error


def _run(command: DocCommand, cwd: Path) -> subprocess.CompletedProcess:
    gnnrun = Path(sys.executable).with_name("gnnrun")
    np.savez(  # the graph the docs' custom-dataset commands name
        cwd / "graph.npz",
        edges=np.array([[0, 1], [1, 2], [2, 3]]),
        feat=np.eye(4, dtype=np.float32),
        label=np.array([0, 1, 0, 1]),
    )
    env = {
        **os.environ,
        "GNNRUN_DATA_ROOT": str(cwd / "data"),
        "GNNRUN_RAW_ROOT": str(SHARED_DATASETS),
        "COLUMNS": "200",
    }
    return subprocess.run(
        [str(gnnrun), *command.argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        stdin=subprocess.DEVNULL,
    )


def _check_run(command: DocCommand, tmp_path: Path) -> None:
    if reason := _composes_only(command):
        pytest.skip(reason)
    done = _run(command, tmp_path)
    err = " ".join(done.stderr.split())
    if command.error is not None:
        assert done.returncode != 0 and " ".join(command.error.split()) in err, done.stderr
    else:
        assert done.returncode == 0, f"`gnnrun {' '.join(command.argv)}` failed:\n{done.stderr}"


QUICK = [c for c in COMMANDS if _quick(c)]
SLOW = [c for c in COMMANDS if not _quick(c)]


@pytest.mark.parametrize("command", QUICK, ids=[c.where for c in QUICK])
def test_documented_command_runs(command, tmp_path):
    _check_run(command, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("command", SLOW, ids=[c.where for c in SLOW])
def test_documented_long_command_runs(command, tmp_path):
    _check_run(command, tmp_path)


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20, [c.where for c in COMMANDS]
