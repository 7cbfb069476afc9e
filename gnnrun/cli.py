"""`gnnrun COMMAND [hydra overrides]`: the entry point.

Commands that take a config (data, partition, train) are Hydra apps: the
overrides after the command compose `configs/`, and `-m` sweeps them. Before
Hydra runs, the overrides are checked here, so that a misspelt key or a bad
value fails at once with the key, the allowed choices and the fix.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from gnnrun import job
from gnnrun.errors import GnnrunError, ReportedError, Stopped, did_you_mean, os_error_message
from gnnrun.progress import console, out, print_error
from gnnrun.report.command import cmd_report
from gnnrun.resources import install_command, shipped

CONFIG_DIR = shipped("configs")
GROUPS = (
    "dataset",
    "partitioner",
    "model",
    "optimizer",
    "algorithm",
    "task",
    "cluster",
    "logger",
)
EXAMPLES = """\
  gnnrun env
  gnnrun data info dataset=cora
  gnnrun data prepare dataset=synthetic-medium
  gnnrun partition dataset=cora partitioner=metis partitioner.num_parts=4
  gnnrun partition dataset=synthetic-medium partitioner=libra partitioner.num_parts=8
  gnnrun partition -m dataset=cora partitioner=metis,random,libra partitioner.num_parts=2,4
  gnnrun train dataset=cora algorithm=minibatch cluster.nprocs=2
  gnnrun train dataset=cora algorithm=single algorithm.mode=full cluster.device=cuda
  gnnrun train -m dataset=cora algorithm=cd0,cdr,zero_comm model=sage_gcn
  gnnrun train --resume-sweep outputs/multirun/2026-12-01/10-00-00 [--retry-failed]
  gnnrun predict run=outputs/train/2026-12-01/10-00-00 cluster.nprocs=4"""


# ------------------------------------------------------------------ commands


def cmd_env(args: list[str]) -> int:
    from gnnrun.launch.environment import print_environment

    if args:
        raise GnnrunError(f"`gnnrun env` takes no arguments (got {' '.join(args)})")
    print_environment()
    return 0


DATA_USAGE = (
    "usage: gnnrun data {info,prepare} [--force] dataset=NAME [overrides], or gnnrun data "
    "chunk dataset=NAME --output DIR [--edges-per-file K] [--rows-per-file R] [overrides]"
)


def cmd_data(args: list[str]) -> int:
    actions = {"info": job.data_info, "prepare": job.data_prepare}
    if args and args[0] == "chunk" and {"-h", "--help"} & set(args):
        out.print(DATA_USAGE, markup=False, highlight=False, soft_wrap=True)
        return 0
    if args and args[0] == "chunk":
        options, rest = chunk_options(args[1:])
        return run_hydra(lambda cfg: job.data_chunk(cfg, **options), "data-chunk", rest)
    if not args or args[0] not in actions:
        raise GnnrunError(DATA_USAGE)
    action, rest = args[0], args[1:]
    force = "--force" in rest
    rest = [a for a in rest if a != "--force"]
    return run_hydra(lambda cfg: actions[action](cfg, force), f"data-{action}", rest)


CHUNK_FLAGS = {
    "--output": "output",
    "--edges-per-file": "edges_per_file",
    "--rows-per-file": "rows_per_file",
}


def chunk_options(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`gnnrun data chunk`'s own flags (FLAG VALUE or FLAG=VALUE), and the overrides left."""
    options: dict[str, Any] = {}
    rest, i = [], 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag not in CHUNK_FLAGS:
            rest.append(args[i])
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise GnnrunError(f"{flag} needs a value; {DATA_USAGE}")
            value, i = args[i + 1], i + 1
        i += 1
        key = CHUNK_FLAGS[flag]
        if key != "output":
            if not value.isdigit() or int(value) < 1:
                raise GnnrunError(f"{flag} {value!r}: give a positive whole number")
            options[key] = int(value)
        else:
            options[key] = value
    if "output" not in options:
        raise GnnrunError(
            f"gnnrun data chunk needs --output DIR (the folder to write); {DATA_USAGE}"
        )
    return options, rest


def cmd_partition(args: list[str]) -> int:
    return run_hydra(job.partition, "partition", args)


