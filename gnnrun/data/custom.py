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

`dataset.path` may also be a directory holding the same arrays as separate
`.npy` files, one per array, named after it (`edge_index.npy`, `feat.npy`, ...,
written with `numpy.save`); every `.npy` file in it is read.

Heterogeneous graphs (gnnrun.data.hetero), in the style of DGL's heterograph
and PyG's HeteroData. A file or directory holding any of `node_types`,
`target`, `edge_index__*`, `feat__*` or `num_nodes__*` is read as one, and
then must not hold the homogeneous graph or `feat` keys. Type and relation
names are plain names: a letter, then letters, digits and single underscores,
not ending in one (so `__` only ever separates the parts of an array name).
Ids are within their type: each type's vertices are 0..count-1.

- `edge_index__<src>__<relation>__<dst>`: 2 x E int, one array per canonical
  relation (source type, name, destination type); row 0 the source ids (of
  type `src`), row 1 the destination ids (of type `dst`). At least one;
- `target`: str scalar, the labelled type;
- `label`: int, one per vertex of the target type, class ids 0..C-1, -1 for
  unlabelled vertices (every vertex of another type is unlabelled);
- `node_types` (optional): 1-d str array of every type name, in the order of
  the id ranges; without it, the types the array names mention, sorted;
- `num_nodes__<type>` (optional): int scalar, the type's vertex count; without
  it the count comes from `feat__<type>` or `label` (target), else from the
  largest id in the type's edges plus one. All that are given must agree;
- `feat__<type>` (optional): count x F real, the type's features; a type without
  one is featureless (models learn an embedding per vertex);
- a split (optional), as above but of the target type: `train_idx` ... (ids
  within the target type) or `train_mask` ... (one bool per target vertex);
  without one, a seeded stratified split of the labelled target vertices.

Relations are numbered in sorted (source, name, destination) order. With
`dataset.to_undirected` (the default) every given relation whose reverse is not
given gets it, after the given ones: the reverse of `(s, r, d)` is
`(d, rev_r, s)` (and that of `(s, rev_r, d)` is `(d, r, s)`), also for a
relation from a type to itself, whose reverse is another relation as in DGL's
examples. With `dataset.to_undirected=false` only the given relations are
kept. Within a relation, self-loops and repeated edges are dropped.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import MISSING

from gnnrun.data.dataset import GraphDataset, task_for, too_many_classes
from gnnrun.data.graph import csr_from_edges, edges_from_csr, sorted_unique, stratified_split
from gnnrun.data.hetero import HeteroSchema, Relation, typed_csr
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
SPLIT_IDX = ("train_idx", "val_idx", "test_idx")
SPLIT_MASK = ("train_mask", "val_mask", "test_mask")
EXPECTED = (
    "a graph as edge_index (2 x E) or edges (E x 2) or indptr + indices (in-CSR), "
    "feat (N x F), label (N, -1 = unlabelled); optional train/val/test_idx or "
    "train/val/test_mask, num_nodes"
)


def _load(path: Path) -> dict[str, np.ndarray]:
    if path.is_dir():
        return _load_directory(path)
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


def _npy_files(path: Path) -> list[Path]:
    """The `.npy` files of a directory dataset, sorted: every one is read."""
    return sorted(p for p in path.glob("*.npy") if p.is_file())


