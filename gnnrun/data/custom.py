"""Your own graph, from one `.npz` file (`dataset.path`).

Write it with `numpy.savez(path, **arrays)` (or `savez_compressed`); object
arrays are refused. N is the number of vertices, E of edges, F of features.

Graph, exactly one of:

- `edge_index`: 2 x E int, row 0 the sources, row 1 the destinations (PyG style);
- `edges`: E x 2 int, one `(source, destination)` pair per row;
- `indptr` (N + 1 int) and `indices` (E int): an in-CSR, where
  `indices[indptr[v]:indptr[v+1]]` lists the sources `u` of the edges `u -> v`.

Vertex data, required:

- `feat`: N x F float (any real or bool dtype; stored as float32);
- `label`: N int, class ids 0..C-1, and -1 for unlabelled vertices. C is
  `max(label) + 1`, at most the number of labelled vertices (or 2); the task is
  "binary" when C = 2, else "multiclass".

Optional:

- a split, either `train_idx`, `val_idx`, `test_idx` (int vertex ids) or
  `train_mask`, `val_mask`, `test_mask` (N bool); all three of one kind. The
  parts must not overlap and hold labelled vertices only. Without a split,
  gnnrun draws a seeded stratified one from `dataset.split` fractions
  and `dataset.seed`;
- `num_nodes`: a scalar, checked against the other arrays (useful to say that
  trailing vertices have no edges when there is no CSR).

With `dataset.to_undirected` (the default) every edge is stored in both
directions; otherwise the graph is kept directed as given. Self-loops and
duplicate edges are always dropped.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import MISSING

from gnnrun.data.dataset import GraphDataset, task_for, too_many_classes
from gnnrun.data.graph import csr_from_edges, edges_from_csr, sorted_unique, stratified_split
from gnnrun.data.registry import DatasetConfig, SplitFractions, register_source
from gnnrun.errors import GnnrunError


@dataclass
class CustomDatasetConfig(DatasetConfig):
    source: str = "custom"
    path: str = MISSING  # a .npz file, layout in docs/datasets.md
    to_undirected: bool = True
    split: SplitFractions = field(default_factory=SplitFractions)  # used when the file has no split

    def validate(self) -> None:
        super().validate()
        self.split.validate("dataset.split")


GRAPH_KEYS = {"edge_index": ("edge_index",), "edges": ("edges",), "csr": ("indptr", "indices")}
SPLIT_IDX = ("train_idx", "val_idx", "test_idx")
SPLIT_MASK = ("train_mask", "val_mask", "test_mask")
EXPECTED = (
    "a graph as edge_index (2 x E) or edges (E x 2) or indptr + indices (in-CSR), "
    "feat (N x F), label (N, -1 = unlabelled); optional train/val/test_idx or "
    "train/val/test_mask, num_nodes"
)


def _load(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise GnnrunError(
            f"custom dataset file {path} not found; set dataset.path to your .npz "
            f"(it must hold {EXPECTED})"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GnnrunError(
            f"cannot read {path} as a .npz of plain arrays ({exc}); write it with numpy.savez "
            "and no object arrays"
        ) from None


def _fail(path: Path, problem: str) -> GnnrunError:
    return GnnrunError(f"custom dataset {path}: {problem}; the file must hold {EXPECTED}")


def _int_array(path: Path, arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    value = arrays[key]
    if not np.issubdtype(value.dtype, np.integer):
        raise _fail(path, f"{key} has dtype {value.dtype}, expected integers")
    return value.astype(np.int64, copy=False)


def _edges(
    path: Path, arrays: dict[str, np.ndarray]
) -> tuple[str, np.ndarray, np.ndarray, int | None]:
    """(encoding, src, dst, num_nodes the encoding implies or None)."""
    found = [kind for kind, keys in GRAPH_KEYS.items() if any(k in arrays for k in keys)]
    if not found:
        raise _fail(path, f"no graph found (keys present: {', '.join(sorted(arrays)) or 'none'})")
    if len(found) > 1:
        raise _fail(
            path, f"it holds several graph encodings ({', '.join(found)}); keep exactly one"
        )
    kind = found[0]
    if kind == "edge_index":
        edge_index = _int_array(path, arrays, "edge_index")
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise _fail(path, f"edge_index has shape {edge_index.shape}, expected (2, E)")
        return kind, edge_index[0], edge_index[1], None
    if kind == "edges":
        edges = _int_array(path, arrays, "edges")
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise _fail(path, f"edges has shape {edges.shape}, expected (E, 2)")
        return kind, edges[:, 0], edges[:, 1], None
    missing = [k for k in GRAPH_KEYS["csr"] if k not in arrays]
    if missing:
        raise _fail(
            path, f"a CSR needs both indptr and indices, {' and '.join(missing)} is missing"
        )
    indptr = _int_array(path, arrays, "indptr")
    indices = _int_array(path, arrays, "indices")
    if indptr.ndim != 1 or indptr.size < 1 or indices.ndim != 1:
        raise _fail(
            path, f"indptr {indptr.shape} / indices {indices.shape} must be 1-d, indptr non-empty"
        )
    if indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
        raise _fail(
            path,
            f"indptr must start at 0, never decrease and end at len(indices) = {indices.size}",
        )
    src, dst = edges_from_csr(indptr, indices)
    return kind, src, dst, int(indptr.size - 1)


def _split_from_file(
    path: Path, arrays: dict[str, np.ndarray], n: int, label: np.ndarray
) -> tuple[np.ndarray, ...] | None:
    has_idx = [k for k in SPLIT_IDX if k in arrays]
    has_mask = [k for k in SPLIT_MASK if k in arrays]
    if has_idx and has_mask:
        raise _fail(
            path, f"it mixes split ids ({', '.join(has_idx)}) and masks ({', '.join(has_mask)})"
        )
    if not has_idx and not has_mask:
        return None
    keys = SPLIT_IDX if has_idx else SPLIT_MASK
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise _fail(path, f"the split is incomplete: {', '.join(missing)} missing")
    parts = []
    for key in keys:
        value = arrays[key]
        if has_mask:
            if value.dtype != np.bool_ or value.shape != (n,):
                raise _fail(
                    path,
                    f"{key} has shape {value.shape} and dtype {value.dtype}, expected ({n},) bool",
                )
            idx = np.flatnonzero(value).astype(np.int64)
        else:
            idx = _int_array(path, arrays, key)
            if idx.ndim != 1:
                raise _fail(path, f"{key} has shape {idx.shape}, expected a 1-d list of vertex ids")
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise _fail(
                    path,
                    f"{key} has vertex ids outside [0, {n}) (min {idx.min()}, max {idx.max()})",
                )
            idx = sorted_unique(idx)
        unlabelled = int(np.count_nonzero(label[idx] < 0))
        if unlabelled:
            raise _fail(path, f"{key} holds {unlabelled} unlabelled vertices (label -1)")
        parts.append(idx)
    for i in range(3):
        for j in range(i + 1, 3):
            common = np.intersect1d(parts[i], parts[j], assume_unique=True).size
            if common:
                raise _fail(path, f"{keys[i]} and {keys[j]} share {common} vertices")
    return tuple(parts)


@register_source("custom", CustomDatasetConfig, inputs=lambda cfg: [Path(cfg.path)])
def load(cfg: CustomDatasetConfig) -> GraphDataset:
    path = Path(cfg.path)
    arrays = _load(path)
    missing = [k for k in ("feat", "label") if k not in arrays]
    if missing:
        raise _fail(
            path,
            f"{', '.join(missing)} missing (keys present: {', '.join(sorted(arrays)) or 'none'})",
        )
    kind, src, dst, csr_nodes = _edges(path, arrays)

    feat = arrays["feat"]
    if feat.ndim != 2:
        raise _fail(path, f"feat has shape {feat.shape}, expected (N, F)")
    if not (np.issubdtype(feat.dtype, np.number) or feat.dtype == np.bool_) or np.iscomplexobj(
        feat
    ):
        raise _fail(path, f"feat has dtype {feat.dtype}, expected a real number type")
    n = int(feat.shape[0])
    label = _int_array(path, arrays, "label")
    if label.shape != (n,):
        raise _fail(
            path, f"label has shape {label.shape}, expected ({n},) to match feat {feat.shape}"
        )
    if csr_nodes is not None and csr_nodes != n:
        raise _fail(path, f"indptr describes {csr_nodes} vertices but feat has {n} rows")
    if "num_nodes" in arrays:
        declared = arrays["num_nodes"]
        if (
            declared.size != 1
            or not np.issubdtype(declared.dtype, np.integer)
            or int(declared) != n
        ):
            raise _fail(path, f"num_nodes is {declared.tolist()} but feat has {n} rows")
    if label.size and label.min() < -1:
        raise _fail(
            path, f"label has values below -1 (min {label.min()}); use -1 for unlabelled vertices"
        )
    if not np.any(label >= 0):
        raise _fail(path, "no vertex has a label (all are -1)")
    num_classes = int(label.max()) + 1
    if problem := too_many_classes(label, num_classes):  # before anything that wide is made
        raise GnnrunError(f"custom dataset {path}: {problem}")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise _fail(path, f"{kind} has vertex ids outside [0, {n}) (N from feat)")

    indptr, indices = csr_from_edges(src, dst, n, symmetrize=cfg.to_undirected)
    split = _split_from_file(path, arrays, n, label)
    from_file = split is not None
    if split is None:
        fractions = (cfg.split.train, cfg.split.val, cfg.split.test)
        split = stratified_split(label, fractions, cfg.seed)
    return GraphDataset(
        name=cfg.name,
        indptr=indptr,
        indices=indices,
        feat=np.ascontiguousarray(feat, dtype=np.float32),
        label=label,
        train_idx=split[0],
        val_idx=split[1],
        test_idx=split[2],
        num_classes=num_classes,
        directed=not cfg.to_undirected,
        task=task_for(num_classes),
        info={"source": "custom", "graph_encoding": kind, "split_from_file": from_file},
    )