def cmd_train(args: list[str]) -> int:
    from gnnrun.launch import sweep

    _install_slurm_launcher(needed=any("slurm" in a for a in args))
    sweep.retry_failed = "--retry-failed" in args
    args = [a for a in args if a != "--retry-failed"]
    if sweep.retry_failed and not {"--resume-sweep", "-m", "--multirun"} & set(args):
        raise GnnrunError(
            "--retry-failed runs a sweep's failed points again: give it with --resume-sweep "
            "SWEEP_DIR (or with the sweep's own -m command)"
        )
    if "--resume-sweep" in args:
        args = _resume_sweep_args(args)
    elif not any(a.startswith("-") for a in args) and _asks_for_slurm(args):
        from gnnrun.schemas import register_schemas

        register_schemas()
        args = with_renamed_keys(args)
        check_overrides(args)  # as for any single run, before anything is submitted
        args = _slurm_run_args(args)
    with sweep.installed():  # training sweeps only: a partition sweep checks no training
        return run_hydra(job.train, "train", args, keep_run_dir=True)


def cmd_predict(args: list[str]) -> int:
    return _infer("predict", args)


def cmd_embed(args: list[str]) -> int:
    return _infer("embed", args)


INFERENCE_HELP = """\
usage: gnnrun {kind} run=RUN_DIR [overrides]

RUN_DIR is a `gnnrun train` run's directory. Its config is composed again,
then the overrides: cluster.nprocs (ranks), cluster=hosts or cluster=slurm
(ranks on several hosts, docs/inference.md), dataset=... (another graph with
the same features), and
  predict.chunk_vertices   vertices a rank computes at a time (65536)
  predict.output_dir       default RUN_DIR/predict/<dataset> (embed: RUN_DIR/embed/...)
  predict.parquet          auto | true | false: Parquet shards beside the .npy ones
  predict.candidates       a task=link run: .npy of vertex pairs to score (scores.npy)
  embed.layer              the layer `gnnrun embed` writes (-2: the last hidden one)
  embed.node_type          a heterogeneous graph's vertex type it writes (the labelled one)
"""


def _infer(kind: str, args: list[str]) -> int:
    """`gnnrun predict|embed run=RUN_DIR [overrides]`: the run's config, then the overrides."""
    if {"-h", "--help"} & set(args):
        out.print(INFERENCE_HELP.format(kind=kind), markup=False, highlight=False, soft_wrap=True)
        return 0
    runs = [a.split("=", 1)[1] for a in args if a.startswith("run=")]
    if not runs or not runs[-1]:
        meant = _meant_run(args)
        hint = f"; did you mean run={meant}?" if meant else ""
        raise GnnrunError(
            f"usage: gnnrun {kind} run=RUN_DIR [overrides] (RUN_DIR: a `gnnrun train` run's "
            f"directory; `gnnrun {kind} --help` lists the settings){hint}"
        )
    run_dir = Path(runs[-1])
    given = [a for a in args if not a.startswith("run=")]
    if any(a in ("-m", "--multirun") for a in given):
        raise GnnrunError(f"gnnrun {kind} takes one run: call it once per run directory")
    embed_keys = [a for a in given if a.lstrip("+~").startswith("embed.")]
    if kind == "predict" and embed_keys:
        raise GnnrunError(
            f"{embed_keys[0]}: embed.* chooses what `gnnrun embed` writes, and `gnnrun predict` "
            "writes the model's predictions: leave it out, or run `gnnrun embed`"
        )
    overrides = inference_overrides(run_dir, given)
    return run_hydra(lambda cfg: job.infer(cfg, kind, run_dir), kind, overrides)


def _meant_run(args: list[str]) -> str | None:
    """The run directory an inference's arguments seem to name without `run=`: a directory
    given bare, or the value of a misspelt key (rnu=DIR)."""
    for arg in args:
        key, _, value = arg.partition("=")
        if not value and Path(arg).is_dir():
            return arg
        if value and difflib.get_close_matches(key, ["run"]):
            return value
    return None


def inference_overrides(run_dir: Path, given: list[str]) -> list[str]:
    """The overrides that compose an inference's config: the run's, then `given`."""
    from gnnrun.infer.overrides import merge_overrides, run_overrides

    run = run_overrides(run_dir)
    return merge_overrides(run, given + _as_trained(run_dir, run, given))


