"""The heterophilous benchmarks of Platonov et al. (2023): tolokers, roman-empire, ...

One `.npz` per dataset, as published at github.com/yandex-research/heterophilous-graphs
(`data/<name>.npz`):

- `node_features`: N x F float
- `node_labels`: N int (class ids from 0)
- `edges`: E x 2 int, each undirected edge listed once (gnnrun stores both directions)
- `train_masks`, `val_masks`, `test_masks`: S x N bool, one row per fixed split;
  `dataset.split` picks the row.

Task is "binary" for two classes (tolokers, minesweeper, questions: report
ROC-AUC), else "multiclass".
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.custom_files import what_it_is
from gnnrun.data.dataset import GraphDataset, task_for, too_many_classes
from gnnrun.data.graph import csr_from_edges
from gnnrun.data.registry import RAW_ROOT_HINT, DatasetConfig, register_source
from gnnrun.errors import GnnrunError


@dataclass
class HeterophilousDatasetConfig(DatasetConfig):
    """The npz layout of Platonov et al.'s heterophilous benchmarks (tolokers, ...)."""

    source: str = "heterophilous"
    file: str = MISSING
    split: int = 0  # which of the file's fixed splits

    def validate(self) -> None:
        super().validate()
        check(self.split >= 0, "dataset.split must be >= 0")


KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
SOURCE_HINT = (
    "get it from https://github.com/yandex-research/heterophilous-graphs (data/<name>.npz)"
)


@register_source("heterophilous", HeterophilousDatasetConfig, inputs=lambda cfg: [Path(cfg.file)])
def load(cfg: HeterophilousDatasetConfig) -> GraphDataset:
    path = Path(cfg.file)
    if not path.is_file():
        raise GnnrunError(
            f"{path} not found: place the dataset's .npz there or set dataset.file "
            f"({RAW_ROOT_HINT}); {SOURCE_HINT}"
        )
    if not zipfile.is_zipfile(path):  # numpy would call any other bytes "pickled (object) data"
        raise GnnrunError(
            f"cannot read {path} as .npz (it is {what_it_is(path)}, not a zip archive): the file "
            f"looks cut short or damaged; download it again ({SOURCE_HINT})"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise GnnrunError(
                    f"{path} lacks {', '.join(missing)} (found {', '.join(npz.files)}; expected "
                    f"{', '.join(KEYS)}); it is not a heterophilous-graphs file, {SOURCE_HINT}"
                )
            arrays = {k: npz[k] for k in KEYS}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise GnnrunError(
            f"cannot read {path} as .npz ({exc or type(exc).__name__}): the file looks cut short "
            f"or damaged; download it again ({SOURCE_HINT})"
        ) from None

    feat = np.ascontiguousarray(arrays["node_features"], dtype=np.float32)
    label = np.asarray(arrays["node_labels"]).astype(np.int64)
    edges = np.asarray(arrays["edges"])
    n = feat.shape[0]
    if feat.ndim != 2 or label.shape != (n,) or edges.ndim != 2 or edges.shape[1] != 2:
        raise GnnrunError(
            f"{path}: shapes node_features {feat.shape}, node_labels {label.shape}, edges "
            f"{edges.shape} do not fit (expected N x F, N, E x 2); {SOURCE_HINT}"
        )

    masks = {k: np.asarray(arrays[f"{k}_masks"], dtype=bool) for k in ("train", "val", "test")}
    if masks["train"].ndim == 1:  # single-split files
        masks = {k: m[None, :] for k, m in masks.items()}
    num_splits = masks["train"].shape[0]
    if any(m.shape != (num_splits, n) for m in masks.values()):
        raise GnnrunError(
            f"{path}: split masks have shapes {[m.shape for m in masks.values()]}, expected "
            f"({num_splits}, {n}) each; {SOURCE_HINT}"
        )
    if not 0 <= cfg.split < num_splits:
        raise GnnrunError(
            f"dataset.split={cfg.split} is out of range: {path} has {num_splits} fixed splits; "
            f"choose dataset.split between 0 and {num_splits - 1}"
        )

    try:
        indptr, indices = csr_from_edges(edges[:, 0], edges[:, 1], n, symmetrize=True)
    except ValueError as exc:
        raise GnnrunError(
            f"{path}: edges do not fit the {n} vertices ({exc}); {SOURCE_HINT}"
        ) from None
    num_classes = int(label.max()) + 1 if label.size else 0
    if problem := too_many_classes(label, num_classes):
        raise GnnrunError(f"{path}: {problem}")
    train_idx, val_idx, test_idx = (
        np.flatnonzero(masks[k][cfg.split]).astype(np.int64) for k in ("train", "val", "test")
    )
    return GraphDataset(
        name=cfg.name,
        indptr=indptr,
        indices=indices,
        feat=feat,
        label=label,
        train_idx=train_idx,
        val_idx=val_idx,
        test_idx=test_idx,
        num_classes=num_classes,
        directed=False,
        task=task_for(num_classes),
        info={"source": "heterophilous", "split": cfg.split, "num_splits": num_splits},
    )
