"""Datasets: one registry of sources, each producing the prepared on-disk format.

A *source* turns a dataset config into a GraphDataset (reading raw files or
generating a graph). `prepare` runs it once and caches the result as the
prepared format under `dataset.prepared_dir`; later calls memory-map that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.config import DatasetConfig
from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError
from gnnrun.registry import Registry

DATASET_SOURCES: Registry[Callable[[Any], GraphDataset]] = Registry("dataset source")

# Fields that say where files are, not what the dataset is: moving data must not
# trigger a rebuild.
_LOCATION_FIELDS = frozenset({"prepared_dir", "raw_dir", "root", "file", "path"})


def dataset_identity(cfg: DatasetConfig) -> dict[str, Any]:
    """The config fields that determine a prepared dataset's content."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _LOCATION_FIELDS}


def build_dataset(cfg: DatasetConfig) -> GraphDataset:
    """Run the dataset's source (no cache); the result is validated and tagged with its config."""
    dataset = DATASET_SOURCES.get(cfg.source)(cfg)
    if cfg.row_normalize:
        feat = np.asarray(dataset.feat, dtype=np.float32)
        sums = feat.sum(axis=1, keepdims=True)
        dataset.feat = feat / np.where(sums == 0, 1, sums)
    dataset.info["config"] = dataset_identity(cfg)
    dataset.validate()
    return dataset


def prepare_dataset(cfg: DatasetConfig, force: bool = False) -> GraphDataset:
    """Open the prepared dataset, building it first when absent, stale or `force`d."""
    path = Path(cfg.prepared_dir)
    if not force and (path / "meta.json").is_file():
        existing = GraphDataset.load(path)
        if existing.info.get("config") == dataset_identity(cfg):
            return existing
        from gnnrun.progress import print_warning

        print_warning(f"{path} was prepared from a different config; preparing it again")
    from gnnrun.progress import stage

    with stage(f"preparing dataset {cfg.name} from {cfg.source}"):
        dataset = build_dataset(cfg)
    with stage(f"writing {path}"):
        dataset.save(path)
    return GraphDataset.load(path)


def load_prepared(cfg: DatasetConfig) -> GraphDataset:
    """Open an already prepared dataset, refusing a stale one."""
    dataset = GraphDataset.load(Path(cfg.prepared_dir))
    if dataset.info.get("config") != dataset_identity(cfg):
        raise GnnrunError(
            f"{cfg.prepared_dir} was prepared from a different config than dataset={cfg.name} now "
            f"gives; run `gnnrun data prepare dataset={cfg.name}` again"
        )
    return dataset


def _register_sources() -> None:
    # Importing a source module registers it. Sources import pandas and scipy inside
    # their readers: every rank imports this package, and those two cost 0.3-0.45 s
    # of each start.
    from gnnrun.data import custom, heterophilous, musae, ogb, planetoid, synthetic  # noqa: F401


_register_sources()