def _as_trained(run_dir: Path, run: list[str], given: list[str]) -> list[str]:
    """Overrides that keep what the run's own config resolves to where its keys depend on
    the config, and an edge-cut partitioner where the run trained on another kind
    (inference runs on an edge cut). The checkpoint is the one the run kept in its
    directory (gnnrun.train.checkpoint.save_checkpoint), else its train.checkpoint_dir's."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from gnnrun.infer.overrides import merge_overrides
    from gnnrun.partition import PARTITIONERS
    from gnnrun.schemas import register_schemas
    from gnnrun.train.checkpoint import CHECKPOINT

    register_schemas()
    keys = {a.split("=", 1)[0].lstrip("+~") for a in given}
    # The run's own data root (its prepared dataset, partition, checkpoints), wherever and
    # with whatever GNNRUN_DATA_ROOT this command runs; paths given now replace it.
    given_paths = any(k == "paths" or k.startswith("paths.") for k in keys)
    extra = (
        []
        if given_paths
        else [f"paths.{name}={_quoted(value)}" for name, value in _run_paths(run_dir, run).items()]
    )
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            paths = [a for a in given if a.split("=", 1)[0].lstrip("+~").startswith("paths")]
            trained = compose("config", overrides=merge_overrides(run, paths + extra))
        except HydraException as exc:
            raise GnnrunError(
                f"the run's overrides no longer compose ({exc}); give the run's settings "
                "that changed name as overrides"
            ) from None
        # The partitioner this command would take: another algorithm= brings its own.
        partitioner = OmegaConf.select(trained, "partitioner.name")
        if "partitioner" not in keys:
            with contextlib.suppress(HydraException):  # the command reports its own errors
                given_config = compose("config", overrides=merge_overrides(run, given + extra))
                partitioner = OmegaConf.select(given_config, "partitioner.name")
    if "train.checkpoint_dir" not in keys:
        kept = (run_dir / CHECKPOINT).is_file()
        shared = Path(OmegaConf.select(trained, "train.checkpoint_dir"))
        if not kept and not (run_dir / "metrics.rank0.jsonl").is_file():
            # Nothing ties the shared file to this run: it is another run's model.
            raise GnnrunError(
                f"{run_dir} holds no trained epoch (no checkpoint.pt, no metrics.rank0.jsonl): "
                "the run stopped or was refused before its first epoch, and the checkpoint in "
                f"{shared} is another run's. Predict from a run that trained, or give a "
                "checkpoint with train.checkpoint_dir=DIR"
            )
        directory = str((run_dir if kept else shared).absolute())
        extra.append(f"train.checkpoint_dir={_quoted(directory)}")
    if "partitioner" not in keys and PARTITIONERS.get(partitioner).kind != "edge_cut":
        extra.append("partitioner=metis")
    return extra


def _quoted(value: str) -> str:
    """`value` quoted for Hydra's override grammar (a path may hold spaces, brackets, commas)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _run_paths(run_dir: Path, run: list[str]) -> dict[str, str]:
    """The data and raw roots the run used, absolute: as it recorded them
    (gnnrun.job.PATHS_RECORD), or, for a run from before that record, its config's
    relative defaults taken from the directory it was started in (Hydra's hydra.yaml)."""
    import yaml

    from gnnrun.job import PATHS_RECORD

    try:
        recorded = yaml.safe_load((run_dir / PATHS_RECORD).read_text())
    except (OSError, yaml.YAMLError):
        recorded = None
    if isinstance(recorded, dict):
        return {
            k: v
            for k, v in recorded.items()
            if k in ("data_root", "raw_root") and isinstance(v, str)
        }
    try:
        hydra = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())
        started_in = hydra["hydra"]["runtime"]["cwd"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return {}
    data_root = os.environ.get("GNNRUN_DATA_ROOT", "data")
    set_by_run = any(o.split("=", 1)[0].lstrip("+~").startswith("paths") for o in run)
    if not isinstance(started_in, str) or Path(data_root).is_absolute() or set_by_run:
        return {}
    return {"data_root": str(Path(started_in) / data_root)}


def _own_output_dir(args: list[str]) -> tuple[list[str], Path | None]:
    """The arguments with a run (or sweep) directory that belongs to this invocation alone,
    and the run directory claimed for it (None when the user chose one, or for a sweep).

    A directory left to the default is claimed new; one given explicitly is locked,
    and a run directory that already holds a run is refused unless this run resumes
    there (`train.resume=true` continues that run). A sweep directory may hold runs: its
    finished points are skipped. Inside a SLURM step every task shares the directory its
    submitter chose.
    """
    from gnnrun import run_dir
    from gnnrun.launch.slurm import in_slurm_step

    flags, settings = _split_flags(args)
    sweeping = any(f in ("-m", "--multirun") for f in flags)
    if in_slurm_step() or len(flags) > int(sweeping):  # --cfg, --help ... only print
        return args, None
    key = "hydra.sweep.dir=" if sweeping else "hydra.run.dir="
    given = [a.split("=", 1)[1] for a in settings if a.startswith(key)]
    if not given:
        claimed = run_dir.claim(Path("outputs/multirun" if sweeping else "outputs/train"))
        return [*args, f"{key}{claimed}"], None if sweeping else claimed
    if "${" not in given[-1]:
        run_dir.lock(Path(given[-1]))
        if not sweeping and not _resumes(settings):
            run_dir.refuse_occupied(Path(given[-1]))
    return args, None


def _resumes(settings: list[str]) -> bool:
    """Whether the command line says `train.resume=true` (its last word on it)."""
    values = [s.split("=", 1)[1] for s in settings if s.lstrip("+").startswith("train.resume=")]
    return bool(values) and values[-1].strip().lower() == "true"


def _install_slurm_launcher(needed: bool) -> None:
    """cluster=slurm's launcher, from the `slurm` extra (submitit, Hydra's submitit launcher)."""
    try:
        from gnnrun.launch.slurm_launcher import install
    except ImportError as exc:
        if needed:
            raise GnnrunError(
                f"cluster=slurm needs gnnrun's slurm extra ({exc.name} is not installed): "
                f"{install_command('slurm')}"
            ) from None
        return
    install()


def _resume_sweep_args(args: list[str]) -> list[str]:
    """`--resume-sweep DIR [more overrides]`: the command that made DIR, pointed at DIR again."""
    from gnnrun.launch.sweep import resume_arguments

    at = args.index("--resume-sweep")
    if at + 1 >= len(args) or args[at + 1].startswith("-") or "=" in args[at + 1]:
        raise GnnrunError("usage: gnnrun train --resume-sweep SWEEP_DIR [overrides]")
    rest = [a for a in args[:at] + args[at + 2 :] if a not in ("-m", "--multirun")]
    resumed = resume_arguments(Path(args[at + 1]))
    console.print(
        f"resuming the sweep in {args[at + 1]}: gnnrun train {' '.join(resumed + rest)}",
        soft_wrap=True,
        markup=False,
    )
    return resumed + rest


def _asks_for_slurm(args: list[str]) -> bool:
    return any(a.replace(" ", "") == "cluster=slurm" for a in args)


def _slurm_run_args(args: list[str]) -> list[str]:
    """`gnnrun train cluster=slurm` without -m: a sweep of one point in the run's directory.

    The point goes through the same launcher as a sweep (one job, its id and logs
    printed, waited for, cancelled on Ctrl-C). Inside a job step (srun) each task
    is a rank instead, and nothing is submitted. (With a flag such as --cfg or
    --help, Hydra only prints, and nothing is converted.)
    """
    import os

    from gnnrun.launch.slurm import in_slurm_step
    from gnnrun.run_dir import claim

    if in_slurm_step():  # every task must pick the same run directory
        if any(a.startswith("hydra.run.dir=") for a in args):
            return args
        step = f"{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
        return [*args, f"hydra.run.dir=outputs/train/slurm-{step}"]
    given = [a.split("=", 1)[1] for a in args if a.startswith("hydra.run.dir=")]
    run_dir = given[-1] if given else claim(Path("outputs/train"))
    rest = [a for a in args if not a.startswith("hydra.run.dir=")]
    return ["-m", *rest, f"hydra.sweep.dir={run_dir}", "hydra.sweep.subdir=."]


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "train": (cmd_train, "train a model on cluster.nprocs ranks (partitions first when needed)"),
    "predict": (cmd_predict, "every vertex's prediction from a run's checkpoint: run=RUN_DIR"),
    "embed": (cmd_embed, "every vertex's embedding at embed.layer from a run's checkpoint"),
    "partition": (cmd_partition, "partition a dataset and write the parts atomically"),
    "data": (
        cmd_data,
        "`info`: a dataset's statistics; `prepare`: write its prepared format; `chunk`: "
        "write it as chunked files",
    ),
    "report": (
        cmd_report,
        "table, CSV and PNG plots of a run or sweep directory (mean ± std over its seeds); "
        "--compare",
    ),
    "env": (cmd_env, "torch, threads, CPU topology, working backends, native kernels"),
}


