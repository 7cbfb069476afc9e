"""Preparing a dataset once, and opening the prepared copy while it is current.

A *source* turns a dataset config into a GraphDataset (reading raw files or
generating a graph) and names the files it reads. `prepare_dataset` runs it
once and caches the result as the prepared format under `dataset.prepared_dir`,
recording the config and those input files (size, modification time, and a
sha256 for files up to 1 GiB); later calls memory-map the prepared copy and
prepare it again when the config or an input's content changed. An input of up
to 1 GiB is hashed at every `prepare_dataset`, so a file rewritten with the same
size and modification time (`cp --preserve=timestamps`) is found; a bigger one
whose size and mtime are as recorded is trusted without hashing (and one whose
mtime changed counts as changed). One that was only moved or touched keeps the
copy; one that is gone (raw files deleted after preparing) keeps it too.
`load_prepared`, which ranks use after the launching process prepared the
dataset, refuses a stale copy instead of preparing it, and trusts size and mtime
(every rank hashing the inputs again would cost each of them the same seconds).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.registry import DATASET_SOURCES, DatasetConfig
from gnnrun.data.reorder import renumber
from gnnrun.errors import GnnrunError
from gnnrun.io import read_json, sha256_file, write_json_atomic, writer_lock

# Fields that say where files are (or how much memory making it may take), not what the
# dataset is: moving data must not trigger a rebuild.
_LOCATION_FIELDS = frozenset({"prepared_dir", "raw_dir", "root", "file", "path", "memory_gb"})
# Inputs up to this size are hashed when recorded; bigger ones by size and mtime only.
HASHED_INPUT_BYTES = 1 << 30


def dataset_identity(cfg: DatasetConfig) -> dict[str, Any]:
    """The config fields that determine a prepared dataset's content."""
    identity = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _LOCATION_FIELDS}
    if identity.get("reorder") == "none":  # as copies prepared before the setting existed say
        del identity["reorder"]
    return identity


def build_dataset(cfg: DatasetConfig) -> GraphDataset:
    """Run the dataset's source (no cache); the result is validated and tagged with its
    config and the input files it was made from."""
    source = DATASET_SOURCES.get(cfg.source)
    dataset = source.build(cfg)
    if cfg.row_normalize:
        dataset.feat = row_normalized(dataset.feat)
        if dataset.typed_feat is not None:
            dataset.typed_feat = [f if f is None else row_normalized(f) for f in dataset.typed_feat]
    dataset = renumber(dataset, cfg.reorder)
    dataset.info["config"] = dataset_identity(cfg)
    dataset.info["inputs"] = [input_record(path) for path in source.inputs(cfg)]
    dataset.validate()
    return dataset


