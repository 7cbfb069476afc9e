"""`gnnrun COMMAND [hydra overrides]`: the entry point.

Commands that take a config (data, partition, train) are Hydra apps: the
overrides after the command compose `configs/`, and `-m` sweeps them. Before
Hydra runs, the overrides are checked here, so that a misspelt key or a bad
value fails at once with the key, the allowed choices and the fix.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gnnrun.errors import GnnrunError
from gnnrun.progress import console, out
from gnnrun.report.command import cmd_report

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
GROUPS = ("dataset", "partitioner", "model", "algorithm", "cluster")
EXAMPLES = """\
  gnnrun env
  gnnrun data info dataset=cora
  gnnrun data prepare dataset=synthetic-medium
  gnnrun partition dataset=cora partitioner=metis partitioner.num_parts=4
  gnnrun partition dataset=synthetic-medium partitioner=libra partitioner.num_parts=8
  gnnrun partition -m dataset=cora partitioner=metis,random,libra partitioner.num_parts=2,4"""


# ------------------------------------------------------------------ commands


def cmd_env(args: list[str]) -> int:
    from gnnrun.launch.environment import print_environment

    if args:
        raise GnnrunError(f"`gnnrun env` takes no arguments (got {' '.join(args)})")
    print_environment()
    return 0


def cmd_data(args: list[str]) -> int:
    actions = {"info": _data_info, "prepare": _data_prepare}
    if not args or args[0] not in actions:
        raise GnnrunError("usage: gnnrun data {info,prepare} [--force] dataset=NAME [overrides]")
    action, rest = args[0], args[1:]
    force = "--force" in rest
    rest = [a for a in rest if a != "--force"]
    return run_hydra(lambda cfg: actions[action](cfg, force), f"data-{action}", rest)


def _data_info(cfg: DictConfig, force: bool) -> None:
    from gnnrun.config import to_objects
    from gnnrun.data import prepare_dataset
    from gnnrun.report.tables import dataset_table

    dataset = prepare_dataset(to_objects(cfg).dataset, force=force)
    out.print(dataset_table(dataset))


def _data_prepare(cfg: DictConfig, force: bool) -> None:
    from gnnrun.config import to_objects
    from gnnrun.data import prepare_dataset

    dataset = prepare_dataset(to_objects(cfg).dataset, force=force)
    out.print(
        f"prepared [bold]{dataset.name}[/] at {dataset.path} (checksum {dataset.checksum[:12]})"
    )


def cmd_partition(args: list[str]) -> int:
    return run_hydra(_partition, "partition", args)


def _partition(cfg: DictConfig) -> None:
    from gnnrun.config import to_objects
    from gnnrun.data import prepare_dataset
    from gnnrun.partition import partition_dataset
    from gnnrun.report.tables import partition_table

    config = to_objects(cfg)
    dataset = prepare_dataset(config.dataset)
    book = partition_dataset(dataset, config.partitioner)
    out.print(partition_table(book))
    out.print(f"written to {book.path}")


def cmd_train(args: list[str]) -> int:
    return run_hydra(_train, "train", args, keep_run_dir=True)


def _train(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from gnnrun.algorithms import ALGORITHMS
    from gnnrun.config import to_objects
    from gnnrun.data import prepare_dataset
    from gnnrun.launch.local import run_ranks
    from gnnrun.partition import find_partition, partition_dataset
    from gnnrun.partition.book import open_partition
    from gnnrun.report.tables import summary_table
    from gnnrun.train.display import TrainingDisplay
    from gnnrun.train.trainer import train

    config = to_objects(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    dataset = prepare_dataset(config.dataset)
    algorithm = ALGORITHMS.get(config.algorithm.name)
    algorithm.check_config(config)
    kind = algorithm.partition_kind
    if kind is None:  # one process on the whole dataset
        with TrainingDisplay(config) as display:
            summary = train(config, run_dir, display)
    else:
        if find_partition(dataset, config.partitioner) is None:
            partition_dataset(dataset, config.partitioner)
        open_partition(
            Path(config.partitioner.output_dir),
            dataset_checksum=dataset.checksum,
            world_size=config.cluster.nprocs,
            kind=kind,
        )
        summary = run_ranks(config, run_dir)
    out.print(summary_table(summary))
    out.print(f"run directory: {run_dir}")


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "train": (cmd_train, "train a model on cluster.nprocs ranks (partitions first when needed)"),
    "partition": (cmd_partition, "partition a dataset and write the parts atomically"),
    "data": (cmd_data, "`info`: a dataset's statistics; `prepare`: write its prepared format"),
    "report": (cmd_report, "table, CSV and PNG plots of a run or sweep directory; --compare"),
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

    from gnnrun.config import register_schemas

    register_schemas()
    check_overrides(overrides)

    @hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
    def entry(cfg: DictConfig) -> None:
        try:
            task(cfg)
        except GnnrunError as exc:
            console.print(f"[bold red]error:[/] {exc}")
            raise SystemExit(1) from None

    # Hydra's own logging goes to the console only. Commands other than train
    # write their results under paths.data_root and need no run directory.
    quiet = ["hydra/job_logging=none", "hydra/hydra_logging=none"]
    if not keep_run_dir:
        quiet.append("hydra.output_subdir=null")
        if not any(a in ("-m", "--multirun") for a in overrides):
            quiet.append("hydra.run.dir=.")
    saved = sys.argv
    sys.argv = [f"gnnrun {job_name}", *overrides, f"hydra.job.name={job_name}", *quiet]
    try:
        entry()
    except SystemExit as exc:  # Hydra and the task exit this way on errors and --help
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved
    return 0


def check_overrides(overrides: list[str]) -> None:
    """Fail early, with the allowed choices, on unknown groups/keys and invalid values."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from gnnrun.config import to_objects

    flags = [a for a in overrides if a.startswith("-")]
    settings = [a for a in overrides if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(settings)
    except HydraException as exc:
        raise GnnrunError(f"cannot parse the overrides: {exc}") from None
    choices = []
    for o in parsed:
        if o.key_or_group in GROUPS:
            value = next(iter(o.sweep_string_iterator())) if o.is_sweep_override() else o.value()
            choices.append(f"{o.key_or_group}={value}")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            base = compose("config", overrides=choices)
        except HydraException as exc:
            raise GnnrunError(str(exc).split("\nConfig search path")[0]) from None
        for o in parsed:
            key = o.key_or_group
            if key in GROUPS or key.startswith("hydra") or o.is_add() or o.is_delete():
                continue
            if OmegaConf.select(base, key, default=_ABSENT, throw_on_missing=False) is _ABSENT:
                raise GnnrunError(_unknown_key_message(base, key))
        if any(o.is_sweep_override() for o in parsed) or flags:
            return  # each sweep point is validated when it starts
        try:
            full = compose("config", overrides=settings)
        except HydraException as exc:
            cause = f": {exc.__cause__}" if exc.__cause__ else ""
            raise GnnrunError(f"{exc}{cause}".replace("\n", " ")) from None
        to_objects(full)


_ABSENT = object()


def _unknown_key_message(cfg: DictConfig, key: str) -> str:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return f"unknown config key '{key}': '{parent}' has no sub-keys"
    keys = sorted(str(k) for k in node)
    near = difflib.get_close_matches(leaf, keys, n=1)
    hint = f" Did you mean '{parent + '.' if parent else ''}{near[0]}'?" if near else ""
    where = f"'{parent}'" if parent else "the top level"
    return f"unknown config key '{key}'.{hint} Keys of {where}: {', '.join(keys)}."


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
        "\n`gnnrun COMMAND --help` shows the composed config; `--cfg job` prints it."
    )


def main(argv: list[str] | None = None) -> int:
    from gnnrun.memory import apply_memory_settings

    apply_memory_settings()  # before anything imports torch
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print_help()
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        near = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" Did you mean `gnnrun {near[0]}`?" if near else ""
        console.print(
            f"[bold red]error:[/] unknown command {command!r}.{hint} Commands: {', '.join(COMMANDS)}"
        )
        return 2
    try:
        return COMMANDS[command][0](rest)
    except GnnrunError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
