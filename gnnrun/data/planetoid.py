"""Cora, CiteSeer and PubMed from the original Planetoid files (Yang et al., 2016).

`raw_dir` holds `ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}` as published
in the `data/` folder of github.com/kimiyoung/planetoid or github.com/tkipf/gcn
(`gcn/data/`). All but `test.index` are Python-2 pickles; they are read with a
restricted unpickler that resolves only the few numpy / scipy.sparse /
collections classes these files name, so a tampered file cannot run code.

Processing follows Kipf & Welling's `load_data` (and PyG's `read_planetoid_data`):

- `allx`/`ally` are the first `len(allx)` vertices; `tx`/`ty` row `k` belongs to
  vertex `test.index[k]`. When the sorted test ids have gaps (CiteSeer: 15
  isolated vertices that appear in the graph but have no features), `tx`/`ty`
  are first extended with zero rows to cover every id in `min..max` of
  `test.index`, so the gap vertices get all-zero features.
- Features are `vstack(allx, tx)` with the test rows moved to their ids, stored
  dense as float32 exactly as in the files (no row normalisation).
- Labels are the argmax of the one-hot rows. A row that is all zero (the gap
  vertices above) has no class: its label is -1. PyG gives such vertices class
  0; gnnrun marks them unlabelled instead.
- Split: train = `range(len(y))`, val = `range(len(y), len(y) + 500)`, test =
  `test.index`. The gap vertices are never in `test.index` and lie after the
  train and val ranges, so no split holds them; should a file ever put an
  unlabelled vertex in a split anyway, it is dropped from that split and the
  count is recorded in `info["dropped_unlabelled"]`.
- Edges come from the adjacency dict in `graph`, symmetrised, with self-loops
  and duplicates dropped.
"""

from __future__ import annotations

import codecs
import collections
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges
from gnnrun.data.registry import RAW_ROOT_HINT, DatasetConfig, register_source
from gnnrun.errors import GnnrunError


@dataclass
class PlanetoidDatasetConfig(DatasetConfig):
    source: str = "planetoid"
    planetoid_name: str = MISSING  # cora | citeseer | pubmed: the ind.<name>.* file prefix
    raw_dir: str = MISSING

    def validate(self) -> None:
        super().validate()
        check(
            self.planetoid_name in ("cora", "citeseer", "pubmed"),
            f"dataset.planetoid_name {self.planetoid_name!r} is not one of cora, citeseer, pubmed",
        )


PICKLED = ("x", "y", "tx", "ty", "allx", "ally", "graph")
FILES = (*PICKLED, "test.index")
SOURCE_HINT = (
    "get them from the data/ folder of https://github.com/kimiyoung/planetoid "
    "(or gcn/data/ of https://github.com/tkipf/gcn)"
)
NUM_VAL = 500


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """`_codecs.encode` as Python 3 uses it for bytes in protocol-2 pickles, latin-1 only."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin-1")


def _allowed_globals() -> dict[tuple[str, str], Any]:
    import scipy.sparse as sp

    try:
        from numpy._core.multiarray import _reconstruct as reconstruct  # numpy >= 2
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct as reconstruct
    return {
        # numpy arrays, as pickled by numpy 1.x (Python 2 files) and numpy 2.x
        ("numpy.core.multiarray", "_reconstruct"): reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        # scipy CSR matrices: old module path in the published files, new one in fresh pickles
        ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
        ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
        # the graph: defaultdict(list)
        ("collections", "defaultdict"): collections.defaultdict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
        # bytes inside protocol-2 pickles written by Python 3
        ("_codecs", "encode"): _latin1_encode,
    }


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals listed in `_allowed_globals`; anything else is refused."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _allowed_globals()
        try:
            return allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: not one of the numpy, scipy.sparse and "
                "defaultdict classes that a Planetoid file needs"
            ) from None


def restricted_load(path: Path) -> Any:
    """Unpickle a Planetoid file with the restricted unpickler (latin-1 for Python-2 strings)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        obj = RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except GnnrunError:
        raise
    except Exception as exc:
        raise GnnrunError(
            f"cannot read {path} as a Planetoid pickle ({exc}); replace it with the original file: "
            + SOURCE_HINT
        ) from None
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject:
        raise GnnrunError(f"{path} holds an object array, not Planetoid data; {SOURCE_HINT}")
    return obj


def _path(raw_dir: Path, name: str, part: str) -> Path:
    return raw_dir / f"ind.{name}.{part}"


def _check_files(raw_dir: Path, name: str) -> None:
    missing = [
        _path(raw_dir, name, part).name
        for part in FILES
        if not _path(raw_dir, name, part).is_file()
    ]
    if missing:
        raise GnnrunError(
            f"Planetoid {name}: missing {', '.join(missing)} in {raw_dir}; place all of "
            f"{', '.join(f'ind.{name}.{p}' for p in FILES)} there ({SOURCE_HINT}), "
            f"or point dataset.raw_dir at the folder that holds them ({RAW_ROOT_HINT})"
        )