def row_normalized(feat: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (rows summing to 0 kept), as float32."""
    feat = np.asarray(feat, dtype=np.float32)
    sums = feat.sum(axis=1, keepdims=True)
    return feat / np.where(sums == 0, 1, sums)


def prepare_dataset(cfg: DatasetConfig, force: bool = False) -> GraphDataset:
    """Open the prepared dataset, building it first when absent, stale or `force`d.

    Concurrent runs wait for each other here: the second finds the first one's copy.
    """
    from gnnrun.progress import stage

    path = Path(cfg.prepared_dir)
    with writer_lock(path):
        existing = current_copy(cfg, force)
        if existing is not None:
            return existing
        with stage(f"preparing dataset {cfg.name} from {cfg.source}"):
            dataset = build_dataset(cfg)
        with stage(f"writing {path}"):
            dataset.save(path)
        return GraphDataset.load(path)


def current_copy(cfg: DatasetConfig, force: bool = False) -> GraphDataset | None:
    """The prepared copy at cfg.prepared_dir if it is current (None: there is none, it is
    `force`d, stale or damaged, the last two said in a warning). Hold `writer_lock`."""
    from gnnrun.progress import print_warning

    path = Path(cfg.prepared_dir)
    if force or not (path / "meta.json").is_file():
        return None
    try:
        existing = GraphDataset.load(path)
    except GnnrunError as exc:  # damaged: made again, as a damaged partition is
        reason = f"it cannot be used ({exc})"
    else:
        reason, touched = _stale(existing, cfg)
        if reason is None:
            if touched:
                _refresh_inputs(existing, touched)
            return existing
    print_warning(f"{path}: {reason}; preparing it again")
    return None


def _input_paths(cfg: DatasetConfig) -> list[Path] | None:
    """The files the source reads for `cfg`; None where it cannot tell now (say, ogb's
    table is not installed on this machine): then the inputs are not compared."""
    try:
        return [Path(p) for p in DATASET_SOURCES.get(cfg.source).inputs(cfg)]
    except GnnrunError:
        return None


def _stale(
    dataset: GraphDataset, cfg: DatasetConfig, rehash: bool = True
) -> tuple[str | None, dict[int, Path]]:
    """(why the prepared `dataset` no longer matches `cfg` and its input files, None: it
    does; the inputs that were only moved or touched, by position, whose records to refresh).
    `rehash`: hash every input that has a recorded sha256 even where its size and mtime
    are as recorded (a rewrite may keep both)."""
    if dataset.info.get("config") != dataset_identity(cfg):
        return "it was prepared from a different config", {}
    recorded = dataset.info.get("inputs")
    inputs = _input_paths(cfg)
    if inputs is None:
        return None, {}
    if recorded is None:  # prepared before inputs were recorded
        return ("it does not record its input files" if inputs else None), {}
    if (
        not isinstance(recorded, list)
        or len(recorded) != len(inputs)
        or not all(isinstance(then, dict) for then in recorded)
    ):
        return "it was prepared from other input files", {}
    touched = {}
    for i, (path, then) in enumerate(zip(inputs, recorded, strict=True)):
        renamed = then.get("name") not in (None, path.name)
        if not path.is_file():
            if renamed:  # a file named by mistake, say: never the copy of another one
                return f"it was prepared from {then['name']}, and {path} does not exist", {}
            continue  # raw files deleted after preparing: the copy stands
        stat = path.stat()
        same_stamp = stat.st_size == then.get("size") and stat.st_mtime_ns == then.get("mtime_ns")
        if same_stamp and not (rehash and "sha256" in then):
            continue  # trusted without hashing
        if change := _input_change(path, stat.st_size, then):
            if renamed:  # another file, not a change of the one prepared
                return f"it was prepared from {then['name']}, not {path.name}", {}
            return f"{path} changed since it was prepared ({change})", {}
        if not same_stamp:
            touched[i] = path
    return None, touched


def _input_change(path: Path, size: int, then: dict[str, Any]) -> str | None:
    """How `path`, whose size or mtime differs from the record `then`, changed (None: its
    content did not)."""
    if size != then.get("size"):
        return f"{then.get('size')} bytes then, {size} now"
    if "sha256" not in then:
        return "modified since, too big to compare by content"
    return None if sha256_file(path) == then["sha256"] else "same size, other content"


def _refresh_inputs(dataset: GraphDataset, touched: dict[int, Path]) -> None:
    """Record the new size, mtime and name of inputs whose content was found unchanged, so
    that the next check trusts them without hashing (skipped where meta.json is read-only)."""
    meta_path = Path(dataset.path) / "meta.json"
    try:
        meta = read_json(meta_path)
        inputs = meta["info"]["inputs"]
        for i, path in touched.items():
            stat = path.stat()
            inputs[i] |= {"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        write_json_atomic(meta_path, meta)
    except (GnnrunError, OSError, KeyError, IndexError, TypeError):
        return
    dataset.info["inputs"] = inputs


def input_record(path: Path) -> dict[str, Any]:
    stat = path.stat()
    record = {"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if stat.st_size <= HASHED_INPUT_BYTES:
        record["sha256"] = sha256_file(path)
    return record


def load_prepared(cfg: DatasetConfig) -> GraphDataset:
    """Open an already prepared dataset, refusing a stale one (another config, or an
    input file whose content changed since): ranks never train on an old graph."""
    dataset = GraphDataset.load(Path(cfg.prepared_dir))
    if dataset.info.get("config") != dataset_identity(cfg):
        raise GnnrunError(
            f"{cfg.prepared_dir} was prepared from a different config than dataset={cfg.name} now "
            f"gives; run `{prepare_command(cfg)}` again"
        )
    reason, _ = _stale(dataset, cfg, rehash=False)
    if reason is not None:
        raise GnnrunError(
            f"{cfg.prepared_dir} is out of date: {reason}; run `{prepare_command(cfg)}` again"
        )
    return dataset


def prepare_command(cfg: DatasetConfig) -> str:
    """The command that prepares cfg's dataset: a graph read from the user's files is
    chosen by its source (dataset=custom, dataset=chunked), its name and its path."""
    path = getattr(cfg, "path", None)
    if path is None:
        return f"gnnrun data prepare dataset={cfg.name}"
    return f"gnnrun data prepare dataset={cfg.source} dataset.name={cfg.name} dataset.path={path}"