# -------------------------------------------------------------- hydra glue


def run_hydra(
    task: Callable[[DictConfig], None],
    job_name: str,
    overrides: list[str],
    keep_run_dir: bool = False,
) -> int:
    """Run `task` as a Hydra app over configs/ with these command-line overrides."""
    import hydra

    from gnnrun.run_dir import release_all as release_run_dirs
    from gnnrun.run_dir import remove_if_unused
    from gnnrun.schemas import register_schemas

    register_schemas()
    check_flags(overrides, job_name)
    overrides = with_renamed_keys(overrides)
    check_overrides(overrides)
    claimed = None
    if keep_run_dir:
        overrides, claimed = _own_output_dir(overrides)

    @hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
    def entry(cfg: DictConfig) -> None:
        try:
            task(cfg)
        except GnnrunError as exc:
            print_error(exc)
            raise ReportedError(str(exc), stopped=isinstance(exc, Stopped)) from None
        except OSError as exc:  # the file system refused (permissions, space, ...)
            print_error(os_error_message(exc))
            raise ReportedError(os_error_message(exc)) from None

    # Hydra's own logging goes to the console only. Commands other than train
    # write their results under paths.data_root and need no run directory.
    quiet = ["hydra/job_logging=none", "hydra/hydra_logging=none"]
    if not keep_run_dir:
        quiet.append("hydra.output_subdir=null")
        if not any(a in ("-m", "--multirun") for a in overrides):
            quiet.append("hydra.run.dir=.")
    # Flags last: Hydra's parser takes the overrides as one run of positional arguments.
    flags, settings = _split_flags(overrides)
    saved = sys.argv
    sys.argv = [f"gnnrun {job_name}", *settings, f"hydra.job.name={job_name}", *quiet, *flags]
    try:
        entry()
    except SystemExit as exc:  # Hydra and the task exit this way on errors and --help
        if claimed is not None and exc.code:
            remove_if_unused(claimed)
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved
        release_run_dirs()
    return 0


