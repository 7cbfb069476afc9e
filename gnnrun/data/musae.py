"""MUSAE graphs (Rozemberczki et al., 2019), e.g. Facebook page-page.

Three files in `raw_dir`, as published at github.com/benedekrozemberczki/MUSAE
(and SNAP's facebook_large.zip), with `<prefix>` = `dataset.prefix`:

- `<prefix>_edges.csv`: header `id_1,id_2`, one undirected edge per row;
  self-loops are dropped and both directions stored.
- `<prefix>_features.json`: vertex id (string) -> list of active feature ids.
- `<prefix>_target.csv`: column `id` (vertex ids 0..N-1) and the label column
  `dataset.label_column`; the class names, sorted, become class ids 0..C-1
  (the names are kept in `info["classes"]`).

Features are the sparse binary bag of feature ids. With `dataset.feature_dim > 0`
they are reduced to that many dimensions by a truncated SVD (ARPACK, exact top
singular triplets, started from a vector drawn from `dataset.seed`, signs fixed
so that each left singular vector's largest entry is positive, on one BLAS
thread so that the bytes do not depend on the core count): the features are
U * S, columns ordered by decreasing singular value, float32. With
`feature_dim = 0` the dense binary matrix is kept. The split is a seeded
stratified split with the fractions of `dataset.split`.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset, task_for
from gnnrun.data.graph import csr_from_edges, stratified_split
from gnnrun.data.registry import RAW_ROOT_HINT, DatasetConfig, SplitFractions, register_source
from gnnrun.errors import GnnrunError


@dataclass
class MusaeDatasetConfig(DatasetConfig):
    source: str = "musae"
    raw_dir: str = MISSING
    prefix: str = "facebook"  # <prefix>_edges.csv, <prefix>_features.json, <prefix>_target.csv
    label_column: str = "page_type"
    feature_dim: int = 128  # truncated SVD of the sparse bag of feature ids; 0 keeps them dense
    split: SplitFractions = field(default_factory=lambda: SplitFractions(0.2, 0.2, 0.6))

    def validate(self) -> None:
        super().validate()
        check(self.feature_dim >= 0, "dataset.feature_dim must be >= 0")
        self.split.validate("dataset.split")


if TYPE_CHECKING:
    import scipy.sparse as sp

# Feature ids above this many times max(distinct feature ids, vertices) are refused: the
# bag of feature ids gets one column per id up to the largest (a dense matrix with
# dataset.feature_dim=0, singular vectors that long otherwise).
MAX_FEATURE_ID_SPREAD = 16

SOURCE_HINT = (
    "get them from https://github.com/benedekrozemberczki/MUSAE (input/) or "
    "https://snap.stanford.edu/data/facebook-large-page-page-network.html"
)


def _paths(cfg: MusaeDatasetConfig) -> dict[str, Path]:
    names = {"edges": "edges.csv", "features": "features.json", "target": "target.csv"}
    return {key: Path(cfg.raw_dir) / f"{cfg.prefix}_{suffix}" for key, suffix in names.items()}


def _files(cfg: MusaeDatasetConfig) -> dict[str, Path]:
    raw_dir = Path(cfg.raw_dir)
    files = _paths(cfg)
    missing = [p.name for p in files.values() if not p.is_file()]
    if missing:
        raise GnnrunError(
            f"MUSAE dataset {cfg.prefix}: missing {', '.join(missing)} in {raw_dir}; place "
            f"{', '.join(p.name for p in files.values())} there or set dataset.raw_dir "
            f"({RAW_ROOT_HINT}; {SOURCE_HINT})"
        )
    return files


def _damaged(path: Path, reason: object) -> GnnrunError:
    return GnnrunError(
        f"cannot read {path} ({reason}): the file looks cut short or damaged; download it "
        f"again ({SOURCE_HINT})"
    )


def _read_csv(path: Path, columns: tuple[str, ...]) -> Any:
    """The CSV as a DataFrame; a damaged file, or missing or non-integer ids, is refused."""
    import pandas as pd

    try:
        table = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:  # EmptyDataError too
        raise _damaged(path, exc) from None
    for column in columns:
        if column in table.columns and not np.issubdtype(table[column].dtype, np.integer):
            raise _damaged(path, f"column {column} holds values that are not integer ids")
    return table


def _read_target(path: Path, label_column: str) -> tuple[np.ndarray, list[str]]:
    target = _read_csv(path, ("id",))
    for column in ("id", label_column):
        if column not in target.columns:
            raise GnnrunError(
                f"{path} has no column {column!r} (columns: {', '.join(map(str, target.columns))}); "
                "set dataset.label_column to the label column"
            )
    ids = target["id"].to_numpy()
    n = len(target)
    if not np.issubdtype(ids.dtype, np.integer) or not np.array_equal(np.sort(ids), np.arange(n)):
        raise GnnrunError(f"{path}: column id must hold each vertex id 0..{n - 1} exactly once")
    missing = target[label_column].isna().to_numpy()
    if missing.any():  # a row cut short: "22469," or "22469"
        raise _damaged(path, f"vertex {ids[missing][0]} has no {label_column}")
    names = target[label_column].astype(str).to_numpy()
    classes = sorted(set(names.tolist()))
    lookup = {name: i for i, name in enumerate(classes)}
    label = np.empty(n, dtype=np.int64)
    label[ids] = np.fromiter((lookup[v] for v in names), dtype=np.int64, count=n)
    return label, classes


def _read_features(path: Path, n: int) -> sp.csr_matrix:
    import scipy.sparse as sp

    try:
        with open(path) as f:
            table = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise _damaged(path, exc) from None
    if not isinstance(table, dict):
        raise _damaged(path, "not an object of vertex id -> feature ids")
    rows, cols = [], []
    for key, active in table.items():
        try:
            node, ids = int(key), np.asarray(active, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise _damaged(
                path, f"vertex {key!r}: {active!r} is not a list of feature ids"
            ) from None
        if not 0 <= node < n:
            raise GnnrunError(
                f"{path}: vertex id {key} is outside the {n} vertices of the target file"
            )
        rows.append(np.full(ids.size, node, dtype=np.int64))
        cols.append(ids)
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    col = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    if col.size and col.min() < 0:
        raise GnnrunError(f"{path}: feature ids must be non-negative")
    dim = int(col.max()) + 1 if col.size else 1
    distinct = np.unique(col).size
    if dim > MAX_FEATURE_ID_SPREAD * max(distinct, n):
        top = int(np.argmax(col))
        raise _damaged(
            path,
            f"feature id {col[top]} of vertex {row[top]} is far beyond the {distinct} distinct "
            f"feature ids of its {n} vertices: feature ids number the features 0..F-1, and "
            f"this one would make {dim:,} feature columns",
        )
    bag = sp.csr_matrix((np.ones(row.size, dtype=np.float64), (row, col)), shape=(n, dim))
    bag.sum_duplicates()
    bag.data[:] = 1.0  # a feature id listed twice is still one active feature
    return bag


def _single_blas_thread() -> contextlib.AbstractContextManager:
    try:
        from threadpoolctl import (
            threadpool_limits,
        )  # installed with scikit-learn (an ogb dependency)
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def truncated_svd(matrix: sp.spmatrix, k: int, seed: int) -> np.ndarray:
    """U * S of the top-k singular triplets, largest first, deterministic signs, float32."""
    from scipy.sparse.linalg import svds

    rng = np.random.default_rng(seed)
    v0 = rng.standard_normal(min(matrix.shape))
    with _single_blas_thread():  # same bytes whatever the core count; no oversubscription stalls
        u, s, _ = svds(matrix.astype(np.float64), k=k, v0=v0, solver="arpack")
    order = np.argsort(-s, kind="stable")
    u, s = u[:, order], s[order]
    biggest = np.argmax(np.abs(u), axis=0)
    signs = np.sign(u[biggest, np.arange(k)])
    signs[signs == 0] = 1.0
    return np.ascontiguousarray((u * (s * signs)).astype(np.float32))


@register_source("musae", MusaeDatasetConfig, inputs=lambda cfg: list(_paths(cfg).values()))
def load(cfg: MusaeDatasetConfig) -> GraphDataset:
    files = _files(cfg)
    label, classes = _read_target(files["target"], cfg.label_column)
    n = label.size
    edges = _read_csv(files["edges"], ("id_1", "id_2"))
    if not {"id_1", "id_2"} <= set(edges.columns):
        raise GnnrunError(
            f"{files['edges']} must have the header id_1,id_2 (found {', '.join(map(str, edges.columns))})"
        )
    src, dst = edges["id_1"].to_numpy(), edges["id_2"].to_numpy()
    beyond = max(int(src.max()), int(dst.max())) if src.size else -1
    if beyond >= n:  # the target file lists vertices 0..n-1 exactly once (checked above)
        raise GnnrunError(
            f"{files['target']} lists {n} vertices (ids 0..{n - 1}) but {files['edges'].name} "
            f"names vertex {beyond}: the target file looks cut short, download it again "
            f"({SOURCE_HINT}); or the edges are another graph's"
        )
    try:
        indptr, indices = csr_from_edges(src, dst, n, symmetrize=True)
    except ValueError as exc:
        raise GnnrunError(
            f"{files['edges']}: edges do not fit the {n} vertices of {files['target'].name} ({exc})"
        ) from None

    bag = _read_features(files["features"], n)
    if cfg.feature_dim > 0:
        if cfg.feature_dim >= min(bag.shape):
            raise GnnrunError(
                f"dataset.feature_dim={cfg.feature_dim} must be below {min(bag.shape)} (the "
                f"{bag.shape[1]} feature ids of {files['features'].name}); lower it, or set 0 to "
                "keep the binary features"
            )
        feat = truncated_svd(bag, cfg.feature_dim, cfg.seed)
    else:
        feat = bag.toarray().astype(np.float32)

    split = cfg.split
    train_idx, val_idx, test_idx = stratified_split(
        label, (split.train, split.val, split.test), cfg.seed
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
        num_classes=len(classes),
        directed=False,
        task=task_for(len(classes)),
        info={
            "source": "musae",
            "classes": classes,
            "self_loops_dropped": int(np.count_nonzero(src == dst)),
            "feature_ids": int(bag.shape[1]),
        },
    )