def _load_directory(path: Path) -> dict[str, np.ndarray]:
    files = _npy_files(path)
    if not files:
        raise GnnrunError(
            f"custom dataset directory {path} holds no .npy files; write one array per file "
            "into it with numpy.save, named after the array (edge_index__<src>__<relation>"
            "__<dst>.npy, label.npy, target.npy, ... or edge_index.npy, feat.npy, label.npy), "
            "or set dataset.path to a .npz file"
        )
    arrays = {}
    for file in files:
        try:
            arrays[file.stem] = np.load(file, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise GnnrunError(
                f"cannot read {file} as a .npy of a plain array ({exc}); write it with "
                "numpy.save and no object arrays"
            ) from None
    return arrays


def _inputs(cfg: CustomDatasetConfig) -> list[Path]:
    """The files read: the .npz, or every .npy of the directory (a file added, removed or
    changed there prepares the dataset again). A path that is gone (raw data deleted after
    preparing) cannot tell which files it held: the prepared copy is then kept."""
    path = Path(cfg.path)
    if path.is_dir():
        return _npy_files(path)
    if not path.exists():
        raise GnnrunError(f"custom dataset {path} not found")
    return [path]


def _fail(path: Path, problem: str) -> GnnrunError:
    return GnnrunError(f"custom dataset {path}: {problem}; the file must hold {EXPECTED}")


def _int_array(
    path: Path,
    arrays: dict[str, np.ndarray],
    key: str,
    fail: Callable[[Path, str], GnnrunError] = _fail,
) -> np.ndarray:
    value = arrays[key]
    if not np.issubdtype(value.dtype, np.integer):
        raise fail(path, f"{key} has dtype {value.dtype}, expected integers")
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
    path: Path,
    arrays: dict[str, np.ndarray],
    n: int,
    label: np.ndarray,
    fail: Callable[[Path, str], GnnrunError] = _fail,
    ids: str = "vertex ids",
) -> tuple[np.ndarray, ...] | None:
    """The split the file gives (None: none); `ids` says what its ids are, in messages."""
    has_idx = [k for k in SPLIT_IDX if k in arrays]
    has_mask = [k for k in SPLIT_MASK if k in arrays]
    if has_idx and has_mask:
        raise fail(
            path, f"it mixes split ids ({', '.join(has_idx)}) and masks ({', '.join(has_mask)})"
        )
    if not has_idx and not has_mask:
        return None
    keys = SPLIT_IDX if has_idx else SPLIT_MASK
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise fail(path, f"the split is incomplete: {', '.join(missing)} missing")
    parts = []
    for key in keys:
        value = arrays[key]
        if has_mask:
            if value.dtype != np.bool_ or value.shape != (n,):
                raise fail(
                    path,
                    f"{key} has shape {value.shape} and dtype {value.dtype}, expected ({n},) bool",
                )
            idx = np.flatnonzero(value).astype(np.int64)
        else:
            idx = _int_array(path, arrays, key, fail)
            if idx.ndim != 1:
                raise fail(path, f"{key} has shape {idx.shape}, expected a 1-d list of {ids}")
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise fail(
                    path,
                    f"{key} has {ids} outside [0, {n}) (min {idx.min()}, max {idx.max()})",
                )
            idx = sorted_unique(idx)
        unlabelled = int(np.count_nonzero(label[idx] < 0))
        if unlabelled:
            raise fail(path, f"{key} holds {unlabelled} unlabelled vertices (label -1)")
        parts.append(idx)
    for i in range(3):
        for j in range(i + 1, 3):
            common = np.intersect1d(parts[i], parts[j], assume_unique=True).size
            if common:
                raise fail(path, f"{keys[i]} and {keys[j]} share {common} vertices")
    return tuple(parts)


@register_source("custom", CustomDatasetConfig, inputs=_inputs)
def load(cfg: CustomDatasetConfig) -> GraphDataset:
    path = Path(cfg.path)
    arrays = _load(path)
    if _is_heterogeneous(arrays):
        return _load_heterogeneous(cfg, path, arrays)
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


# Heterogeneous graphs: the layout is in the module docstring.

EDGE_PREFIX = "edge_index__"
FEAT_PREFIX = "feat__"
COUNT_PREFIX = "num_nodes__"
HETERO_PREFIXES = (EDGE_PREFIX, FEAT_PREFIX, COUNT_PREFIX)
HETERO_KEYS = ("node_types", "target")
HOMOGENEOUS_KEYS = ("edge_index", "edges", "indptr", "indices", "feat", "num_nodes")
SHARED_KEYS = ("label", *SPLIT_IDX, *SPLIT_MASK)
# A type or relation name: `__` never occurs in one, so it can separate an array name's parts.
PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*")
HETERO_EXPECTED = (
    "edge_index__<src>__<relation>__<dst> (2 x E, ids within their types) per relation, "
    "target (the labelled type's name), label (one per target vertex, -1 = unlabelled); "
    "optional node_types, num_nodes__<type>, feat__<type> (count x F), and a split of the "
    "target type (train/val/test_idx or train/val/test_mask)"
)


def _is_heterogeneous(arrays: dict[str, np.ndarray]) -> bool:
    return any(_hetero_key(key) for key in arrays)


def _hetero_key(key: str) -> bool:
    return key in HETERO_KEYS or key.startswith(HETERO_PREFIXES)


def _hetero_fail(path: Path, problem: str) -> GnnrunError:
    return GnnrunError(
        f"custom dataset {path}: {problem}; a heterogeneous graph holds {HETERO_EXPECTED}"
    )


