"""Your own graph, from one `.npz` file or a directory of `.npy` files (`dataset.path`).

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

- `label` may be an N x C matrix instead: C binary labels per vertex (0 or 1, -1
  where unknown), a multi-label dataset for `task=multilabel`; a vertex with no
  known label is unlabelled;
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

`dataset.path` may also be a directory holding the same arrays as separate
`.npy` files, one per array, named after it (`edge_index.npy`, `feat.npy`, ...,
written with `numpy.save`); every `.npy` file in it is read.

A heterogeneous graph (several vertex and edge types) has a layout of its own:
gnnrun.data.custom_hetero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import MISSING

from gnnrun.data.custom_files import int_array, npy_files, read_arrays, split_from_file
from gnnrun.data.custom_hetero import is_heterogeneous, load_heterogeneous
from gnnrun.data.dataset import GraphDataset, task_for, too_many_classes
from gnnrun.data.graph import csr_from_edges, edges_from_csr, stratified_split
from gnnrun.data.registry import DatasetConfig, SplitFractions, register_source
from gnnrun.errors import GnnrunError


@dataclass
class CustomDatasetConfig(DatasetConfig):
    source: str = "custom"
    path: str = MISSING  # a .npz file or a directory of .npy files, layout in docs/datasets.md
    to_undirected: bool = True
    split: SplitFractions = field(default_factory=SplitFractions)  # used when the file has no split

    def validate(self) -> None:
        super().validate()
        self.split.validate("dataset.split")


GRAPH_KEYS = {"edge_index": ("edge_index",), "edges": ("edges",), "csr": ("indptr", "indices")}
EXPECTED = (
    "a graph as edge_index (2 x E) or edges (E x 2) or indptr + indices (in-CSR), "
    "feat (N x F), label (N, -1 = unlabelled); optional train/val/test_idx or "
    "train/val/test_mask, num_nodes"
)


def _inputs(cfg: CustomDatasetConfig) -> list[Path]:
    """The files read: the .npz, or every .npy of the directory (a file added, removed or
    changed there prepares the dataset again). A missing .npz is named all the same: the
    prepared copy of a file of that name stands (raw data deleted after preparing), that
    of another name does not (gnnrun.data.prepare). A directory that is gone cannot tell
    which files it held: the prepared copy is then kept."""
    path = Path(cfg.path)
    if path.is_dir():
        return npy_files(path)
    if not path.exists() and path.suffix != ".npz":
        raise GnnrunError(f"custom dataset {path} not found")
    return [path]


def _fail(path: Path, problem: str) -> GnnrunError:
    return GnnrunError(f"custom dataset {path}: {problem}; the file must hold {EXPECTED}")


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
        edge_index = int_array(path, arrays, "edge_index", _fail)
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise _fail(path, f"edge_index has shape {edge_index.shape}, expected (2, E)")
        return kind, edge_index[0], edge_index[1], None
    if kind == "edges":
        edges = int_array(path, arrays, "edges", _fail)
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise _fail(path, f"edges has shape {edges.shape}, expected (E, 2)")
        return kind, edges[:, 0], edges[:, 1], None
    missing = [k for k in GRAPH_KEYS["csr"] if k not in arrays]
    if missing:
        raise _fail(
            path, f"a CSR needs both indptr and indices, {' and '.join(missing)} is missing"
        )
    indptr = int_array(path, arrays, "indptr", _fail)
    indices = int_array(path, arrays, "indices", _fail)
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


@register_source("custom", CustomDatasetConfig, inputs=_inputs)
def load(cfg: CustomDatasetConfig) -> GraphDataset:
    path = Path(cfg.path)
    arrays = read_arrays(path, EXPECTED)
    if is_heterogeneous(arrays):
        return load_heterogeneous(cfg, path, arrays)
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
    label = int_array(path, arrays, "label", _fail)
    if label.ndim == 2 and label.shape[0] == n:
        return _multilabel(cfg, path, arrays, feat, label)
    if label.shape != (n,):
        raise _fail(
            path,
            f"label has shape {label.shape}, expected ({n},) to match feat {feat.shape} "
            f"(or ({n}, C): C binary labels per vertex)",
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
    split = split_from_file(path, arrays, n, label, _fail)
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


def _multilabel(
    cfg: CustomDatasetConfig, path: Path, arrays: dict[str, np.ndarray], feat, label: np.ndarray
) -> GraphDataset:
    """An N x C label matrix: a multi-label dataset (gnnrun.tasks.multilabel)."""
    n, c = label.shape
    kind, src, dst, _ = _edges(path, arrays)
    if c < 1:
        raise _fail(path, f"label has shape {label.shape}: give at least one label column")
    if label.size and (label.min() < -1 or label.max() > 1):
        raise _fail(
            path,
            f"a 2-D label holds binary labels: 0, 1 or -1 where unknown, not values in "
            f"[{label.min()}, {label.max()}]",
        )
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise _fail(path, f"{kind} has vertex ids outside [0, {n}) (N from feat)")
    # The split is drawn over (and checked against) the vertices with a known label.
    labelled = np.where((label >= 0).any(axis=1), 0, -1).astype(np.int64)
    if not np.any(labelled >= 0):
        raise _fail(path, "no vertex has a known label (all are -1)")
    indptr, indices = csr_from_edges(src, dst, n, symmetrize=cfg.to_undirected)
    split = split_from_file(path, arrays, n, labelled, _fail)
    from_file = split is not None
    if split is None:
        fractions = (cfg.split.train, cfg.split.val, cfg.split.test)
        split = stratified_split(labelled, fractions, cfg.seed)
    return GraphDataset(
        name=cfg.name,
        indptr=indptr,
        indices=indices,
        feat=np.ascontiguousarray(feat, dtype=np.float32),
        label=np.ascontiguousarray(label, dtype=np.int64),
        train_idx=split[0],
        val_idx=split[1],
        test_idx=split[2],
        num_classes=c,
        directed=not cfg.to_undirected,
        task="multilabel",
        info={"source": "custom", "graph_encoding": kind, "split_from_file": from_file},
    )
