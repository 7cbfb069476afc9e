"""`train.resume=true`: what a checkpoint's settings mean for the run that continues it.

A checkpoint records the settings it was trained with (`settings_of`). When a
run resumes with other settings, each differing key falls in one of four kinds:

- the model's shape and the data it learnt from, a link run's held-out edges included
  (`REFUSED`): the weights cannot continue under another; the run is refused, naming
  the checkpoint's values;
- the optimiser's (`APPLIED`): the new value takes effect from the first resumed
  epoch, and the run says so;
- a link run's evaluation settings (`EVALUATION`): used, and the run warns that its
  figures before and after the resume do not compare;
- everything else that shapes training (fanouts, batch size, dropout, the
  algorithm's settings, the partition, the ranks, the seed): the new value is
  used, and the run warns that it no longer follows either config's trajectory.
  An algorithm whose saved state depends on a setting refuses it when loading.

Settings that do not change what is learnt (epochs, evaluation and checkpoint
cadence, paths, threads) are not recorded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnrun.config import RENAMED_KEYS
from gnnrun.data import dataset_identity
from gnnrun.errors import GnnrunError
from gnnrun.tasks import task_of
from gnnrun.train.checkpoint import CHECKPOINT, algorithm_checkpoint, load_checkpoint
from gnnrun.train.optimizer import SCHEDULE_SETTINGS, SCHEDULES_OVER_EPOCHS, OptimizerConfig

REFUSED = (
    "model.name",
    "model.hidden",
    "model.layers",
    "model.heads",
    "model.aggregator",
    "model.activation",
    "model.residual",
    "model.norm",
    "model.input_mlp",
    "model.output_mlp",
    "model.jk",
    "model.block",
    "model.embedding",
    "algorithm.name",
    "optimizer.name",
    "dataset",
    "task.name",
    "task.scorer",
    # A link run's held-out edges: under another split, the model has trained on edges
    # this run would evaluate on.
    "task.relation",
    "task.val_fraction",
    "task.test_fraction",
    "task.split_seed",
)
# The optimiser's settings (what it steps with, not what it keeps): a new value holds from
# the resumed epoch on. train.epochs is recorded where the schedule spans it.
APPLIED = (
    "optimizer.lr",
    "optimizer.weight_decay",
    *(f"optimizer.{name}" for name in SCHEDULE_SETTINGS),
    "train.epochs",
)
# What a link run's evaluations rank against: training is unchanged, but its figures no
# longer compare with the checkpoint's, among which the best epoch is chosen.
EVALUATION = ("task.eval_negatives", "task.eval_sampler", "task.hits_at")
# The options around a model's layers, off: what a checkpoint that does not record them had.
_MODEL_OPTIONS_OFF = {
    "model.residual": False,
    "model.norm": "none",
    "model.input_mlp": False,
    "model.output_mlp": False,
    "model.jk": "none",
    "model.block": "post_norm",
    "model.embedding": 0,
}
# The schedule and clipping, off: what a checkpoint that does not record them had.
_OPTIMIZER_OPTIONS_OFF = {
    f"optimizer.{f.name}": f.default
    for f in dataclasses.fields(OptimizerConfig)
    if f.name in SCHEDULE_SETTINGS
}
_PARTITION_LOCATION = "output_dir"


def settings_of(cfg) -> dict[str, Any]:
    """The settings a checkpoint records, as flat `section.key` names."""
    flat = {f"model.{k}": v for k, v in dataclasses.asdict(cfg.model).items()}
    flat |= {f"optimizer.{k}": v for k, v in dataclasses.asdict(cfg.optimizer).items()}
    flat |= {f"algorithm.{k}": v for k, v in dataclasses.asdict(cfg.algorithm).items()}
    flat |= {
        f"partitioner.{k}": v
        for k, v in dataclasses.asdict(cfg.partitioner).items()
        if k != _PARTITION_LOCATION
    }
    flat |= task_of(cfg).settings()
    flat["dataset"] = dataset_identity(cfg.dataset)
    flat["cluster.nprocs"] = cfg.cluster.nprocs
    flat["train.seed"] = cfg.train.seed
    flat["train.precision"] = cfg.train.precision
    if cfg.optimizer.schedule in SCHEDULES_OVER_EPOCHS:  # the rate of each epoch depends on it
        flat["train.epochs"] = cfg.train.epochs
    return flat


@dataclass
class SettingChanges:
    """The keys whose value differs between a checkpoint and the resuming run."""

    refused: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # key: (saved, now)
    applied: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    evaluation: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    diverging: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def under_current_names(saved: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's settings with renamed keys (config.RENAMED_KEYS) under the names
    `now` uses; a checkpoint from before the optimizer group was stepped by Adam, and one
    from before train.precision trained in float32."""
    current = {}
    for key, value in saved.items():
        if key in RENAMED_KEYS:
            names = [n for n in RENAMED_KEYS[key] if n in now]
            if not names:  # a setting this run does not have (fanouts under full batch)
                continue
            key = names[0]
        current[key] = value
    if "optimizer.name" in now and "optimizer.name" not in saved:
        current["optimizer.name"] = "adam"
    if "train.precision" in now and "train.precision" not in saved:
        current["train.precision"] = "fp32"
    if "task.name" in now and "task.name" not in saved:  # vertex classification records none
        current["task.name"] = "node"
    for key, value in (_MODEL_OPTIONS_OFF | _OPTIMIZER_OPTIONS_OFF).items():  # from before them
        if key in now and key not in saved:
            current[key] = value
    return current