def _listed(keys: list[str], most: int = 6) -> str:
    return ", ".join(keys[:most]) + (f", ... ({len(keys)} in all)" if len(keys) > most else "")


def _check_keys(path: Path, arrays: dict[str, np.ndarray]) -> None:
    hetero = sorted(k for k in arrays if _hetero_key(k))
    homogeneous = sorted(k for k in arrays if k in HOMOGENEOUS_KEYS)
    if homogeneous:
        raise _hetero_fail(
            path,
            f"it mixes homogeneous keys ({_listed(homogeneous)}) with heterogeneous ones "
            f"({_listed(hetero)}); keep one layout: a heterogeneous graph names each relation's "
            "edges edge_index__<src>__<relation>__<dst> and each type's features feat__<type>, "
            "a homogeneous one has none of node_types, target, edge_index__*, feat__*, "
            "num_nodes__*",
        )
    unknown = sorted(k for k in arrays if not _hetero_key(k) and k not in SHARED_KEYS)
    if unknown:
        single = [k for k in unknown if k.startswith(tuple(p[:-1] for p in HETERO_PREFIXES))]
        hint = (
            f" ({single[0]}: the parts of an array name are joined by two underscores, "
            "as in feat__paper)"
            if single
            else ""
        )
        raise _hetero_fail(path, f"unknown arrays {_listed(unknown)}{hint}; rename or remove them")


def _plain_name(path: Path, name: str, where: str) -> str:
    if not PLAIN_NAME.fullmatch(name):
        cleaned = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
        example = f" such as {cleaned!r}" if PLAIN_NAME.fullmatch(cleaned) else ""
        raise _hetero_fail(
            path,
            f"{where} {name!r} is not a plain name: use a letter, then letters, digits and "
            f"single underscores, not ending in one{example}",
        )
    return name


def _strings(path: Path, arrays: dict[str, np.ndarray], key: str, example: str) -> list[str]:
    value = arrays[key]
    if value.dtype.kind not in "US":
        raise _hetero_fail(
            path, f"{key} has dtype {value.dtype}, expected strings, e.g. {key}={example}"
        )
    return [v.decode() if isinstance(v, bytes) else str(v) for v in value.reshape(-1).tolist()]


def _relation_arrays(path: Path, arrays: dict[str, np.ndarray]) -> dict[Relation, np.ndarray]:
    """The given relations, each with its 2 x E int64 ids (within their types)."""
    given: dict[Relation, np.ndarray] = {}
    for key in sorted(arrays):
        if not key.startswith(EDGE_PREFIX):
            continue
        parts = key[len(EDGE_PREFIX) :].split("__")
        if "___" in key:
            raise _hetero_fail(
                path,
                f"{key} has three underscores in a row: the names joined by __ must not start "
                "or end with _",
            )
        if len(parts) != 3:
            raise _hetero_fail(
                path,
                f"{key} is not named edge_index__<source type>__<relation>__<destination type> "
                "(three plain names joined by __)",
            )
        for part, what in zip(parts, ("source type", "relation", "destination type"), strict=True):
            _plain_name(path, part, f"{key}: its {what}")
        edge_index = _int_array(path, arrays, key, _hetero_fail)
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise _hetero_fail(
                path,
                f"{key} has shape {edge_index.shape}, expected (2, E): row 0 the sources, "
                "row 1 the destinations",
            )
        given[(parts[0], parts[1], parts[2])] = edge_index
    if not given:
        raise _hetero_fail(
            path,
            "it holds no relation; give each relation's edges as "
            "edge_index__<src>__<relation>__<dst>",
        )
    return given


def _node_types(
    path: Path, arrays: dict[str, np.ndarray], given: dict[Relation, np.ndarray], target: str
) -> list[str]:
    """The vertex types in id-range order, every type an array name mentions among them."""
    mentions = [(f"{EDGE_PREFIX}{s}__{r}__{d}", t) for s, r, d in sorted(given) for t in (s, d)] + [
        (key, _plain_name(path, key[len(prefix) :], f"{key}: its vertex type"))
        for key in sorted(arrays)
        for prefix in (FEAT_PREFIX, COUNT_PREFIX)
        if key.startswith(prefix)
    ]
    mentions.append(("target", target))
    if "node_types" not in arrays:
        return sorted({t for _, t in mentions})
    if arrays["node_types"].ndim != 1 or arrays["node_types"].size == 0:
        raise _hetero_fail(
            path,
            f"node_types has shape {arrays['node_types'].shape}, expected a 1-d list of the "
            "type names, e.g. node_types=numpy.array(['paper', 'author'])",
        )
    node_types = _strings(path, arrays, "node_types", "numpy.array(['paper', 'author'])")
    for name in node_types:
        _plain_name(path, name, "node_types: the type")
    repeated = sorted({t for t in node_types if node_types.count(t) > 1})
    if repeated:
        raise _hetero_fail(path, f"node_types repeats {', '.join(repeated)}; list each type once")
    for key, name in mentions:
        if name not in node_types:
            raise _hetero_fail(
                path,
                f"{key} names the vertex type {name!r}, which node_types ({', '.join(node_types)}) "
                "lacks: add it to node_types or correct the name",
            )
    return node_types


