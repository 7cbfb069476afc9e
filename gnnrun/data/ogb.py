"""OGB node-property datasets (`ogbn-*`) from a local copy, never downloaded.

The dataset lives in `dataset.root/<ogb_name with - replaced by _>/` in the
layout of the official archive (the URL is in ogb's `nodeproppred/master.csv`):

- `raw/edge.csv.gz`, `raw/num-node-list.csv.gz`, `raw/num-edge-list.csv.gz`,
  `raw/node-feat.csv.gz`, `raw/node-label.csv.gz` (csv datasets: arxiv, products);
- `raw/data.npz`, `raw/node-label.npz` (binary datasets: papers100M);
- `split/<split>/{train,valid,test}.csv.gz` with `<split>` from master.csv
  (`time` for arxiv and papers100M, `sales_ranking` for products);
- heterogeneous csv datasets (ogbn-mag): `raw/num-node-dict.csv.gz`,
  `raw/triplet-type-list.csv.gz`, `raw/relations/<head>___<relation>___<tail>/`
  `{edge.csv.gz, num-edge-list.csv.gz}` for each relation, and the target
  type's `raw/node-feat/<target>/node-feat.csv.gz`,
  `raw/node-label/<target>/node-label.csv.gz` and
  `split/<split>/<target>/{train,valid,test}.csv.gz`.

The metadata (number of tasks and classes, binary or csv, heterogeneous or not,
whether the raw edges are undirected) comes from ogb's own master table; the
files are read with ogb's raw readers (`ogb.io.read_graph_raw`) and pandas.
`NodePropPredDataset` is not used: it may prompt through `input()` or download
when files are missing, and it caches to `processed/` with `torch.load`, which
fails on torch >= 2.6. gnnrun never reads or writes `processed/`. ogb's import
also starts a background PyPI version check; it is suppressed here.

Labels are int64 with NaN (papers100M's unlabelled vertices) mapped to -1.
Multi-label datasets (ogbn-proteins: 112 binary labels per vertex, for
`task=multilabel`) keep their N x C label matrix. ogbn-proteins has no vertex
features, only 8 per edge (`raw/edge-feat.csv.gz` instead of
`raw/node-feat.csv.gz`): a vertex's features are the mean of its edges'
(as the usual ogbn-proteins baselines aggregate them); its split is by species
(`split/species/`).
Datasets whose raw edges list each undirected edge once (products) are always
stored symmetrised; directed ones (arxiv, papers100M) are symmetrised when
`dataset.to_undirected`, else stored directed (`directed=True`).

ogbn-mag becomes gnnrun's heterogeneous format (gnnrun.data.hetero). Its
layout is fixed in `HETERO_LAYOUTS` (so the files to expect are known before
reading): the vertex types in the order `paper, author, institution,
field_of_study` (the labelled target first, so papers keep their ids), and its
four relations `author -writes-> paper`, `paper -cites-> paper`,
`paper -has_topic-> field_of_study`, `author -affiliated_with-> institution`,
each followed, after the four, by its reverse `rev_<relation>` so that
messages flow both ways (as DGL's MAG examples do). Only papers have features
(128 wide); the other types are featureless and get a learnable embedding.
Labels are on papers (-1 elsewhere) and the split lists papers. The reverse
relations give every edge both directions, so the dataset is stored directed
(`directed=True`) and `dataset.to_undirected` does not apply. The year files
(`node_year`) and `edge_reltype` are not read.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges, sorted_unique
from gnnrun.data.hetero import HeteroSchema, Relation, reverse
from gnnrun.data.registry import DatasetConfig, register_source
from gnnrun.errors import GnnrunError


@dataclass
class OgbDatasetConfig(DatasetConfig):
    source: str = "ogb"
    ogb_name: str = MISSING  # e.g. ogbn-arxiv
    root: str = "${paths.raw_root}/ogb"  # holds <ogb_name with _ for ->/raw, split/...
    # Add reverse edges to directed graphs (arxiv, papers100M); heterogeneous ones
    # (ogbn-mag) always have a reverse relation for each relation instead.
    to_undirected: bool = True

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
T = TypeVar("T")


@dataclass(frozen=True)
class HeteroLayout:
    """A heterogeneous OGB dataset's types, as gnnrun orders them."""

    target: str  # the labelled type, the only one with features
    node_types: tuple[str, ...]  # the target first
    relations: tuple[Relation, ...]  # as the archive names them; their reverses follow


