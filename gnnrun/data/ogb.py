"""OGB node-property datasets (`ogbn-*`) from a local copy, never downloaded.

The dataset lives in `dataset.root/<ogb_name with - replaced by _>/` in the
layout of the official archive (the URL is in ogb's `nodeproppred/master.csv`):

- `raw/edge.csv.gz`, `raw/num-node-list.csv.gz`, `raw/num-edge-list.csv.gz`,
  `raw/node-feat.csv.gz`, `raw/node-label.csv.gz` (csv datasets: arxiv, products);
- `raw/data.npz`, `raw/node-label.npz` (binary datasets: papers100M);
- `split/<split>/{train,valid,test}.csv.gz` with `<split>` from master.csv
  (`time` for arxiv and papers100M, `sales_ranking` for products).

The metadata (number of tasks and classes, binary or csv, heterogeneous or not,
whether the raw edges are undirected) comes from ogb's own master table; the
files are read with ogb's raw readers (`ogb.io.read_graph_raw`) and pandas.
`NodePropPredDataset` is not used: it may prompt through `input()` or download
when files are missing, and it caches to `processed/` with `torch.load`, which
fails on torch >= 2.6. gnnrun never reads or writes `processed/`. ogb's import
also starts a background PyPI version check; it is suppressed here.

Heterogeneous (ogbn-mag) and multi-label (ogbn-proteins) datasets are refused.
Labels are int64 with NaN (papers100M's unlabelled vertices) mapped to -1.
Datasets whose raw edges list each undirected edge once (products) are always
stored symmetrised; directed ones (arxiv, papers100M) are symmetrised when
`dataset.to_undirected`, else stored directed (`directed=True`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges, sorted_unique
from gnnrun.data.registry import DatasetConfig, register_source
from gnnrun.errors import GnnrunError


@dataclass
class OgbDatasetConfig(DatasetConfig):
    source: str = "ogb"
    ogb_name: str = MISSING  # e.g. ogbn-arxiv
    root: str = "${paths.raw_root}/ogb"  # holds <ogb_name with _ for ->/raw, split/...
    to_undirected: bool = True  # add reverse edges to directed graphs (arxiv, papers100M)

    def validate(self) -> None:
        super().validate()
        check(
            self.ogb_name.startswith("ogbn-"),
            f"dataset.ogb_name {self.ogb_name!r} is not an ogbn-* name",
        )


if TYPE_CHECKING:
    import pandas as pd

CSV_RAW = (
    "edge.csv.gz",
    "num-node-list.csv.gz",
    "num-edge-list.csv.gz",
    "node-feat.csv.gz",
    "node-label.csv.gz",
)
BINARY_RAW = ("data.npz", "node-label.npz")
SPLIT_PARTS = ("train", "valid", "test")


def _ogb_dir() -> Path:
    spec = importlib.util.find_spec("ogb")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise GnnrunError("the ogb package is not installed; install it with `pip install ogb`")
    return Path(next(iter(spec.submodule_search_locations)))


def master_table() -> pd.DataFrame:
    """ogb's table of node-property datasets: one column per dataset name."""
    import pandas as pd

    return pd.read_csv(
        _ogb_dir() / "nodeproppred" / "master.csv", index_col=0, keep_default_na=False
    )


def dataset_meta(name: str) -> pd.Series:
    master = master_table()
    if name not in master.columns:
        raise GnnrunError(
            f"{name} is not an OGB node-property dataset known to ogb; choose one of "
            f"{', '.join(master.columns)}"
        )
    return master[name]


def _read_graph_raw() -> Any:
    """Import ogb's raw readers without the PyPI version check that `import ogb` starts."""
    if "ogb" not in sys.modules:
        missing = object()
        saved = sys.modules.get("outdated", missing)
        sys.modules["outdated"] = None  # type: ignore[assignment]  # ogb.version then skips the check
        try:
            import ogb.io.read_graph_raw  # noqa: F401
        finally:
            if saved is missing:
                del sys.modules["outdated"]
            else:
                sys.modules["outdated"] = saved  # type: ignore[assignment]
    from ogb.io import read_graph_raw

    return read_graph_raw