def check_overrides(overrides: list[str]) -> None:
    """Fail early, with the allowed choices, on unknown groups/keys and invalid values."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from gnnrun.config import to_objects

    flags, settings = _split_flags(overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(settings)
    except HydraException as exc:
        said = " ".join(line for line in str(exc).splitlines() if not line.startswith("See "))
        raise GnnrunError(
            f"cannot parse the overrides: {said}; quote a value that holds spaces, brackets "
            "or commas, as key='my [1].npz' (Hydra's override grammar)"
        ) from None
    multirun = any(f in ("-m", "--multirun") for f in flags)
    if sweeping := next((o for o in parsed if o.is_sweep_override() and not multirun), None):
        raise GnnrunError(
            f"{sweeping.input_line}: values separated by commas are a sweep: add -m to run "
            f"one job per value (gnnrun train, partition), or give a list as "
            f"{sweeping.key_or_group}=[...]"
        )
    if not multirun and (named := next((o for o in parsed if o.key_or_group == "sweep"), None)):
        raise GnnrunError(
            f"{named.input_line} is a sweep: add -m to run each of its points (without -m only "
            "its first point would run)"
        )
    if added := next((o for o in parsed if o.is_add() and o.key_or_group in GROUPS), None):
        plain = added.input_line.lstrip("+")
        raise GnnrunError(
            f"{added.input_line}: {added.key_or_group} has a default option already; choose "
            f"another with {plain}, without + (+ adds a key or group the config lacks)"
        )
    choices = _group_choices(parsed)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            base = compose("config", overrides=choices)
        except HydraException as exc:
            raise GnnrunError(str(exc).split("\nConfig search path")[0]) from None
        for o in parsed:
            key = o.key_or_group
            if key in GROUPS or key == "sweep" or key.startswith("hydra") or o.is_delete():
                continue
            if not _known_key(base, key, adding=o.is_add()):
                raise GnnrunError(_unknown_key_message(base, key))
        if any(f not in ("-m", "--multirun") for f in flags) or any(
            o.key_or_group == "sweep" for o in parsed
        ):
            return  # Hydra only prints; a sweep config's points are checked as they start
        points = _sweep_points(parsed)
        for number, point in enumerate(points):
            where = f"sweep point {number} ({' '.join(point)}): " if len(points) > 1 else ""
            try:
                to_objects(compose("config", overrides=point))
            except HydraException as exc:
                unknown = getattr(exc.__cause__, "full_key", None)
                if isinstance(exc.__cause__, ConfigKeyError) and unknown:
                    # A mapping given whole (key={a: 1}) with a key it lacks: Hydra adds no
                    # key that way. The section's own check says what the mapping takes
                    # where it takes only some keys; otherwise name the way to add one.
                    try:
                        _check_mapping_given_whole(point, unknown.rpartition(".")[0])
                    except GnnrunError as refused:
                        raise GnnrunError(f"{where}{refused}") from None
                    raise GnnrunError(f"{where}{_unknown_key_message(base, unknown)}") from None
                wrong = getattr(exc.__cause__, "full_key", None)
                if isinstance(exc.__cause__, ValidationError) and wrong:
                    raise GnnrunError(f"{where}{_wrong_type_message(base, wrong, point)}") from None
                cause = f": {exc.__cause__}" if exc.__cause__ else ""
                raise GnnrunError(f"{where}{exc}{cause}".replace("\n", " ")) from None
            except GnnrunError as exc:
                raise GnnrunError(f"{where}{exc}") from None


def _check_mapping_given_whole(point: list[str], mapping: str) -> None:
    """Validate the config of `point` with the mapping override `mapping={...}` merged in,
    keys it lacks added: raises GnnrunError where the section refuses one of them."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import open_dict

    from gnnrun.config import to_objects

    parsed = OverridesParser.create().parse_overrides(point)
    given = next(o for o in parsed if o.key_or_group == mapping)
    cfg = compose("config", overrides=[o.input_line for o in parsed if o is not given])
    node = OmegaConf.select(cfg, mapping)
    with open_dict(node):
        node.merge_with(given.value())
    to_objects(cfg)


