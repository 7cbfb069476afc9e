"""`dataset.source` -> how to build the dataset, which files it reads, and its settings
(`DatasetConfig`, which every source's schema extends)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.reorder import VERTEX_ORDERS
from gnnrun.registry import Registry

# The tail of a missing raw file's message: where the default paths point.
RAW_ROOT_HINT = (
    "raw files are looked up under GNNRUN_RAW_ROOT or paths.raw_root=, data/raw/ by default"
)


@dataclass
class DatasetConfig:
    name: str = MISSING  # also the directory name of the prepared dataset
    source: str = MISSING  # key in gnnrun.data.DATASET_SOURCES
    seed: int = 0
    # Divide each feature row by its sum (Kipf & Welling's preprocessing).
    row_normalize: bool = False
    # Vertex order of the prepared dataset (gnnrun.data.reorder): none, degree or rcm.
    reorder: str = "none"
    prepared_dir: str = "${paths.data_root}/prepared/${dataset.name}"

    def validate(self) -> None:
        check(
            bool(self.name) and "/" not in self.name,
            f"dataset.name {self.name!r} must be a plain name",
        )
        check(
            self.reorder in VERTEX_ORDERS,
            f"dataset.reorder {self.reorder!r}: choose one of {', '.join(VERTEX_ORDERS)}",
        )


@dataclass
class SplitFractions:
    train: float = 0.1
    val: float = 0.1
    test: float = 0.8

    def validate(self, where: str) -> None:
        parts = (self.train, self.val, self.test)
        check(all(0 <= p <= 1 for p in parts), f"{where} fractions must lie in [0, 1]")
        check(sum(parts) <= 1 + 1e-9, f"{where} fractions sum to {sum(parts):.3f} > 1")


@dataclass(frozen=True)
class DatasetSource:
    build: Callable[[Any], GraphDataset]
    inputs: Callable[[Any], list[Path]]  # the files `build` reads for this config


DATASET_SOURCES: Registry[DatasetSource] = Registry(
    "dataset source", group="dataset", base_schema=DatasetConfig
)


def register_source(
    name: str, schema: type[DatasetConfig], inputs: Callable[[Any], list[Path]] = lambda cfg: []
) -> Callable:
    """Register `build` under `name` (`dataset.source`), with its config schema and the
    function naming its input files."""

    def add(build: Callable[[Any], GraphDataset]) -> Callable[[Any], GraphDataset]:
        DATASET_SOURCES.register(name, schema)(DatasetSource(build, inputs))
        return build

    return add
