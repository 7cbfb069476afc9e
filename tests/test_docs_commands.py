"""Every `gnnrun` command shown in README.md and docs/**/*.md works as shown.

Collected (`_collect_text`), from whatever Markdown files exist:

- every line of a code block (fenced or indented) that starts with `gnnrun`,
  after an optional `$ ` prompt, `VAR=value` assignments or an `srun ...`
  prefix; trailing `# comments` are dropped, backslash-continued lines joined
  and `...` (the user's own arguments) left out. A `gnnrun ...` line followed
  by an `error: ...` line documents a refusal: the command must fail with
  that message;
- every inline code span that is a whole command (`gnnrun` and an argument
  besides the command's name, such as the custom-dataset command in the
  README's Datasets section); a bare `gnnrun train` in prose is a mention.
  `make ...` lines are out of scope. Test ids are `file:line`.

What runs:

- fast, every config command (train, partition, data): its overrides compose
  and validate with gnnrun's own check (`gnnrun.cli.check_overrides`, what
  `gnnrun` runs before any work; every point of a `-m` sweep, and of a
  `+sweep=NAME` config too), so that an override gnnrun refuses fails with
  gnnrun's message;
- quick, for real (`make test-docs`, which CI runs after the default suite),
  through the installed `gnnrun` entry point, as typed, from an empty
  directory with a fresh GNNRUN_DATA_ROOT and the real test datasets
  (../shared/datasets, also where a documented GNNRUN_RAW_ROOT points) as
  GNNRUN_RAW_ROOT, when `_is_fast` says so: `--help`, `--version`, `env`,
  `report`, `--resume-sweep`, the README's `predict` (of a tiny run) and
  Hydra's `--cfg`/`--help` prints; data and
  partition commands on a small dataset (synthetic tiny/small, Cora,
  Facebook, Tolokers, a custom .npz) with at most 8 sweep points; train
  commands of one run on synthetic-tiny, Cora or a custom .npz with at most
  10 epochs (the default) and 2 ranks, each run for at most FAST_TRAIN_EPOCHS
  epochs (the rest of the command as typed: its setup, epochs, evaluation,
  checkpoint and summary all run). Files the docs assume are made here: the custom
  graph.npz (32 features, as synthetic-tiny has, so that a model trained there
  predicts on it); for `gnnrun report`, `predict`, `embed` and `--resume-sweep`,
  a finished 1-epoch synthetic-tiny sweep of 2 points (made once per module, with
  train.keep_best; its
  point 0 serves as a run, its checkpoints go with it; for `--resume-sweep` its
  point 1 is marked unfinished), copied to the paths the docs name (RUN_DIR, OTHER_RUN_DIR and SWEEP_DIR stand for
  paths of their own);
- slow (`make test-slow`), for real: every other command (larger graphs, more
  epochs or ranks, sweeps);
- composed only (the real run is skipped with the reason): SLURM commands
  (`cluster=slurm`, `+sweep=scaling_slurm`, `srun`; never submitted), multi-host
  ones (`cluster=hosts`),
  datasets whose raw files the tests do not have (OGB, CiteSeer, PubMed: the
  tests never download) or a real dataset missing from ../shared/datasets,
  other placeholders, commands that choose an experiment tracker (`logger=...`: make
  test-tracking runs the trackers), and a repeat of a command that runs at its first place
  in the docs.

On 2 cores the default suite's part of this file (composing every command)
takes about 40 s alone, `make test-docs` about 3 minutes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt
from omegaconf import OmegaConf

from gnnrun.cli import CONFIG_DIR, check_overrides, chunk_options
from gnnrun.config import TrainConfig, default_local_ranks, to_objects
from gnnrun.errors import GnnrunError
from gnnrun.schemas import register_schemas

from .conftest import REPO, SHARED_DATASETS

DOCS = [p for p in [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))] if p.is_file()]
BIN = Path(sys.executable).parent  # the virtual environment's bin, where `gnnrun` is installed
HYDRA_COMMANDS = ("train", "partition", "data")
COMMAND_WORDS = {"train", "partition", "data", "info", "prepare", "chunk", "report", "env"}
COMMAND_WORDS |= {"predict", "embed"}
INFERENCE_COMMANDS = ("predict", "embed")

# The fast rule's sizes (see `_is_fast`).
SMALL_DATASETS = {"synthetic-tiny", "synthetic-small", "cora", "facebook", "tolokers", "custom"}
SMALL_DATASETS |= {"synthetic-hetero-tiny", "synthetic-hetero"}
TRAIN_FAST_DATASETS = {"synthetic-tiny", "synthetic-hetero-tiny", "cora", "custom"}
FAST_MAX_EPOCHS, FAST_MAX_RANKS, FAST_MAX_POINTS = 10, 2, 8
FAST_TRAIN_EPOCHS = 2
FAST_TIMEOUT_S, SLOW_TIMEOUT_S = 300, 4 * 3600
# Real datasets and the folder of ../shared/datasets they are read from; any other
# dataset but the generated ones needs raw files the tests do not have.
SHIPPED = {"cora": "cora", "facebook": "facebook_pagepage", "tolokers": "tolokers"}
GENERATED = {"synthetic-tiny", "synthetic-small", "synthetic-medium", "synthetic-large", "custom"}
GENERATED |= {"synthetic-hetero-tiny", "synthetic-hetero", "synthetic-hetero-medium"}
GENERATED |= {"chunked"}  # synthetic-tiny in chunks, written where dataset.path says
# Placeholders the docs use for directories, and what stands for them here.
RUN_PLACEHOLDERS = {
    "RUN_DIR": "outputs/train/run-a",
    "OTHER_RUN_DIR": "outputs/train/run-b",
    "SWEEP_DIR": "outputs/multirun/sweep",
}


def _config_defaults() -> dict[str, str]:
    """config.yaml's group choices, train.epochs and cluster=local's nprocs on the CPU (a
    GPU command's are its GPUs): the rule's defaults."""
    root = OmegaConf.load(CONFIG_DIR / "config.yaml")
    choices = {k: str(v) for d in root.defaults if not isinstance(d, str) for k, v in d.items()}
    epochs = {f.name: f.default for f in dataclasses.fields(TrainConfig)}["epochs"]
    return {
        **choices,
        "train.epochs": str(epochs),
        "cluster.nprocs": str(default_local_ranks("cpu")),
    }


DEFAULTS = _config_defaults()


# ------------------------------------------------------------------ collection


@dataclass
class DocCommand:
    where: str  # file:line
    text: str  # as written (comment dropped, continuation lines joined)
    argv: list[str]  # after `gnnrun`
    env: dict[str, str] = field(default_factory=dict)  # VAR=value before it
    launcher: list[str] = field(default_factory=list)  # e.g. srun -n 4
    error: str | None = None  # the refusal the docs show, if they show one
    elided: bool = False  # the docs wrote `...` for the user's own arguments

    @property
    def command(self) -> str:
        return self.argv[0] if self.argv else ""

    @property
    def config_arguments(self) -> list[str]:
        """What gnnrun passes to its override check (`data ACTION`, --force and `data
        chunk`'s own flags removed)."""
        rest = self.argv[2:] if self.command == "data" else self.argv[1:]
        if self.argv[:2] == ["data", "chunk"]:
            rest = chunk_options(rest)[1]
        return [a for a in rest if a != "--force"]

    @property
    def is_config_command(self) -> bool:
        return self.command in HYDRA_COMMANDS and "--resume-sweep" not in self.argv

    def shown(self) -> str:
        env = [f"{k}={v}" for k, v in self.env.items()]
        return " ".join([*env, *self.launcher, "gnnrun", *self.argv])


def _parse(text: str) -> tuple[dict[str, str], list[str], list[str], bool] | None:
    """(env, launcher, argv after gnnrun, elided) of a command line, None if not gnnrun's."""
    text = re.sub(r"<([^<>]+)>", lambda m: m.group(1).upper().replace(" ", "_"), text)
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:
        return None
    env, launcher = {}, []
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", tokens[0]):
        name, value = tokens.pop(0).split("=", 1)
        env[name] = value
    if tokens[:1] == ["srun"]:
        while tokens and tokens[0] != "gnnrun":
            launcher.append(tokens.pop(0))
    if tokens[:1] != ["gnnrun"]:
        return None
    argv = [t for t in tokens[1:] if t != "..."]
    return env, launcher, argv, len(argv) < len(tokens) - 1


def _block_commands(name: str, token) -> list[DocCommand]:
    first = token.map[0] + (2 if token.type == "fence" else 1)  # 1-based line of the content
    lines = token.content.splitlines()
    found, at = [], 0
    while at < len(lines):
        start, text = at, lines[at]
        while text.rstrip().endswith("\\") and at + 1 < len(lines):
            at += 1
            text = text.rstrip()[:-1] + " " + lines[at].strip()
        at += 1
        parsed = _parse(text.strip().removeprefix("$ "))
        if parsed is None:
            continue
        following = lines[at].strip() if at < len(lines) else ""
        error = following if following.startswith("error:") else None
        env, launcher, argv, elided = parsed
        where = f"{name}:{first + start}"
        found.append(DocCommand(where, text.strip(), argv, env, launcher, error, elided))
    return found


def _inline_commands(name: str, token, source: list[str]) -> list[DocCommand]:
    found = []
    for child in token.children or []:
        if child.type != "code_inline":
            continue
        parsed = _parse(child.content)
        arguments = [a for a in parsed[2] if a not in COMMAND_WORDS] if parsed else []
        if not [a for a in arguments if not re.fullmatch(r"[A-Z][A-Z_]+", a)]:
            continue  # not a command, or a command's name (a mention in prose: `gnnrun train`)
        # the span's own line, within the paragraph or table row it is in
        words = r"\s+".join(re.escape(w) for w in child.content.split())
        span = "\n".join(source[token.map[0] : token.map[1]])
        match = re.search(r"`+\s*" + words, span)
        line = token.map[0] + 1 + (span.count("\n", 0, match.start()) if match else 0)
        env, launcher, argv, elided = parsed
        found.append(DocCommand(f"{name}:{line}", child.content, argv, env, launcher, None, elided))
    return found


def _collect_text(name: str, text: str) -> list[DocCommand]:
    found = []
    for token in MarkdownIt().enable("table").parse(text):
        if token.map is None:
            continue
        if token.type in ("fence", "code_block"):
            found += _block_commands(name, token)
        elif token.type == "inline":
            found += _inline_commands(name, token, text.splitlines())
    return found


COMMANDS = [
    c for doc in DOCS for c in _collect_text(doc.relative_to(REPO).as_posix(), doc.read_text())
]


# ------------------------------------------------------------ sweep points


def _settings(arguments: list[str]) -> list[str]:
    """The overrides among the arguments (Hydra's flags and their values left out)."""
    from gnnrun.cli import _split_flags

    return _split_flags(arguments)[1]


def _sweep_config(settings: list[str]) -> str | None:
    names = [s.split("=", 1)[1] for s in settings if s.startswith("+sweep=")]
    return names[-1] if names else None


def _points(command: DocCommand) -> list[list[str]]:
    """Every run the command starts, as Hydra expands it: a `-m` sweep's points, with
    the parameters of a `+sweep=NAME` config that the command line does not replace."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    settings = [s for s in _settings(command.config_arguments) if not s.startswith("hydra")]
    if not {"-m", "--multirun"} & set(command.argv):
        return [settings]
    name = _sweep_config(settings)
    if name is not None:
        settings = [s for s in settings if not s.startswith("+sweep=")]
        given = {s.split("=", 1)[0] for s in settings}
        params = OmegaConf.load(CONFIG_DIR / "sweep" / f"{name}.yaml").hydra.sweeper.params
        settings += [f"{k}={v}" for k, v in params.items() if k not in given]
    parsed = OverridesParser.create().parse_overrides(settings)
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def _points_or_none(command: DocCommand) -> list[list[str]] | None:
    """The points, or None where the docs' overrides do not even parse (the compose test
    then fails with gnnrun's message; collection must not)."""
    try:
        return _points(command)
    except Exception:
        return None


def _value(point: list[str], key: str) -> str:
    values = [s.split("=", 1)[1] for s in point if s.split("=", 1)[0] == key]
    return values[-1] if values else DEFAULTS[key]


def _datasets(command: DocCommand) -> set[str]:
    points = _points_or_none(command) if command.is_config_command else None
    return {_value(point, "dataset") for point in points or []}


# ------------------------------------------------------------------- the rule


def _composes_only(command: DocCommand, first: dict[str, str]) -> str | None:
    """Why the command is not run for real here (None: it is)."""
    if (
        command.launcher
        or "cluster=slurm" in command.argv
        or "+sweep=scaling_slurm" in command.argv
    ):
        return "needs a SLURM cluster: composed only, never submitted (make test-slurm submits)"
    if "cluster=hosts" in command.argv:
        return (
            "needs several hosts: composed only (make test-faults runs them in network namespaces)"
        )
    if any(a.startswith("logger=") and a != "logger=none" for a in command.argv):
        return (
            "chooses an experiment tracker (its extra, a server, the network for W&B online): "
            "composed only (make test-tracking runs them against the real tools)"
        )
    datasets = _datasets(command)
    if any(d.startswith("ogbn") for d in datasets):
        return "needs the OGB archive (ogbn data), which the tests never download"
    if absent := sorted(datasets - GENERATED - SHIPPED.keys()):
        return f"needs raw files of {', '.join(absent)}, not among the test datasets (never downloaded)"
    tokens = [a.split("=", 1)[-1] for a in command.argv]
    if unknown := [
        t for t in tokens if re.fullmatch(r"[A-Z][A-Z_]+", t) and t not in RUN_PLACEHOLDERS
    ]:
        return f"names a placeholder ({', '.join(unknown)})"
    for dataset in sorted(datasets & SHIPPED.keys()):
        if not (SHARED_DATASETS / SHIPPED[dataset]).is_dir():
            return f"{dataset}: real test datasets not found at {SHARED_DATASETS} (set GNNRUN_TEST_DATASETS)"
    if first[command.shown()] != command.where:
        return f"the same command as {first[command.shown()]}, which runs it"
    return None


def _is_fast(command: DocCommand) -> bool:
    """The explicit rule: what runs for real in the default suite (the rest is slow)."""
    if command.command in INFERENCE_COMMANDS:  # the README's run fast, docs/inference.md's slow
        return command.where.startswith("README.md")
    if not command.is_config_command:  # --help, env, report, --resume-sweep (of a tiny sweep)
        return True
    if {"--cfg", "-c", "--help", "-h", "--info", "-i"} & set(command.argv):
        return True  # Hydra only prints
    points = _points_or_none(command)
    if points is None:
        return True  # refused at once
    if command.argv[:2] == ["data", "chunk"]:  # 4-7 s each; tests/data/test_chunked.py is fast
        return False
    if command.command in ("data", "partition"):
        return len(points) <= FAST_MAX_POINTS and _datasets(command) <= SMALL_DATASETS
    if any("task=link" in p for p in points):  # 10-35 s each; tests/algorithms/test_link.py
        return False  # trains link prediction in the default suite
    try:
        return len(points) == 1 and all(
            _value(p, "dataset") in TRAIN_FAST_DATASETS
            and int(_value(p, "train.epochs")) <= FAST_MAX_EPOCHS
            and int(_value(p, "cluster.nprocs")) <= FAST_MAX_RANKS
            for p in points
        )
    except ValueError:  # not a number: refused at once
        return True


FIRST: dict[str, str] = {}
for _c in COMMANDS:
    FIRST.setdefault(_c.shown(), _c.where)
SKIPPED = {c.where: _composes_only(c, FIRST) for c in COMMANDS}


def _run_marks(command: DocCommand) -> list:
    """`make test-docs` runs the quick commands, `make test-slow` the rest."""
    if SKIPPED[command.where] is not None:
        return []  # skips at once, saying why
    return [pytest.mark.docs] if _is_fast(command) else [pytest.mark.slow]


def _run_param(command: DocCommand):
    return pytest.param(command, id=command.where, marks=_run_marks(command))


# ------------------------------------------------------------ composition


@pytest.fixture(scope="module")
def _schemas():
    register_schemas()


def _check_sweep_config_points(command: DocCommand) -> None:
    """gnnrun checks a `+sweep=NAME` config's points only as each starts: check them all now."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    name = _sweep_config(_settings(command.config_arguments))
    points = _points(command)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for number, point in enumerate(points):
            try:
                to_objects(compose("config", overrides=[f"+sweep={name}", *point]))
            except (HydraException, GnnrunError) as exc:
                cause = f": {exc.__cause__}" if exc.__cause__ else ""
                pytest.fail(
                    f"`{command.shown()}` ({command.where}), point {number} of +sweep={name} "
                    f"({' '.join(point)}): {exc}{cause}"
                )


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c.is_config_command], ids=lambda c: c.where
)
def test_documented_command_composes(command, _schemas):
    arguments = command.config_arguments
    if command.error is not None:
        try:
            check_overrides(arguments)
        except GnnrunError as refusal:
            assert " ".join(f"error: {refusal}".split()) == " ".join(command.error.split())
            return
        # Refused once the dataset is read (say, a heterogeneous one): the real run checks it.
        assert SKIPPED[command.where] is None, (
            f"`{command.shown()}` ({command.where}) composes, and its refusal is not checked "
            f"by a real run here ({SKIPPED[command.where]})"
        )
        return
    try:
        check_overrides(arguments)
    except GnnrunError as exc:
        pytest.fail(f"gnnrun refuses `{command.shown()}` ({command.where}):\nerror: {exc}")
    if {"-m", "--multirun"} & set(command.argv) and _sweep_config(_settings(arguments)):
        _check_sweep_config_points(command)


# ------------------------------------------------------------- real runs


def _gnnrun(argv: list[str], cwd: Path, env: dict[str, str], timeout: float):
    """Run the installed `gnnrun` as a user would; on a timeout its whole process group goes."""
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    full_env = {
        **os.environ,
        **env,
        "PATH": path,
        "GNNRUN_DATA_ROOT": str(cwd.parent / "data"),
        "GNNRUN_RAW_ROOT": str(SHARED_DATASETS),  # where the docs' ../shared/datasets is
        "COLUMNS": "200",
    }
    executable = shutil.which("gnnrun", path=path)
    assert executable is not None and Path(executable).parent == BIN, executable
    process = subprocess.Popen(
        [executable, *argv],
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"`gnnrun {' '.join(argv)}` still ran after {timeout} s:\n{stderr[-4000:]}")
    return process.returncode, stdout, stderr


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory) -> dict[str, Path]:
    """A finished 2-point sweep (synthetic-tiny, 1 epoch, its best models kept for
    predict.checkpoint=best), made once; its point 0 is the run."""
    work = tmp_path_factory.mktemp("doc-runs") / "work"  # its data root: doc-runs/data
    work.mkdir()
    argv = ["train", "-m", "dataset=synthetic-tiny", "algorithm=single", "train.epochs=1"]
    argv += ["train.seed=0,1", "train.keep_best=true", "hydra.sweep.dir=sweep"]
    rc, _, err = _gnnrun(argv, work, {}, FAST_TIMEOUT_S)
    assert rc == 0, f"making a sweep for the report commands: gnnrun {' '.join(argv)}\n{err}"
    return {"run": work / "sweep" / "0", "sweep": work / "sweep", "data": work.parent / "data"}


def _write_graph(path: Path) -> None:
    """A custom graph in the documented .npz format: 300 vertices, 3 classes, 32 features."""
    rng = np.random.default_rng(0)
    label = np.arange(300) % 3
    edges = rng.integers(0, 300, size=(1500, 2))
    feat = (np.eye(3)[label] @ rng.normal(size=(3, 32)) + rng.normal(size=(300, 32))).astype(
        np.float32
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, edges=edges, feat=feat, label=label)


def _write_chunks(metadata: Path) -> None:
    """synthetic-tiny in the chunked format (docs/large-graphs.md), its metadata.json at `metadata`."""
    from gnnrun.data.chunked import write_chunks
    from gnnrun.data.synthetic import SyntheticDatasetConfig

    cfg = SyntheticDatasetConfig(
        name="synthetic-tiny", num_nodes=2000, avg_degree=10, num_classes=8, feat_dim=32,
        max_degree_fraction=0.05,
    )  # fmt: skip
    write_chunks(metadata.parent, cfg, None, edges_per_file=4000, rows_per_file=500)


def _placed(argument: str) -> str:
    """The argument with a placeholder (`RUN_DIR`, or `run=RUN_DIR`) replaced."""
    key, _, value = argument.partition("=")
    if key == "run":
        return f"run={RUN_PLACEHOLDERS.get(value, value)}"
    return RUN_PLACEHOLDERS.get(argument, argument)


def _place_inputs(command: DocCommand, cwd: Path, request) -> list[str]:
    """Make the files the command assumes; return its arguments with placeholders replaced."""
    argv = [_placed(a) for a in command.argv]
    for argument in argv:
        key, _, value = argument.partition("=")
        if key == "dataset.path" and not Path(value).is_absolute():
            if "dataset=chunked" in argv:
                _write_chunks(cwd / value)
            else:
                _write_graph(cwd / value)
    if command.command in INFERENCE_COMMANDS:
        runs = request.getfixturevalue("finished_runs")
        run = [a.split("=", 1)[1] for a in argv if a.startswith("run=")]
        if not run:  # inline code that names the command and a setting, not a command
            pytest.fail(f"{command.where}: `{command.text}` has no run=: write it whole")
        shutil.copytree(runs["run"], cwd / run[-1])
        shutil.copytree(runs["data"] / "checkpoints", cwd.parent / "data" / "checkpoints")
    if command.command == "report" or "--resume-sweep" in argv:
        runs = request.getfixturevalue("finished_runs")
        for directory in [a for a in argv[1:] if a.startswith("outputs/")]:
            sweep = "multirun" in directory or "--resume-sweep" in argv
            shutil.copytree(runs["sweep" if sweep else "run"], cwd / directory)
            if "--resume-sweep" in argv:  # interrupted in its second point
                summary = cwd / directory / "1" / "summary.json"
                summary.write_text(
                    json.dumps({**json.loads(summary.read_text()), "complete": False})
                )
    return argv


def _fewer_epochs(argv: list[str]) -> list[str]:
    """A single run's arguments with train.epochs at most FAST_TRAIN_EPOCHS (the default
    suite's time goes to what differs between commands, not to their later epochs)."""
    if {"-m", "--multirun"} & set(argv):
        return argv
    given = [a for a in argv if a.startswith("train.epochs=")]
    epochs = int(given[-1].split("=", 1)[1]) if given else int(DEFAULTS["train.epochs"])
    kept = [a for a in argv if not a.startswith("train.epochs=")]
    return [*kept, f"train.epochs={min(epochs, FAST_TRAIN_EPOCHS)}"]


@pytest.mark.parametrize("command", [_run_param(c) for c in COMMANDS])
def test_documented_command_runs(command, tmp_path, request):
    if reason := SKIPPED[command.where]:
        pytest.skip(reason)
    cwd = tmp_path / "work"
    cwd.mkdir()
    argv = _place_inputs(command, cwd, request)
    fast = _is_fast(command)
    if fast and command.command == "train" and command.is_config_command and not command.error:
        argv = _fewer_epochs(argv)
    timeout = FAST_TIMEOUT_S if fast else SLOW_TIMEOUT_S
    rc, stdout, stderr = _gnnrun(argv, cwd, command.env, timeout)
    typed = f"`{command.shown()}` ({command.where})"
    if command.error is not None:
        assert rc != 0, f"{typed} should be refused with: {command.error}\n{stderr[-4000:]}"
        assert " ".join(command.error.split()) in " ".join(stderr.split()), (
            f"{typed} was refused with another message than the docs show ({command.error}):\n"
            f"{stderr[-4000:]}"
        )
    else:
        assert rc == 0, f"{typed} failed (exit {rc}):\n{stderr[-6000:]}\n{stdout[-2000:]}"


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20, [c.where for c in COMMANDS]
    assert len({c.where for c in COMMANDS}) == len(COMMANDS), "ids are unique"


def test_the_collector():
    """Blocks (prompts, comments, continuations, env, `...`, refusals) and whole inline commands."""
    text = "\n".join(
        [
            "Prose: `gnnrun train` is a mention; `gnnrun data prepare dataset=custom",
            "dataset.path=graph.npz` is a command.",
            "",
            "    $ gnnrun train dataset=cora \\",
            "        train.epochs=2   # a comment",
            "    make test",
            "    GNNRUN_ALLOCATOR=system gnnrun train ...",
            "    $ gnnrun partition partitioner.num_parts=0",
            "    error: invalid config: partitioner.num_parts must be at least 1",
            "",
            "```",
            "srun -n 2 gnnrun train cluster=slurm",
            "```",
        ]
    )
    found = [
        (c.where, c.argv, c.env, c.launcher, c.elided, c.error) for c in _collect_text("x.md", text)
    ]
    assert found == [
        (
            "x.md:1",
            ["data", "prepare", "dataset=custom", "dataset.path=graph.npz"],
            {},
            [],
            False,
            None,
        ),
        ("x.md:4", ["train", "dataset=cora", "train.epochs=2"], {}, [], False, None),
        ("x.md:7", ["train"], {"GNNRUN_ALLOCATOR": "system"}, [], True, None),
        (
            "x.md:8",
            ["partition", "partitioner.num_parts=0"],
            {},
            [],
            False,
            "error: invalid config: partitioner.num_parts must be at least 1",
        ),
        ("x.md:12", ["train", "cluster=slurm"], {}, ["srun", "-n", "2"], False, None),
    ]