HETERO_LAYOUTS = {
    "ogbn-mag": HeteroLayout(
        target="paper",
        node_types=("paper", "author", "institution", "field_of_study"),
        relations=(
            ("author", "writes", "paper"),
            ("paper", "cites", "paper"),
            ("paper", "has_topic", "field_of_study"),
            ("author", "affiliated_with", "institution"),
        ),
    )
}


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


def _is_hetero(meta: pd.Series) -> bool:
    return meta["is hetero"] == "True"


def _relation_dir(relation: Relation) -> str:
    return "raw/relations/" + "___".join(relation)


def _feat_file(node_type: str) -> str:
    return f"raw/node-feat/{node_type}/node-feat.csv.gz"


def _label_file(node_type: str) -> str:
    return f"raw/node-label/{node_type}/node-label.csv.gz"


def _hetero_raw(layout: HeteroLayout) -> list[str]:
    relation_files = [
        f"{_relation_dir(relation)}/{f}"
        for relation in layout.relations
        for f in ("edge.csv.gz", "num-edge-list.csv.gz")
    ]
    return [
        "raw/num-node-dict.csv.gz",
        "raw/triplet-type-list.csv.gz",
        *relation_files,
        _feat_file(layout.target),
        _label_file(layout.target),
    ]


def _split_dir(meta: pd.Series) -> str:
    """The split folder, relative to the dataset directory (per target type if hetero)."""
    split = f"split/{meta['split']}"
    return f"{split}/{HETERO_LAYOUTS[meta.name].target}" if _is_hetero(meta) else split


def required_files(meta: pd.Series) -> list[str]:
    """Paths, relative to the dataset directory, that must exist. `meta` is the
    dataset's column of the master table (its name is the dataset's)."""
    if _is_hetero(meta):
        raw = _hetero_raw(HETERO_LAYOUTS[meta.name])
    elif meta["binary"] == "True":
        raw = [f"raw/{f}" for f in BINARY_RAW]
    else:
        # Without vertex features (ogbn-proteins) the edges' features stand in for them.
        feat = "node-feat.csv.gz" if _has_vertex_features(meta) else "edge-feat.csv.gz"
        raw = [f"raw/{f}" for f in CSV_RAW if f != "node-feat.csv.gz"] + [f"raw/{feat}"]
    return raw + [f"{_split_dir(meta)}/{p}.csv.gz" for p in SPLIT_PARTS]


def input_files(cfg: OgbDatasetConfig) -> list[Path]:
    """The raw and split files `load` reads for this config."""
    meta = dataset_meta(cfg.ogb_name)
    _check_supported(cfg.ogb_name, meta)
    directory = Path(cfg.root) / cfg.ogb_name.replace("-", "_")
    return [directory / rel for rel in required_files(meta)]


def _check_supported(name: str, meta: pd.Series) -> None:
    if _is_hetero(meta) and name not in HETERO_LAYOUTS:
        raise GnnrunError(
            f"{name} is a heterogeneous graph (several vertex and edge types) whose layout "
            f"gnnrun does not know; the heterogeneous OGB datasets it reads are "
            f"{', '.join(HETERO_LAYOUTS)}"
        )
    if not (_is_multilabel(meta) or _is_multiclass(meta)):
        raise GnnrunError(
            f"{name} is a {meta['task type']} dataset with {meta['num tasks']} tasks per vertex; "
            "gnnrun reads single-label multiclass datasets (ogbn-arxiv, ogbn-products, "
            "ogbn-papers100M, ogbn-mag) and multi-label binary ones (ogbn-proteins)"
        )


def _is_multiclass(meta: pd.Series) -> bool:
    return int(meta["num tasks"]) == 1 and meta["task type"] == "multiclass classification"


def _is_multilabel(meta: pd.Series) -> bool:
    """Several binary labels per vertex (ogbn-proteins), for task=multilabel."""
    return int(meta["num tasks"]) > 1 and meta["task type"] == "binary classification"


