"""`algorithm=NAME` -> the Algorithm class that runs it."""

from __future__ import annotations

from gnnrun.algorithms.base import Algorithm
from gnnrun.registry import Registry

ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")