def _target(path: Path, arrays: dict[str, np.ndarray]) -> str:
    if "target" not in arrays:
        raise _hetero_fail(
            path,
            "target is missing: save the name of the labelled vertex type as target, "
            "e.g. target=numpy.array('paper')",
        )
    names = _strings(path, arrays, "target", "numpy.array('paper')")
    if len(names) != 1:
        raise _hetero_fail(
            path, f"target holds {len(names)} names, expected one: the labelled vertex type"
        )
    return _plain_name(path, names[0], "target: the type")


def _type_features(
    path: Path, arrays: dict[str, np.ndarray], node_types: list[str]
) -> dict[str, np.ndarray]:
    feats = {}
    for t in node_types:
        key = FEAT_PREFIX + t
        if key not in arrays:
            continue
        feat = arrays[key]
        if feat.ndim != 2:
            raise _hetero_fail(path, f"{key} has shape {feat.shape}, expected (vertices of {t}, F)")
        if not (np.issubdtype(feat.dtype, np.number) or feat.dtype == np.bool_) or np.iscomplexobj(
            feat
        ):
            raise _hetero_fail(path, f"{key} has dtype {feat.dtype}, expected a real number type")
        if feat.shape[1] == 0:
            raise _hetero_fail(
                path,
                f"{key} has no columns; leave it out to make {t!r} featureless (models learn an "
                "embedding per vertex)",
            )
        feats[t] = feat
    return feats


def _type_counts(
    path: Path,
    arrays: dict[str, np.ndarray],
    node_types: list[str],
    target: str,
    given: dict[Relation, np.ndarray],
    feats: dict[str, np.ndarray],
    label: np.ndarray,
) -> dict[str, tuple[int, str]]:
    """(vertex count, the array it comes from) of each type."""
    counts: dict[str, tuple[int, str]] = {}
    for t in node_types:
        key = COUNT_PREFIX + t
        if key in arrays:
            value = arrays[key]
            if (
                value.size != 1
                or not np.issubdtype(value.dtype, np.integer)
                or int(value.reshape(-1)[0]) < 0
            ):
                raise _hetero_fail(
                    path,
                    f"{key} is {value.tolist()} ({value.dtype}), expected one integer >= 0: "
                    f"the number of {t} vertices",
                )
            counts[t] = (int(value.reshape(-1)[0]), key)
        if t in feats:
            rows = int(feats[t].shape[0])
            if t in counts and counts[t][0] != rows:
                raise _hetero_fail(
                    path,
                    f"{FEAT_PREFIX}{t} has {rows} rows but {key} is {counts[t][0]}; give one "
                    f"feature row per {t} vertex",
                )
            counts.setdefault(t, (rows, FEAT_PREFIX + t))
    if target not in counts:
        counts[target] = (int(label.shape[0]), "label")
    for t in node_types:
        if t in counts:
            continue
        ends = [
            ids[row] for (s, _, d), ids in given.items() for row, u in ((0, s), (1, d)) if u == t
        ]
        top = max((int(e.max()) for e in ends if e.size), default=None)
        if top is None:
            raise _hetero_fail(
                path,
                f"the number of {t} vertices is unknown (no {COUNT_PREFIX}{t}, "
                f"{FEAT_PREFIX}{t} or edges): give {COUNT_PREFIX}{t}",
            )
        counts[t] = (top + 1, f"its largest id in the edges; give {COUNT_PREFIX}{t} if it has more")
    return counts


