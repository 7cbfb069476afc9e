"""Preparing a dataset once, and opening the prepared copy while it is current.

A *source* turns a dataset config into a GraphDataset (reading raw files or
generating a graph) and names the files it reads. `prepare_dataset` runs it
once and caches the result as the prepared format under `dataset.prepared_dir`,
recording the config and those input files (size, modification time, and a
sha256 for files up to 1 GiB); later calls memory-map the prepared copy and
prepare it again when the config or an input's content changed. A file that
was only moved or touched keeps the copy; one that is gone (raw files deleted
after preparing) does too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.config import DatasetConfig
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.registry import DATASET_SOURCES
from gnnrun.errors import GnnrunError
from gnnrun.io import sha256_file, writer_lock

# Fields that say where files are, not what the dataset is: moving data must not
# trigger a rebuild.
_LOCATION_FIELDS = frozenset({"prepared_dir", "raw_dir", "root", "file", "path"})
# Inputs up to this size are hashed when recorded; bigger ones by size and mtime only.
HASHED_INPUT_BYTES = 1 << 30


def dataset_identity(cfg: DatasetConfig) -> dict[str, Any]:
    """The config fields that determine a prepared dataset's content."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _LOCATION_FIELDS}


def build_dataset(cfg: DatasetConfig) -> GraphDataset:
    """Run the dataset's source (no cache); the result is validated and tagged with its
    config and the input files it was made from."""
    source = DATASET_SOURCES.get(cfg.source)
    dataset = source.build(cfg)
    if cfg.row_normalize:
        feat = np.asarray(dataset.feat, dtype=np.float32)
        sums = feat.sum(axis=1, keepdims=True)
        dataset.feat = feat / np.where(sums == 0, 1, sums)
    dataset.info["config"] = dataset_identity(cfg)
    dataset.info["inputs"] = [_input_record(path) for path in source.inputs(cfg)]
    dataset.validate()
    return dataset


def prepare_dataset(cfg: DatasetConfig, force: bool = False) -> GraphDataset:
    """Open the prepared dataset, building it first when absent, stale or `force`d.

    Concurrent runs wait for each other here: the second finds the first one's copy.
    """
    from gnnrun.progress import print_warning, stage

    path = Path(cfg.prepared_dir)
    with writer_lock(path):
        if not force and (path / "meta.json").is_file():
            try:
                existing = GraphDataset.load(path)
            except GnnrunError as exc:  # damaged: made again, as a damaged partition is
                reason = f"it cannot be used ({exc})"
            else:
                reason = _stale(existing, cfg)
                if reason is None:
                    return existing
            print_warning(f"{path}: {reason}; preparing it again")
        with stage(f"preparing dataset {cfg.name} from {cfg.source}"):
            dataset = build_dataset(cfg)
        with stage(f"writing {path}"):
            dataset.save(path)
        return GraphDataset.load(path)


def _stale(dataset: GraphDataset, cfg: DatasetConfig) -> str | None:
    """Why the prepared `dataset` no longer matches `cfg` and its input files (None: it does)."""
    if dataset.info.get("config") != dataset_identity(cfg):
        return "it was prepared from a different config"
    recorded = dataset.info.get("inputs")
    inputs = DATASET_SOURCES.get(cfg.source).inputs(cfg)
    if recorded is None:  # prepared before inputs were recorded
        return "it does not record its input files" if inputs else None
    if len(recorded) != len(inputs):
        return "it was prepared from other input files"
    for path, then in zip(inputs, recorded, strict=True):
        if path.is_file() and (change := _input_change(path, then)):
            return f"{path} changed since it was prepared ({change})"
    return None


def _input_record(path: Path) -> dict[str, Any]:
    stat = path.stat()
    record = {"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if stat.st_size <= HASHED_INPUT_BYTES:
        record["sha256"] = sha256_file(path)
    return record


def _input_change(path: Path, then: dict[str, Any]) -> str | None:
    stat = path.stat()
    if stat.st_size != then.get("size"):
        return f"{then.get('size')} bytes then, {stat.st_size} now"
    if stat.st_mtime_ns == then.get("mtime_ns"):
        return None
    if "sha256" not in then:
        return "modified since, too big to compare by content"
    return None if sha256_file(path) == then["sha256"] else "same size, other content"


def load_prepared(cfg: DatasetConfig) -> GraphDataset:
    """Open an already prepared dataset, refusing a stale one."""
    dataset = GraphDataset.load(Path(cfg.prepared_dir))
    if dataset.info.get("config") != dataset_identity(cfg):
        raise GnnrunError(
            f"{cfg.prepared_dir} was prepared from a different config than dataset={cfg.name} now "
            f"gives; run `gnnrun data prepare dataset={cfg.name}` again"
        )
    return dataset