def compare_settings(saved: dict[str, Any], now: dict[str, Any]) -> SettingChanges:
    saved = under_current_names(saved, now)
    changes = SettingChanges()
    for key in sorted(set(saved) | set(now)):
        if saved.get(key) == now.get(key):
            continue
        if key == "train.epochs" and not (key in saved and key in now):
            continue  # recorded under a cosine schedule only: the schedule's change says it
        kind = (
            changes.refused
            if key in REFUSED
            else changes.applied
            if key in APPLIED
            else changes.evaluation
            if key in EVALUATION
            else changes.diverging
        )
        kind[key] = (saved.get(key), now.get(key))
    if "task.name" in changes.refused:  # another task: its own settings are no news
        for kind in (changes.refused, changes.evaluation, changes.diverging):
            for key in [k for k in kind if k.startswith("task.") and k != "task.name"]:
                del kind[key]
    return changes


def _show(key: str, value: Any) -> str:
    if key == "dataset":  # a dict of the dataset's settings: name the ones that differ
        return f"dataset {value.get('name')!r}" if isinstance(value, dict) else str(value)
    return f"{key}={value}"


def refusal_message(
    directory: Path,
    changes: SettingChanges,
    fix: str = "Resume with the checkpoint's settings, or start a new run without "
    "train.resume (or with another train.checkpoint_dir)",
) -> str:
    saved = ", ".join(_show(k, old) for k, (old, _) in changes.refused.items())
    now = ", ".join(_show(k, new) for k, (_, new) in changes.refused.items())
    return (
        f"cannot resume from {directory}: its model was trained with {saved}, this run asks "
        f"for {now}. {fix}"
    )


def change_messages(changes: SettingChanges, epoch: int) -> list[str]:
    lines = [
        f"resuming after epoch {epoch} with {key}={new} (the checkpoint had {old}): "
        "applied from this epoch on"
        for key, (old, new) in changes.applied.items()
    ]
    consequences = (
        (
            changes.evaluation,
            "training is unchanged, but the evaluations from here on do not compare with the "
            "earlier ones, and the best epoch is chosen among both",
        ),
        (
            changes.diverging,
            "training continues with the new values, so it follows neither the checkpoint's "
            "run nor a fresh run of this config",
        ),
    )
    for changed, consequence in consequences:
        if changed:
            listed = ", ".join(
                f"{_show(k, new)} (checkpoint: {old})" for k, (old, new) in changed.items()
            )
            lines.append(f"resuming after epoch {epoch} with {listed}: {consequence}")
    return lines


def no_checkpoint_message(directory: Path) -> str:
    """What `train.resume=true` does when there is nothing to resume, and where else to look."""
    others = sorted(
        p.parent.name for p in Path(directory).parent.glob("*/checkpoint.pt") if p.parent.is_dir()
    )
    hint = (
        f" (checkpoints of this dataset: {', '.join(others)}; the directory is named after "
        "algorithm, model, cluster.nprocs and train.seed)"
        if others
        else ""
    )
    return f"train.resume=true: no checkpoint in {directory}{hint}; training from epoch 1"