def required_files(meta: pd.Series) -> list[str]:
    """Paths, relative to the dataset directory, that must exist."""
    raw = BINARY_RAW if meta["binary"] == "True" else CSV_RAW
    split = meta["split"]
    return [f"raw/{f}" for f in raw] + [f"split/{split}/{p}.csv.gz" for p in SPLIT_PARTS]


def input_files(cfg: OgbDatasetConfig) -> list[Path]:
    """The raw and split files `load` reads for this config."""
    directory = Path(cfg.root) / cfg.ogb_name.replace("-", "_")
    return [directory / rel for rel in required_files(dataset_meta(cfg.ogb_name))]


def _check_supported(name: str, meta: pd.Series) -> None:
    if meta["is hetero"] == "True":
        raise GnnrunError(
            f"{name} is a heterogeneous graph (several vertex and edge types); gnnrun does not "
            "support heterogeneous OGB datasets yet: choose a homogeneous one such as ogbn-arxiv, "
            "ogbn-products or ogbn-papers100M"
        )
    if int(meta["num tasks"]) != 1 or meta["task type"] != "multiclass classification":
        raise GnnrunError(
            f"{name} is a {meta['task type']} dataset with {meta['num tasks']} tasks per vertex "
            "(multi-label); gnnrun supports single-label multiclass datasets only, not multi-label "
            "ones yet: choose ogbn-arxiv, ogbn-products or ogbn-papers100M"
        )


def _check_files(cfg: OgbDatasetConfig, meta: pd.Series, directory: Path) -> None:
    needed = required_files(meta)
    missing = [rel for rel in needed if not (directory / rel).is_file()]
    if not missing:
        return
    where = "\n".join(f"  {directory / rel}" for rel in missing)
    unpacked = Path(cfg.root) / str(meta["download_name"])
    if unpacked.is_dir() and unpacked != directory:
        where += f"\n({unpacked} exists: rename it to {directory})"
    layout = ", ".join(needed)
    raise GnnrunError(
        f"{cfg.ogb_name}: {len(missing)} of the dataset's files are missing:\n{where}\n"
        f"{directory} must hold {layout}. Download the official archive {meta['url']} and "
        f"unzip it into {cfg.root} (it unpacks to {meta['download_name']}/; rename that folder "
        f"to {directory.name}), or set dataset.root to the folder that holds {directory.name}/. "
        "gnnrun never downloads OGB data itself."
    )


def _labels(raw: np.ndarray, num_nodes: int, num_classes: int, where: Path) -> np.ndarray:
    raw = np.asarray(raw)
    if raw.ndim == 2 and raw.shape[1] == 1:
        raw = raw[:, 0]
    if raw.shape != (num_nodes,):
        raise GnnrunError(f"{where} has labels of shape {raw.shape}, expected ({num_nodes}, 1)")
    if np.issubdtype(raw.dtype, np.floating):
        unlabelled = np.isnan(raw)
        label = np.where(unlabelled, -1, raw).astype(np.int64)
    else:
        label = raw.astype(np.int64)
    if label.size and (label.min() < -1 or label.max() >= num_classes):
        raise GnnrunError(
            f"{where} has labels outside [0, {num_classes}) (min {label.min()}, max {label.max()}); "
            "the file is damaged: unzip the official archive again"
        )
    return label


# What reading a cut or damaged raw file raises (pandas' ParserError is a ValueError,
# gzip's BadGzipFile an OSError).
READ_ERRORS = (
    OSError,
    ValueError,
    KeyError,
    RuntimeError,
    EOFError,
    zlib.error,
    zipfile.BadZipFile,
)


def _damaged(path: Path, exc: BaseException, url: str) -> GnnrunError:
    return GnnrunError(
        f"cannot read {path} ({type(exc).__name__}: {exc}): the file looks cut short or "
        f"damaged; unzip the official archive {url} again"
    )


def _first_damaged(paths: list[Path]) -> tuple[Path, BaseException] | None:
    """The first of `paths` whose compressed stream is cut or corrupt, and what reading it
    raised. Only run after a read failed: it decompresses each file once."""
    import gzip

    for path in paths:
        try:
            if path.name.endswith(".gz"):
                with gzip.open(path, "rb") as f:
                    while f.read(1 << 24):
                        pass
            elif path.suffix == ".npz":
                with zipfile.ZipFile(path) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    raise zipfile.BadZipFile(f"bad CRC-32 for {bad}")
        except READ_ERRORS as exc:
            return path, exc
    return None


