"""Tasks, one module each, chosen by `task=` through one registry (see `base` for what a
task owns). A new task is a module with a Task subclass registered in TASKS (and its
config schema), a YAML file in configs/task/, and its import below; the algorithms that
train it list its name in their `tasks`."""

from gnnrun.tasks.base import EvaluationSource, Objective, Task, TaskConfig, VertexObjective
from gnnrun.tasks.registry import TASKS, task_of

# Importing a task's module registers it.
from gnnrun.tasks import link, multilabel, node  # noqa: E402, F401  isort: skip


def prepare_for_task(dataset_cfg, task_cfg, force: bool = False):
    """The dataset task `task_cfg` trains on, prepared (Task.prepare)."""
    return TASKS.get(task_cfg.name)(task_cfg).prepare(dataset_cfg, force=force)


def load_for_task(dataset_cfg, task_cfg):
    """`prepare_for_task`'s dataset, already prepared and current (what ranks open)."""
    return TASKS.get(task_cfg.name)(task_cfg).load(dataset_cfg)


__all__ = [
    "TASKS",
    "EvaluationSource",
    "Objective",
    "Task",
    "TaskConfig",
    "VertexObjective",
    "load_for_task",
    "prepare_for_task",
    "task_of",
]
