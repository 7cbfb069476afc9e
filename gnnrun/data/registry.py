"""`dataset.source` -> how to build the dataset, and which files it reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnnrun.data.dataset import GraphDataset
from gnnrun.registry import Registry


@dataclass(frozen=True)
class DatasetSource:
    build: Callable[[Any], GraphDataset]
    inputs: Callable[[Any], list[Path]]  # the files `build` reads for this config


DATASET_SOURCES: Registry[DatasetSource] = Registry("dataset source")


def register_source(name: str, inputs: Callable[[Any], list[Path]] = lambda cfg: []) -> Callable:
    """Register `build` under `name`, with the function naming its input files."""

    def add(build: Callable[[Any], GraphDataset]) -> Callable[[Any], GraphDataset]:
        DATASET_SOURCES.register(name)(DatasetSource(build, inputs))
        return build

    return add