def _group_choices(parsed: list) -> list[str]:
    """The overrides that choose a config group's option (the first point's, in a sweep):
    what the composed config's keys depend on."""
    choices = []
    for o in parsed:
        # +sweep=NAME (configs/sweep/) may choose groups too, e.g. algorithm=cdr
        if o.key_or_group in GROUPS or o.key_or_group == "sweep":
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
            for value in values:
                _check_options(o.key_or_group, value)
            value = values[0]
            choices.append(f"{'+' if o.is_add() else ''}{o.key_or_group}={value}")
    return choices


def with_renamed_keys(overrides: list[str]) -> list[str]:
    """The overrides with each renamed key (gnnrun.config.RENAMED_KEYS) written under its
    new name, said once as a warning, so that an old command line still runs. A key whose
    new name the chosen config lacks (model.fanouts under a full-batch algorithm) is left
    as it is, for check_overrides to refuse with both names."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from gnnrun.config import renamed
    from gnnrun.progress import print_warning

    flags, settings = _split_flags(overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(settings)
    except HydraException:
        return overrides  # check_overrides says what it cannot parse
    if not any(renamed(o.key_or_group) for o in parsed):
        return overrides
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            base = compose("config", overrides=_group_choices(parsed))
        except HydraException:
            return overrides  # check_overrides says why
    given = {o.key_or_group for o in parsed}
    written = []
    for text, o in zip(settings, parsed, strict=True):
        key = o.key_or_group
        was = renamed(key)
        here = [n for n in was[1] if _known_key(base, n, adding=False)] if was else []
        if len(here) != 1:
            written.append(text)
            continue
        old, new_root = was[0], here[0]
        new = new_root + key[len(old) :]
        if new in given:  # which of the two was meant cannot be told
            raise GnnrunError(
                f"'{key}' and '{new}' name one setting ('{key}' is its old name): give only {new}"
            )
        start = text.index(key)
        prefix, rest = text[:start], text[start + len(key) :]
        if new != new_root and not prefix:
            prefix = "+"  # a key under a mapping (relation_fanouts.cites) is added
        written.append(prefix + new + rest)
        print_warning(f"'{key}' is now '{new}' (CHANGELOG.md): taken as {new}")
    return [*written, *flags]


def _check_options(group: str, value: object) -> None:
    """Each option chosen of a group must exist: one line naming the nearest and the
    options (Hydra's own message spans lines, and for a list names none). Several at
    once: logger=[tensorboard,mlflow]."""
    options = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
    for option in value if isinstance(value, list) else [value]:
        if option is None or "/" in str(option) or str(option) in options:
            continue  # null, or a config in a subfolder: Hydra finds it or says why
        near = difflib.get_close_matches(str(option), options, n=1)
        hint = f" Did you mean {group}={near[0]}?" if near else ""
        given = f" in {group}={value}" if isinstance(value, list) else ""
        raise GnnrunError(
            f"{group}={option}{given}: no such option.{hint} Choose from {', '.join(options)}"
        )


def _sweep_points(parsed: list) -> list[list[str]]:
    """Every point of a command-line sweep, in Hydra's order (its job numbers)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def _known_key(cfg: DictConfig, key: str, adding: bool) -> bool:
    """Whether `key` names a field of the composed config.

    A required field not yet given (`???`) is a field too. `+key=value` may add a
    key only to a free-form mapping (such as cluster.sbatch), never to a schema.
    """
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_missing=False) if parent else cfg
    if isinstance(node, ListConfig):
        return leaf.isdigit() and int(leaf) < len(node)
    if not isinstance(node, DictConfig):
        return False
    if leaf in node.keys():  # noqa: SIM118 (`in node` is False for a ??? value)
        return True
    return adding and OmegaConf.get_type(node) is dict