def resume(
    cfg,
    directory: Path,
    model,
    optimizer,
    algorithm,
    rank: int,
    own_run: str | None = None,
    run_dir: Path | None = None,
) -> tuple[int, list]:
    """Load the checkpoint in `directory` into the run: (epochs done, rank 0's history).

    `own_run`: a restarted attempt's run id (gnnrun.attempt); a checkpoint another run
    left is then not resumed from, and training starts again from epoch 1. Every rank
    decides alike (they read the same checkpoint); rank 0 tells the user. `run_dir`: the
    run's directory, which may hold the run being continued (`train.resume=true` there):
    then the checkpoint must be that run's own.
    """
    from gnnrun.progress import print_warning

    state = load_checkpoint(directory)
    if run_dir is not None:
        check_continues_its_run(state, directory, Path(run_dir), settings_of(cfg))
    if own_run is not None and (state is None or state.get("run_id") != own_run):
        if rank == 0:
            print_warning("restarted before this run's first checkpoint: training from epoch 1")
        return 0, []
    if state is None:
        if rank == 0:
            print_warning(no_checkpoint_message(directory))
        return 0, []
    epoch = state["epoch"]
    if own_run is not None and rank == 0:
        print_warning(f"restarted: resuming from this run's checkpoint after epoch {epoch}")
    saved = state.get("settings")
    changes = compare_settings(saved, settings_of(cfg)) if saved is not None else None
    if changes is not None and changes.refused:
        raise GnnrunError(refusal_message(directory, changes))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:  # a checkpoint written before settings were recorded
        first = str(exc).split("\n")[1:2] or [str(exc)]
        raise GnnrunError(
            f"cannot resume from {directory}: its model has another shape ({first[0].strip()}). "
            "Resume with the model settings it was trained with, or start a new run without "
            "train.resume"
        ) from None
    optimizer.load_state_dict(state["optimizer"])
    for group in optimizer.param_groups:  # this run's optimiser settings win (APPLIED);
        group["weight_decay"] = cfg.optimizer.weight_decay  # the rate is set at each epoch
    if algorithm.state_dict() is not None:
        algorithm.load_state_dict(load_algorithm_state(directory, rank, epoch))
    # Only now, once nothing more can refuse (an algorithm's state refuses the settings
    # it was made under): a warning that training goes on, then a refusal, would mislead.
    if changes is not None and rank == 0:
        for line in change_messages(changes, epoch):
            print_warning(line)
    return epoch, state["history"]


def check_continues_its_run(
    state: dict | None, directory: Path, run_dir: Path, now: dict[str, Any]
) -> None:
    """Refuse to resume, in a directory that holds a run, from a checkpoint that is not
    that run's own copy (`run_dir/checkpoint.pt`): runs with the same
    train.checkpoint_dir replace each other's shared file, and the directory's metrics
    would then mix two runs. A directory without a run's files passes. `now`: this run's
    settings; a run that cannot continue under them is refused for that first."""
    if not any(run_dir.glob("metrics.rank*.jsonl")) and not (run_dir / CHECKPOINT).exists():
        return
    own = load_checkpoint(run_dir)
    if own is None:
        raise GnnrunError(
            f"{run_dir} holds a run that stopped before its first checkpoint: nothing of it "
            "to continue. Start it again in a new directory (leave hydra.run.dir out), "
            "without train.resume"
        )
    if state is None or (own["epoch"], own["history"]) != (state["epoch"], state["history"]):
        # Other model settings than the run's also name another checkpoint directory: the
        # settings are the reason, and continuing from the run's own copy would not help.
        changes = compare_settings(own.get("settings") or now, now)
        if changes.refused:
            fix = (
                "Continue it with its settings (its .hydra/overrides.yaml), or start a new "
                "run in another directory"
            )
            raise GnnrunError(refusal_message(run_dir, changes, fix))
        found = "none" if state is None else f"one after epoch {state['epoch']}, another run's"
        raise GnnrunError(
            f"cannot continue the run in {run_dir} (its checkpoint is after epoch "
            f"{own['epoch']}): train.checkpoint_dir {directory} holds {found}. Continue it "
            f"from its own copy with train.checkpoint_dir={run_dir}, or start a new run "
            "in another directory"
        )


def load_algorithm_state(directory: Path, rank: int, epoch: int) -> Any:
    saved = load_checkpoint(directory, algorithm_checkpoint(rank, epoch))
    if saved is None:
        raise GnnrunError(
            f"{directory} holds the model after epoch {epoch} but not rank {rank}'s algorithm "
            f"state for it ({algorithm_checkpoint(rank, epoch)}): resume with the same "
            "cluster.nprocs as the checkpoint, or start again without train.resume"
        )
    return saved["state"]