def _dense(matrix: Any, what: str, path: Path) -> np.ndarray:
    import scipy.sparse as sp

    if sp.issparse(matrix):
        return np.asarray(matrix.toarray())
    if isinstance(matrix, np.ndarray) and matrix.ndim == 2:
        return matrix
    raise GnnrunError(
        f"{path} should hold a 2-d {what} matrix, found {type(matrix).__name__}; {SOURCE_HINT}"
    )


def _read_test_index(path: Path) -> np.ndarray:
    try:
        values = [int(line) for line in path.read_text().split()]
    except ValueError:
        raise GnnrunError(
            f"{path} must list one integer vertex id per line; {SOURCE_HINT}"
        ) from None
    if not values:
        raise GnnrunError(f"{path} is empty; {SOURCE_HINT}")
    return np.asarray(values, dtype=np.int64)


def _edges_from_adjacency(graph: Any, path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(graph, dict):
        raise GnnrunError(
            f"{path} should hold an adjacency dict, found {type(graph).__name__}; {SOURCE_HINT}"
        )
    src: list[int] = []
    dst: list[int] = []
    for node, neighbours in graph.items():
        src.extend(int(v) for v in neighbours)
        dst.extend([int(node)] * len(neighbours))
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


@register_source(
    "planetoid",
    PlanetoidDatasetConfig,
    inputs=lambda cfg: [_path(Path(cfg.raw_dir), cfg.planetoid_name, part) for part in FILES],
)
def load(cfg: PlanetoidDatasetConfig) -> GraphDataset:
    name, raw_dir = cfg.planetoid_name, Path(cfg.raw_dir)
    _check_files(raw_dir, name)
    objs = {part: restricted_load(_path(raw_dir, name, part)) for part in PICKLED}
    test_index = _read_test_index(_path(raw_dir, name, "test.index"))

    allx = _dense(objs["allx"], "feature", _path(raw_dir, name, "allx"))
    tx = _dense(objs["tx"], "feature", _path(raw_dir, name, "tx"))
    ally = _dense(objs["ally"], "label", _path(raw_dir, name, "ally"))
    ty = _dense(objs["ty"], "label", _path(raw_dir, name, "ty"))
    num_train = int(objs["y"].shape[0])
    if tx.shape[0] != test_index.size or ty.shape[0] != test_index.size:
        raise GnnrunError(
            f"Planetoid {name} in {raw_dir}: tx/ty have {tx.shape[0]}/{ty.shape[0]} rows but "
            f"test.index lists {test_index.size} ids; the files do not belong together or one is "
            f"cut short: replace them with the originals ({SOURCE_HINT})"
        )

    test_sorted = np.sort(test_index)
    lo, hi = int(test_sorted[0]), int(test_sorted[-1])
    if lo != allx.shape[0] or np.any(np.diff(test_sorted) == 0):
        raise GnnrunError(
            f"Planetoid {name} in {raw_dir}: test.index must list distinct ids starting right after "
            f"the {allx.shape[0]} allx rows (found min {lo}); {SOURCE_HINT}"
        )
    # Extend tx/ty with zero rows over the whole id range min..max of test.index
    # (the gaps are CiteSeer's isolated vertices), as in Kipf's load_data.
    span = hi - lo + 1
    tx_full = np.zeros((span, tx.shape[1]), dtype=np.float32)
    tx_full[test_sorted - lo] = tx
    ty_full = np.zeros((span, ty.shape[1]), dtype=ally.dtype)
    ty_full[test_sorted - lo] = ty

    feat = np.vstack([allx.astype(np.float32, copy=False), tx_full])
    feat[test_index] = feat[test_sorted]
    onehot = np.vstack([ally, ty_full])
    onehot[test_index] = onehot[test_sorted]
    num_nodes = feat.shape[0]
    label = np.argmax(onehot, axis=1).astype(np.int64)
    label[~onehot.any(axis=1)] = -1

    src, dst = _edges_from_adjacency(objs["graph"], _path(raw_dir, name, "graph"))
    try:
        indptr, indices = csr_from_edges(src, dst, num_nodes, symmetrize=True)
    except ValueError as exc:
        raise GnnrunError(
            f"Planetoid {name}: {_path(raw_dir, name, 'graph')} does not match the {num_nodes} "
            f"vertices of the feature files ({exc}); {SOURCE_HINT}"
        ) from None

    splits = {
        "train": np.arange(num_train, dtype=np.int64),
        "val": np.arange(num_train, min(num_train + NUM_VAL, num_nodes), dtype=np.int64),
        "test": test_sorted,
    }
    dropped = {}
    for key, idx in splits.items():
        keep = label[idx] >= 0
        dropped[key] = int(idx.size - keep.sum())
        splits[key] = idx[keep]
    return GraphDataset(
        name=cfg.name,
        indptr=indptr,
        indices=indices,
        feat=feat,
        label=label,
        train_idx=splits["train"],
        val_idx=splits["val"],
        test_idx=splits["test"],
        num_classes=int(onehot.shape[1]),
        directed=False,
        task="multiclass",
        info={
            "source": "planetoid",
            "planetoid_name": name,
            "unlabelled_nodes": int(np.count_nonzero(label < 0)),
            "dropped_unlabelled": dropped,
        },
    )