# Hydra's flags that take a value: `--cfg job`, `--info config`, `--package _global_`.
_FLAGS_WITH_VALUE = ("--cfg", "-c", "--info", "-i", "--package", "-p")
# Hydra's own flags (what its parser takes; gnnrun passes them on), and gnnrun's, which
# its commands take out before Hydra sees the rest: a misspelt one is named with these.
HYDRA_FLAGS = (
    *("--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package"),
    *("-p", "--run", "-r", "--multirun", "-m", "--shell-completion", "-sc", "--config-path"),
    *("-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info"),
    "-i",
)
GNNRUN_FLAGS = ("--resume-sweep", "--retry-failed", "--force", *CHUNK_FLAGS)


def check_flags(arguments: list[str], job_name: str) -> None:
    """Refuse, in one line, a flag neither Hydra nor gnnrun has (argparse's usage spans
    ten lines and suggests nothing; a misspelt flag with a value fails as an override)."""
    modes = {"-m": "--multirun", "-c": "--cfg", "-i": "--info", "-r": "--run"}
    given = sorted({modes.get(f, f) for f in (a.split("=", 1)[0] for a in arguments)})
    if len(chosen := [f for f in given if f in modes.values()]) > 1:
        raise GnnrunError(f"{' and '.join(chosen)}: give one of them (Hydra runs one mode)")
    for argument in arguments:
        flag = argument.split("=", 1)[0]
        if argument.startswith("-") and flag not in HYDRA_FLAGS:
            command = job_name.replace("-", " ")
            hint = (
                DATA_USAGE
                if command.startswith("data")
                else f"`gnnrun {command} --help` lists the settings"
            )
            raise GnnrunError(
                f"gnnrun {command} has no option {flag}"
                f"{did_you_mean(flag, [*HYDRA_FLAGS, *GNNRUN_FLAGS])}; {hint}"
            )


def _split_flags(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's flags with their values, the overrides)."""
    flags, settings = [], []
    taking_value = False
    for a in arguments:
        is_value = taking_value and not a.startswith("-") and "=" not in a
        (flags if is_value or a.startswith("-") else settings).append(a)
        taking_value = a in _FLAGS_WITH_VALUE
    return flags, settings


def _unknown_key_message(cfg: DictConfig, key: str) -> str:
    from gnnrun.config import renamed

    if (was := renamed(key)) is not None:
        old, names = was
        here = [n for n in names if _known_key(cfg, n, adding=False)]
        if here:
            new = here[0] + key[len(old) :]
            add = "+" if new != here[0] else ""  # a key under a mapping is added
            return f"'{key}' is now '{new}' (CHANGELOG.md): write {add}{new}=..."
        new = " or ".join(n + key[len(old) :] for n in names)
        why = _sampled_only(cfg, names[0]) or ", which this config does not have"
        return f"'{key}' is now '{new}' (CHANGELOG.md){why}"
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_missing=False) if parent else cfg
    keys = sorted(str(k) for k in node) if isinstance(node, DictConfig) else []
    near = difflib.get_close_matches(leaf, keys, n=1)
    if not near and isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict:
        return (
            f"unknown config key '{key}': '{parent}' is a mapping; add a key to it with +{key}=..."
        )
    if hint := _sampled_only(cfg, key):
        return f"unknown config key '{key}'{hint}"
    if not isinstance(node, DictConfig):
        return f"unknown config key '{key}': '{parent}' has no sub-keys"
    hint = f" Did you mean '{parent + '.' if parent else ''}{near[0]}'?" if near else ""
    where = f"'{parent}'" if parent else "the top level"
    return f"unknown config key '{key}'.{hint} Keys of {where}: {', '.join(keys)}."


# What a field of each type takes, for a value of another type.
_TAKES = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string, not null or a list",
    ListConfig: "a list, [a,b]",
}


def _wrong_type_message(cfg: DictConfig, key: str, point: list[str]) -> str:
    """`key`'s value, given in `point`, is not of the field's type: what it takes, and its
    default as an override."""
    given = [o.split("=", 1)[1] for o in point if o.lstrip("+").split("=", 1)[0] == key]
    value = f"={given[-1]}" if given else ""
    default = OmegaConf.select(cfg, key, throw_on_missing=False)
    if type(default) not in _TAKES:
        return f"{key}{value}: not a value {key} takes; its default is {key}={default}"
    if isinstance(default, ListConfig):
        shown = "[" + ",".join(str(v) for v in default) + "]"
    else:
        shown = str(default).lower() if isinstance(default, bool) else str(default)
    return f"{key}{value}: {key} takes {_TAKES[type(default)]}; its default is {key}={shown}"


