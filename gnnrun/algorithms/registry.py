"""`algorithm=NAME` -> the Algorithm class that runs it, and its config schema."""

from __future__ import annotations

from gnnrun.algorithms.base import Algorithm, AlgorithmConfig
from gnnrun.registry import Registry

ALGORITHMS: Registry[type[Algorithm]] = Registry(
    "algorithm", group="algorithm", base_schema=AlgorithmConfig
)