def _has_vertex_features(meta: pd.Series) -> bool:
    return str(meta.get("has_node_attr", "True")) == "True"


def _check_files(cfg: OgbDatasetConfig, meta: pd.Series, directory: Path) -> None:
    needed = required_files(meta)
    missing = [rel for rel in needed if not (directory / rel).is_file()]
    if not missing:
        return
    # One line, as every error: a SLURM task's is quoted from its log by its first line.
    where = ", ".join(str(directory / rel) for rel in missing)
    unpacked = Path(cfg.root) / str(meta["download_name"])
    if unpacked.is_dir() and unpacked != directory:
        where += f" ({unpacked} exists: rename it to {directory})"
    layout = ", ".join(needed)
    raise GnnrunError(
        f"{cfg.ogb_name}: {len(missing)} of the dataset's files are missing: {where}. "
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


def _label_matrix(raw: np.ndarray, num_nodes: int, num_labels: int, where: Path) -> np.ndarray:
    """A multi-label dataset's N x C labels: 0 / 1, NaN (unknown) as -1."""
    raw = np.asarray(raw)
    if raw.shape != (num_nodes, num_labels):
        raise GnnrunError(
            f"{where} has labels of shape {raw.shape}, expected ({num_nodes}, {num_labels})"
        )
    unknown = np.isnan(raw) if np.issubdtype(raw.dtype, np.floating) else np.zeros(raw.shape, bool)
    label = np.where(unknown, -1, np.nan_to_num(raw)).astype(np.int64)
    if label.size and (label.min() < -1 or label.max() > 1):
        raise GnnrunError(
            f"{where} has labels outside 0 / 1 (min {label.min()}, max {label.max()}); "
            "the file is damaged: unzip the official archive again"
        )
    return label


def _mean_edge_features(graph: dict[str, Any], num_nodes: int, directory: Path) -> np.ndarray:
    """Each vertex's features: the mean of the features of its edges (both ends of each)."""
    edge_feat = graph.get("edge_feat")
    if edge_feat is None:
        raise GnnrunError(
            f"{directory / 'raw'} has neither vertex nor edge features; unzip the official "
            "archive again"
        )
    edge_feat = np.asarray(edge_feat, dtype=np.float64)
    edge_index = np.asarray(graph["edge_index"])
    if edge_feat.shape[0] != edge_index.shape[1]:
        raise GnnrunError(
            f"{directory / 'raw'}: {edge_feat.shape[0]} edge feature rows for "
            f"{edge_index.shape[1]} edges; unzip the official archive again"
        )
    total = np.zeros((num_nodes, edge_feat.shape[1]))
    count = np.zeros(num_nodes)
    for end in edge_index:
        np.add.at(total, end, edge_feat)
        np.add.at(count, end, 1)
    return (total / np.maximum(count, 1)[:, None]).astype(np.float32)


# What reading a cut or damaged raw file raises (pandas' ParserError is a ValueError,
# gzip's BadGzipFile an OSError; ogb's readers assert that the files agree).
READ_ERRORS = (
    AssertionError,
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


@contextlib.contextmanager
def _quietly() -> Iterator[None]:
    """Swallow what ogb's readers print and their tqdm bars."""
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        yield


def _read_labels_csv(path: Path) -> np.ndarray:
    import pandas as pd

    return pd.read_csv(path, compression="gzip", header=None).to_numpy()


def _one_graph(graphs: list[dict[str, Any]], raw_dir: Path) -> dict[str, Any]:
    if len(graphs) != 1:
        raise GnnrunError(
            f"{raw_dir} describes {len(graphs)} graphs; a node-property dataset has one"
        )
    return graphs[0]


def _read(directory: Path, meta: pd.Series) -> tuple[dict[str, Any], np.ndarray]:
    reader = _read_graph_raw()
    raw_dir = directory / "raw"
    with _quietly():
        if meta["binary"] == "True":
            graphs = reader.read_binary_graph_raw(str(raw_dir), add_inverse_edge=False)
            with np.load(raw_dir / "node-label.npz", allow_pickle=False) as npz:
                labels = npz["node_label"]
        else:
            graphs = reader.read_csv_graph_raw(str(raw_dir), add_inverse_edge=False)
            labels = _read_labels_csv(raw_dir / "node-label.csv.gz")
    return _one_graph(graphs, raw_dir), labels


def _read_hetero(directory: Path, layout: HeteroLayout) -> tuple[dict[str, Any], np.ndarray]:
    reader = _read_graph_raw()
    raw_dir = directory / "raw"
    with _quietly():
        graphs = reader.read_csv_heterograph_raw(str(raw_dir), add_inverse_edge=False)
        labels = _read_labels_csv(directory / _label_file(layout.target))
    return _one_graph(graphs, raw_dir), labels


def _read_or_explain(read: Callable[[], T], directory: Path, meta: pd.Series) -> T:
    """Run `read`; a read error names the first cut or damaged file, else the directory."""
    try:
        return read()
    except GnnrunError:
        raise
    except READ_ERRORS as exc:
        damaged = _first_damaged([directory / rel for rel in required_files(meta)])
        if damaged is not None:
            raise _damaged(*damaged, meta["url"]) from None
        raise GnnrunError(
            f"cannot read {meta.name} from {directory} ({type(exc).__name__}: {exc}); the files "
            f"look damaged: unzip the official archive {meta['url']} again"
        ) from None


def _read_splits(directory: Path, meta: pd.Series, num_nodes: int) -> list[np.ndarray]:
    split_dir = directory / _split_dir(meta)
    return [_read_split(split_dir / f"{p}.csv.gz", num_nodes, meta["url"]) for p in SPLIT_PARTS]


@register_source("ogb", OgbDatasetConfig, inputs=lambda cfg: input_files(cfg))
def load(cfg: OgbDatasetConfig) -> GraphDataset:
    name = cfg.ogb_name
    meta = dataset_meta(name)
    _check_supported(name, meta)
    directory = Path(cfg.root) / name.replace("-", "_")
    _check_files(cfg, meta, directory)
    if _is_hetero(meta):
        return _load_hetero(cfg, meta, directory)
    return _load_homogeneous(cfg, meta, directory)


def _load_homogeneous(cfg: OgbDatasetConfig, meta: pd.Series, directory: Path) -> GraphDataset:
    name = cfg.ogb_name
    graph, raw_labels = _read_or_explain(lambda: _read(directory, meta), directory, meta)
    num_nodes = int(graph["num_nodes"])
    multilabel = _is_multilabel(meta)
    num_classes = int(meta["num tasks"]) if multilabel else int(meta["num classes"])
    if _has_vertex_features(meta):
        if graph.get("node_feat") is None:
            raise GnnrunError(
                f"{directory / 'raw'} has no vertex features; unzip the official archive again"
            )
        feat = np.ascontiguousarray(graph["node_feat"], dtype=np.float32)
    else:
        feat = _mean_edge_features(graph, num_nodes, directory)
    if feat.shape[0] != num_nodes:
        raise GnnrunError(f"{directory}: {feat.shape[0]} feature rows for {num_nodes} vertices")
    label_file = (
        directory / "raw" / ("node-label.npz" if meta["binary"] == "True" else "node-label.csv.gz")
    )
    if multilabel:
        label = _label_matrix(raw_labels, num_nodes, num_classes, label_file)
    else:
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

    train_idx, val_idx, test_idx = _read_splits(directory, meta, num_nodes)
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
        task="multilabel" if multilabel else "multiclass",
        info={
            "source": "ogb",
            "ogb_name": name,
            "split": meta["split"],
            "raw_edges": int(edge_index.shape[1]),
            "unlabelled_nodes": int(
                np.count_nonzero((label < 0).all(axis=1) if multilabel else label < 0)
            ),
        },
    )


def _load_hetero(cfg: OgbDatasetConfig, meta: pd.Series, directory: Path) -> GraphDataset:
    layout = HETERO_LAYOUTS[cfg.ogb_name]
    graph, raw_labels = _read_or_explain(lambda: _read_hetero(directory, layout), directory, meta)
    _check_types(graph, layout, directory)
    feat = _target_features(graph, layout, directory)
    schema = HeteroSchema(
        node_types=list(layout.node_types),
        type_counts=[int(graph["num_nodes_dict"][t]) for t in layout.node_types],
        feat_dims=[int(feat.shape[1]) if t == layout.target else 0 for t in layout.node_types],
        relations=list(layout.relations) + [reverse(r) for r in layout.relations],
        target=layout.target,
    )
    edges = _hetero_edges(graph, layout, schema, directory)
    targets = schema.type_counts[schema.target_type]
    label = _target_labels(raw_labels, schema, int(meta["num classes"]), directory)
    info = {
        "source": "ogb",
        "ogb_name": cfg.ogb_name,
        "split": meta["split"],
        "raw_edges": sum(int(graph["edge_index_dict"][r].shape[1]) for r in layout.relations),
        "unlabelled_nodes": int(schema.offsets[-1]) - int(np.count_nonzero(label >= 0)),
    }
    splits = tuple(_read_splits(directory, meta, targets))
    return GraphDataset.heterogeneous(
        cfg.name, schema, edges, {layout.target: feat}, label, splits,
        int(meta["num classes"]), info,
    )  # fmt: skip


def _check_types(graph: dict[str, Any], layout: HeteroLayout, directory: Path) -> None:
    """The raw files list the layout's vertex types and relations."""
    types = set(graph["num_nodes_dict"])
    if types != set(layout.node_types):
        raise GnnrunError(
            f"{directory / 'raw' / 'num-node-dict.csv.gz'} lists the vertex types "
            f"{', '.join(sorted(types))}, not {', '.join(sorted(layout.node_types))}; "
            "unzip the official archive again"
        )
    relations = set(graph["edge_index_dict"])
    if relations != set(layout.relations):
        raise GnnrunError(
            f"{directory / 'raw' / 'triplet-type-list.csv.gz'} lists the relations "
            f"{sorted(relations)}, not {sorted(layout.relations)}; "
            "unzip the official archive again"
        )


def _target_features(graph: dict[str, Any], layout: HeteroLayout, directory: Path) -> np.ndarray:
    path = directory / _feat_file(layout.target)
    feat = (graph.get("node_feat_dict") or {}).get(layout.target)
    count = int(graph["num_nodes_dict"][layout.target])
    if feat is None or feat.ndim != 2 or feat.shape[0] != count:
        shape = None if feat is None else feat.shape
        raise GnnrunError(
            f"{path} has features of shape {shape}, expected ({count}, dim); "
            "unzip the official archive again"
        )
    return np.ascontiguousarray(feat, dtype=np.float32)


def _target_labels(
    raw: np.ndarray, schema: HeteroSchema, num_classes: int, directory: Path
) -> np.ndarray:
    """The target type's labels (-1: unlabelled), checked."""
    path = directory / _label_file(schema.target)
    return _labels(raw, schema.type_counts[schema.target_type], num_classes, path)


def _hetero_edges(
    graph: dict[str, Any], layout: HeteroLayout, schema: HeteroSchema, directory: Path
) -> dict[Relation, tuple[np.ndarray, np.ndarray]]:
    """(source, destination) ids within their types of each relation and of its reverse."""
    edges = {}
    for relation in layout.relations:
        src, dst = _relation_edges(graph["edge_index_dict"][relation], relation, schema, directory)
        edges[relation] = (src, dst)
        edges[reverse(relation)] = (dst, src)
    return edges


def _relation_edges(
    edge_index: np.ndarray, relation: Relation, schema: HeteroSchema, directory: Path
) -> tuple[np.ndarray, np.ndarray]:
    """A relation's raw edges, checked to join ids of its types."""
    path = directory / _relation_dir(relation) / "edge.csv.gz"
    edge_index = np.asarray(edge_index)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise GnnrunError(
            f"{path} has edges of shape {edge_index.shape[::-1]}, expected (E, 2); "
            "unzip the official archive again"
        )
    for ids, node_type in ((edge_index[0], relation[0]), (edge_index[1], relation[2])):
        count = schema.type_counts[schema.type_index(node_type)]
        if ids.size and (ids.min() < 0 or ids.max() >= count):
            raise GnnrunError(
                f"{path} has {node_type} ids outside [0, {count}); unzip the official archive again"
            )
    return edge_index[0].astype(np.int64), edge_index[1].astype(np.int64)