def _check_label(
    path: Path, label: np.ndarray, target: str, counts: dict[str, tuple[int, str]]
) -> None:
    n, source = counts[target]
    if label.shape[0] != n:
        others = [t for t, (c, _) in counts.items() if t != target and c == label.shape[0]]
        hint = (
            f" ({label.shape[0]} is the number of {' and '.join(others)} vertices: is target right?)"
            if others
            else ""
        )
        raise _hetero_fail(
            path,
            f"label has {label.shape[0]} entries but the target type {target!r} has {n} vertices "
            f"(from {source}): label holds one class per {target} vertex, -1 for "
            f"unlabelled{hint}",
        )
    if label.size and label.min() < -1:
        raise _hetero_fail(
            path, f"label has values below -1 (min {label.min()}); use -1 for unlabelled vertices"
        )
    if not np.any(label >= 0):
        raise _hetero_fail(path, "no vertex has a label (all are -1)")
    if problem := too_many_classes(label, int(label.max()) + 1):
        raise GnnrunError(f"custom dataset {path}: {problem}")


def _check_edge_ids(
    path: Path, given: dict[Relation, np.ndarray], counts: dict[str, tuple[int, str]]
) -> None:
    for (s, r, d), edge_index in given.items():
        for row, (t, end) in enumerate(((s, "source"), (d, "destination"))):
            ids = edge_index[row]
            n, source = counts[t]
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise _hetero_fail(
                    path,
                    f"{EDGE_PREFIX}{s}__{r}__{d} has {end} ids (row {row}) outside [0, {n}) "
                    f"(min {ids.min()}, max {ids.max()}): ids count from 0 within their type, "
                    f"and {t} has {n} vertices (from {source})",
                )


def _reverse_name(relation: str) -> str:
    return relation[len("rev_") :] if relation.startswith("rev_") else f"rev_{relation}"


def _load_heterogeneous(
    cfg: CustomDatasetConfig, path: Path, arrays: dict[str, np.ndarray]
) -> GraphDataset:
    _check_keys(path, arrays)
    given = _relation_arrays(path, arrays)
    target = _target(path, arrays)
    node_types = _node_types(path, arrays, given, target)
    if "label" not in arrays:
        raise _hetero_fail(
            path,
            f"label is missing: give one class per {target} vertex (the target type), "
            "-1 for unlabelled",
        )
    label = _int_array(path, arrays, "label", _hetero_fail)
    if label.ndim != 1:
        raise _hetero_fail(path, f"label has shape {label.shape}, expected one class per {target}")
    feats = _type_features(path, arrays, node_types)
    counts = _type_counts(path, arrays, node_types, target, given, feats, label)
    _check_label(path, label, target, counts)
    _check_edge_ids(path, given, counts)

    relations = sorted(given)
    edges = {relation: (ids[0], ids[1]) for relation, ids in given.items()}
    if cfg.to_undirected:
        for s, r, d in sorted(given):
            reverse = (d, _reverse_name(r), s)
            if reverse not in edges:
                relations.append(reverse)
                edges[reverse] = (edges[(s, r, d)][1], edges[(s, r, d)][0])
    schema = HeteroSchema(
        node_types=node_types,
        type_counts=[counts[t][0] for t in node_types],
        feat_dims=[int(feats[t].shape[1]) if t in feats else 0 for t in node_types],
        relations=relations,
        target=target,
    )
    if problems := schema.problems():  # the checks above should leave none
        raise _hetero_fail(path, "; ".join(problems))
    indptr, indices, edge_type = typed_csr(schema, edges)

    n_target = counts[target][0]
    split = _split_from_file(
        path, arrays, n_target, label, _hetero_fail, ids=f"ids within the target type {target!r}"
    )
    from_file = split is not None
    if split is None:
        fractions = (cfg.split.train, cfg.split.val, cfg.split.test)
        split = stratified_split(label, fractions, cfg.seed)
    offset = int(schema.offsets[schema.target_type])
    n = int(schema.offsets[-1])
    full_label = np.full(n, -1, dtype=np.int64)
    full_label[offset : offset + n_target] = label
    num_classes = int(label.max()) + 1
    return GraphDataset(
        name=cfg.name,
        indptr=indptr,
        indices=indices,
        feat=np.zeros((n, 0), dtype=np.float32),
        label=full_label,
        train_idx=split[0] + offset,
        val_idx=split[1] + offset,
        test_idx=split[2] + offset,
        num_classes=num_classes,
        # Each relation is directed; a reverse is a relation of its own.
        directed=True,
        task=task_for(num_classes),
        info={"source": "custom", "graph_encoding": "heterogeneous", "split_from_file": from_file},
        hetero=schema,
        edge_type=edge_type,
        typed_feat=[
            np.ascontiguousarray(feats[t], dtype=np.float32) if t in feats else None
            for t in node_types
        ],
    )