def _sampled_only(cfg: DictConfig, key: str) -> str:
    """Why `key` is missing where it is a sampled algorithm's setting and the chosen
    algorithm trains full batch; "" otherwise."""
    from gnnrun.algorithms import ALGORITHMS, SampledConfig

    section, _, leaf = key.partition(".")
    field = leaf.split(".")[0]
    if section != "algorithm" or field not in SampledConfig.__dataclass_fields__:
        return ""
    sampled = [n for n in ALGORITHMS if issubclass(ALGORITHMS.schema(n), SampledConfig)]
    return (
        f": algorithm={OmegaConf.select(cfg, 'algorithm.name')} trains full batch, and "
        f"algorithm.{field} belongs to the sampled algorithms ({', '.join(sampled)}); "
        "drop it or choose one of those"
    )


# ------------------------------------------------------------------- help


def print_help() -> None:
    out.print("[bold]gnnrun[/]: distributed GNN training launcher\n")
    out.print(
        "usage: gnnrun COMMAND [key=value ...] [-m]   (Hydra overrides; -m sweeps)\n", markup=False
    )
    out.print("[bold]commands[/]")
    for name, (_, text) in COMMANDS.items():
        out.print(f"  {name:<10} {text}")
    out.print(
        "\n[bold]config groups[/] (choose with GROUP=OPTION, set fields with GROUP.KEY=VALUE)"
    )
    for group in GROUPS:
        options = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
        out.print(f"  {group:<12} {', '.join(options)}")
    out.print("\n[bold]examples[/]")
    out.print(EXAMPLES, highlight=False)
    out.print(
        "\n[bold]environment[/]\n  GNNRUN_DATA_ROOT  prepared datasets and partitions (default ./data)\n"
        "  GNNRUN_RAW_ROOT   raw dataset files (default $GNNRUN_DATA_ROOT/raw)\n"
        "\n`gnnrun COMMAND --help` shows the composed config; `--cfg job` prints it; "
        "`gnnrun --version` the version."
    )


CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"


def _import_torch_quietly() -> None:
    """Import torch with this process's C++ log at FATAL, unless the user chose a level
    (or GNNRUN_DEBUG=1). torch reads the level once, as it loads.

    The launcher's C++ warnings and errors are c10d's about its store connections, each
    logged with a 30-frame C++ stack: on a host other than node 0 of a finished
    cluster=hosts run, the launcher's last look at node 0's store
    (gnnrun.launch.watchdog.AbortWatcher) met it closed; a host that cannot reach node
    0's rendezvous logged every failed try. The same failures reach Python as
    exceptions, which the launcher reports in one line. The variable is removed again at
    once, so that ranks and SLURM jobs started from here log at torch's default level."""
    import os

    if (
        "torch" in sys.modules
        or CPP_LOG_LEVEL in os.environ
        or os.environ.get("GNNRUN_DEBUG") == "1"
    ):
        return
    os.environ[CPP_LOG_LEVEL] = "FATAL"
    try:
        import torch  # noqa: F401
    finally:
        os.environ.pop(CPP_LOG_LEVEL, None)


def main(argv: list[str] | None = None) -> int:
    from gnnrun.memory import apply_memory_settings, reexec_with_allocator, skip_exit_collection

    if argv is None:  # the gnnrun command itself, not a call from Python (tests)
        reexec_with_allocator()  # first: it may restart this process with tcmalloc
    apply_memory_settings()  # before anything imports torch
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print_help()
        return 0
    if args[0] == "--version":
        from gnnrun import __version__

        out.print(f"gnnrun {__version__}", markup=False)
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        near = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" Did you mean `gnnrun {near[0]}`?" if near else ""
        print_error(f"unknown command {command!r}.{hint} Commands: {', '.join(COMMANDS)}")
        return 2
    try:
        if command != "env":  # env says what is installed, a torch out of range too
            _import_torch_quietly()
            from gnnrun.torch_support import check_torch_version

            check_torch_version()
        status = COMMANDS[command][0](rest)
        if argv is None:  # the gnnrun command: its process exits next
            skip_exit_collection()
        return status
    except GnnrunError as exc:
        print_error(exc)
        return 1
    except OSError as exc:
        print_error(os_error_message(exc))
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
