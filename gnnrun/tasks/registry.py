"""`task=NAME` -> the Task class that runs it, and its config schema."""

from __future__ import annotations

from gnnrun.registry import Registry
from gnnrun.tasks.base import Task, TaskConfig

TASKS: Registry[type[Task]] = Registry("task", group="task", base_schema=TaskConfig)


def task_of(cfg) -> Task:
    """The task a config trains (`cfg.task`)."""
    return TASKS.get(cfg.task.name)(cfg.task)