def _read_split(path: Path, num_nodes: int, url: str) -> np.ndarray:
    import pandas as pd

    try:
        values = pd.read_csv(path, compression="gzip", header=None).to_numpy()
    except READ_ERRORS as exc:
        raise _damaged(path, exc, url) from None
    idx = values.reshape(-1).astype(np.int64) if values.size else np.zeros(0, np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= num_nodes):
        raise GnnrunError(
            f"{path} has vertex ids outside [0, {num_nodes}); unzip the official archive again"
        )
    return sorted_unique(idx)


def _read(directory: Path, meta: pd.Series) -> tuple[dict[str, Any], np.ndarray]:
    import pandas as pd

    reader = _read_graph_raw()
    raw_dir = directory / "raw"
    quiet = io.StringIO()  # the readers print and draw tqdm bars
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        if meta["binary"] == "True":
            graphs = reader.read_binary_graph_raw(str(raw_dir), add_inverse_edge=False)
            with np.load(raw_dir / "node-label.npz", allow_pickle=False) as npz:
                labels = npz["node_label"]
        else:
            graphs = reader.read_csv_graph_raw(str(raw_dir), add_inverse_edge=False)
            labels = pd.read_csv(
                raw_dir / "node-label.csv.gz", compression="gzip", header=None
            ).to_numpy()
    if len(graphs) != 1:
        raise GnnrunError(
            f"{raw_dir} describes {len(graphs)} graphs; a node-property dataset has one"
        )
    return graphs[0], labels


@register_source("ogb", OgbDatasetConfig, inputs=lambda cfg: input_files(cfg))
def load(cfg: OgbDatasetConfig) -> GraphDataset:
    name = cfg.ogb_name
    meta = dataset_meta(name)
    _check_supported(name, meta)
    directory = Path(cfg.root) / name.replace("-", "_")
    _check_files(cfg, meta, directory)

    try:
        graph, raw_labels = _read(directory, meta)
    except GnnrunError:
        raise
    except READ_ERRORS as exc:
        damaged = _first_damaged([directory / rel for rel in required_files(meta)])
        if damaged is not None:
            raise _damaged(*damaged, meta["url"]) from None
        raise GnnrunError(
            f"cannot read {name} from {directory} ({type(exc).__name__}: {exc}); the files look "
            f"damaged: unzip the official archive {meta['url']} again"
        ) from None

    num_nodes = int(graph["num_nodes"])
    num_classes = int(meta["num classes"])
    if graph.get("node_feat") is None:
        raise GnnrunError(
            f"{directory / 'raw'} has no vertex features; unzip the official archive again"
        )
    feat = np.ascontiguousarray(graph["node_feat"], dtype=np.float32)
    if feat.shape[0] != num_nodes:
        raise GnnrunError(f"{directory}: {feat.shape[0]} feature rows for {num_nodes} vertices")
    label_file = (
        directory / "raw" / ("node-label.npz" if meta["binary"] == "True" else "node-label.csv.gz")
    )
    label = _labels(raw_labels, num_nodes, num_classes, label_file)

    undirected_raw = meta["add_inverse_edge"] == "True"  # raw lists each undirected edge once
    symmetrize = undirected_raw or cfg.to_undirected
    edge_index = np.asarray(graph["edge_index"])
    try:
        indptr, indices = csr_from_edges(
            edge_index[0], edge_index[1], num_nodes, symmetrize=symmetrize
        )
    except ValueError as exc:
        raise GnnrunError(f"{directory / 'raw'}: {exc}; unzip the official archive again") from None

    split_dir = directory / "split" / meta["split"]
    train_idx, val_idx, test_idx = (
        _read_split(split_dir / f"{p}.csv.gz", num_nodes, meta["url"]) for p in SPLIT_PARTS
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
        directed=not symmetrize,
        task="multiclass",
        info={
            "source": "ogb",
            "ogb_name": name,
            "split": meta["split"],
            "raw_edges": int(edge_index.shape[1]),
            "unlabelled_nodes": int(np.count_nonzero(label < 0)),
        },
    )
