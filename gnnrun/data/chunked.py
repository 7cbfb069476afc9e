"""The chunked input format: a graph no single host needs to hold, as many files and a small
`metadata.json` naming them (`dataset.source=chunked`, `dataset.path` = the metadata file).

    metadata.json
    {
      "format": "gnnrun-chunked", "format_version": 1,
      "name": "mygraph",
      "num_nodes": N, "num_classes": C, "feat_dim": F,
      "undirected": true,            # store every edge in both directions when read
      "edges": [{"src": "edges/src-00000.npy", "dst": "edges/dst-00000.npy"},
                {"parquet": "edges/part-00001.parquet"}, ...],
      "feat":  [{"file": "feat/feat-00000.npy", "rows": [0, 65536]}, ...],
      "label": [{"file": "label/label-00000.npy", "rows": [0, 65536]}, ...],
      "train_idx": ["splits/train-00000.npy", ...], "val_idx": [...], "test_idx": [...],
      "sha256": {"edges/src-00000.npy": "…", ...}   # optional, per file
    }

Paths are relative to the metadata file's folder. Edge files come in any count and size:
a pair of 1-d integer `.npy` files of equal length (sources, destinations), or a Parquet
file with integer columns `src` and `dst` (with pyarrow, `pip install gnnrun[parquet]`).
Self-loops and duplicate edges are dropped, as for every source. `feat` (float rows, F
columns) and `label` (int, -1 = unlabelled, classes 0..C-1) are lists of `.npy` files
each holding the rows `[lo, hi)`, which together cover [0, N) in order. The split lists
hold `.npy` files of vertex ids; all three are required. `sha256` records the files'
checksums (`gnnrun data chunk` writes them); a file without one is hashed when the
dataset's checksum is computed.

The dataset's checksum is derived from the files' checksums and the dataset config, not
from the prepared arrays: a partition made on the ranks straight from the chunks
(gnnrun.partition.distributed) and the prepared copy (`gnnrun data prepare`, one
process) carry the same checksum, so training takes either.

`write_chunks` writes the format from any in-memory dataset (`gnnrun data chunk`), and a
source that registers a streaming writer (`streams_chunks`; synthetic does) writes it
piece by piece without holding the graph.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset, task_for
from gnnrun.data.graph import csr_from_edges
from gnnrun.data.registry import DatasetConfig, register_source
from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_directory, sha256_file, write_json
from gnnrun.resources import install_command

FORMAT = "gnnrun-chunked"
FORMAT_VERSION = 1
METADATA = "metadata.json"
SPLITS = ("train_idx", "val_idx", "test_idx")
FIX = (
    "docs/large-graphs.md describes the format; `gnnrun data chunk dataset=... "
    "--output DIR` writes it"
)
# Default sizes of the files `write_chunks` makes.
EDGES_PER_FILE = 1 << 22
ROWS_PER_FILE = 1 << 16


@dataclass
class ChunkedDatasetConfig(DatasetConfig):
    source: str = "chunked"
    path: str = MISSING  # the metadata.json of a chunked graph (docs/large-graphs.md)
    # Peak resident memory each rank may use preparing it on the ranks
    # (gnnrun.data.prepare_ranks), in GiB; null: no limit. Not part of the content.
    memory_gb: float | None = None

    def validate(self) -> None:
        super().validate()
        check(
            self.memory_gb is None or self.memory_gb > 0,
            "dataset.memory_gb must be positive (GiB per rank), or null for no limit",
        )


@dataclass(frozen=True)
class EdgeFile:
    """One edge file: a .npy pair (`src`, `dst`) or a Parquet file (`parquet`); `count` edges."""

    count: int
    src: Path | None = None
    dst: Path | None = None
    parquet: Path | None = None

    def paths(self) -> list[Path]:
        return [p for p in (self.src, self.dst, self.parquet) if p is not None]

    def read(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Edges [lo, hi) of this file, as int64 sources and destinations."""
        if self.parquet is None:
            src = np.load(self.src, mmap_mode="r")[lo:hi]
            dst = np.load(self.dst, mmap_mode="r")[lo:hi]
            return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        import pyarrow.parquet as pq

        # Only the row groups that hold [lo, hi): a round reads its edges, not the file.
        file = pq.ParquetFile(self.parquet)
        sizes = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        groups = [i for i in range(len(sizes)) if starts[i] < hi and starts[i + 1] > lo]
        table = file.read_row_groups(groups, columns=["src", "dst"])
        table = table.slice(lo - int(starts[groups[0]]) if groups else 0, hi - lo)
        return (
            table.column("src").to_numpy().astype(np.int64),
            table.column("dst").to_numpy().astype(np.int64),
        )


@dataclass(frozen=True)
class RowFile:
    path: Path
    lo: int
    hi: int


@dataclass
class ChunkedGraph:
    """An opened, checked metadata.json: what each file holds, no array read."""

    metadata_path: Path
    name: str
    num_nodes: int
    num_classes: int
    feat_dim: int
    undirected: bool
    edges: list[EdgeFile]
    feat: list[RowFile]
    label: list[RowFile]
    splits: dict[str, list[Path]]
    sha256: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.metadata_path.parent

    @property
    def num_edges(self) -> int:
        """Edges listed in the files (before reverse edges are added and duplicates dropped)."""
        return sum(f.count for f in self.edges)

    @property
    def edge_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([f.count for f in self.edges])]).astype(np.int64)

    def read_edges(self, lo: int, hi: int, step: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The listed edges [lo, hi) (positions over all files in order), at most `step` at a time."""
        offsets = self.edge_offsets
        position = lo
        while position < hi:
            i = int(np.searchsorted(offsets, position, side="right")) - 1
            end = min(hi, position + step, int(offsets[i + 1]))
            yield self.edges[i].read(position - int(offsets[i]), end - int(offsets[i]))
            position = end

    def read_rows(self, files: list[RowFile], ids: np.ndarray) -> Iterator[np.ndarray]:
        """The rows of sorted vertex `ids`, file by file (a piece per file that holds some)."""
        for f in files:
            a, b = np.searchsorted(ids, [f.lo, f.hi])
            if b > a:
                yield np.asarray(np.load(f.path, mmap_mode="r")[ids[a:b] - f.lo])

    def read_split(self, split: str) -> Iterator[np.ndarray]:
        for path in self.splits[split]:
            yield np.asarray(np.load(path, mmap_mode="r"), dtype=np.int64)

    def files(self) -> list[Path]:
        """Every file the graph is made of, metadata first."""
        out = [self.metadata_path]
        for f in self.edges:
            out += f.paths()
        out += [f.path for f in self.feat] + [f.path for f in self.label]
        for split in SPLITS:
            out += self.splits[split]
        return out

    def checksum(self, identity: dict[str, Any]) -> str:
        """The dataset checksum: the files' sha256s (recorded, else computed) and the
        config `identity` (gnnrun.data.dataset_identity) that turns them into a dataset."""
        digest = hashlib.sha256(f"{FORMAT}/{FORMAT_VERSION}\n".encode())
        for path in self.files()[1:]:
            rel = path.relative_to(self.root).as_posix()
            digest.update(f"{rel}:{self.sha256.get(rel) or sha256_file(path)}\n".encode())
        digest.update(json.dumps({k: v for k, v in self.header().items()}, sort_keys=True).encode())
        digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
        return digest.hexdigest()

    def header(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_classes": self.num_classes,
            "feat_dim": self.feat_dim,
            "undirected": self.undirected,
        }


def _fail(path: Path, problem: str) -> GnnrunError:
    return GnnrunError(f"chunked graph {path}: {problem}; {FIX}")


def _npy_shape(meta: Path, path: Path) -> tuple[tuple[int, ...], np.dtype]:
    if not path.is_file():
        raise _fail(meta, f"{path} named in it is missing")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise _fail(meta, f"cannot read {path} as a .npy array ({exc})") from None
    return tuple(array.shape), array.dtype


def _row_files(meta: Path, entries: Any, key: str, n: int, check: Callable) -> list[RowFile]:
    if not isinstance(entries, list) or not entries:
        raise _fail(meta, f"'{key}' must be a non-empty list of {{file, rows: [lo, hi]}}")
    files, expected = [], 0
    for entry in entries:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and isinstance(entry.get("rows"), list)
            and len(entry["rows"]) == 2
            and all(isinstance(r, int) for r in entry["rows"])
        ):
            raise _fail(
                meta, f"an entry of '{key}' is {entry!r}, expected {{file, rows: [lo, hi]}}"
            )
        lo, hi = entry["rows"]
        if lo != expected or hi <= lo:
            raise _fail(
                meta,
                f"'{key}' rows must follow each other from 0: {entry['file']} covers "
                f"[{lo}, {hi}) where row {expected} comes next",
            )
        path = meta.parent / entry["file"]
        shape, dtype = _npy_shape(meta, path)
        check(path, shape, dtype, hi - lo)
        files.append(RowFile(path, lo, hi))
        expected = hi
    if expected != n:
        raise _fail(meta, f"'{key}' covers rows [0, {expected}), but num_nodes is {n}")
    return files


def open_chunked(path: Path | str) -> ChunkedGraph:
    """Open and check a chunked graph's metadata.json (or the folder holding it): every
    named file exists with the shape and dtype the metadata implies."""
    meta = Path(path)
    if meta.is_dir():
        meta = meta / METADATA
    if not meta.is_file():
        raise GnnrunError(
            f"chunked graph {meta} not found: set dataset.path to the metadata.json of a "
            f"chunked graph; {FIX}"
        )
    try:
        doc = json.loads(meta.read_text())
    except (OSError, ValueError) as exc:
        raise _fail(meta, f"it is not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _fail(meta, f"its 'format' is not {FORMAT!r}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise _fail(
            meta,
            f"format_version {doc.get('format_version')!r}; this gnnrun reads {FORMAT_VERSION}",
        )
    for key, kind in (("name", str), ("num_nodes", int), ("num_classes", int), ("feat_dim", int)):
        if not isinstance(doc.get(key), kind) or isinstance(doc.get(key), bool):
            raise _fail(meta, f"'{key}' must be {'a string' if kind is str else 'an integer'}")
    n, num_classes, dim = doc["num_nodes"], doc["num_classes"], doc["feat_dim"]
    if n < 1 or num_classes < 2 or dim < 0:
        raise _fail(meta, "num_nodes must be at least 1, num_classes at least 2, feat_dim >= 0")
    edges = _edge_files(meta, doc.get("edges"))

    def check_feat(path: Path, shape: tuple, dtype: np.dtype, rows: int) -> None:
        if shape != (rows, dim) or not np.issubdtype(dtype, np.number):
            raise _fail(
                meta, f"{path} holds {dtype}{list(shape)}, expected [{rows}, {dim}] numbers"
            )

    def check_label(path: Path, shape: tuple, dtype: np.dtype, rows: int) -> None:
        if shape != (rows,) or not np.issubdtype(dtype, np.integer):
            raise _fail(meta, f"{path} holds {dtype}{list(shape)}, expected [{rows}] integers")

    feat = _row_files(meta, doc.get("feat"), "feat", n, check_feat)
    label = _row_files(meta, doc.get("label"), "label", n, check_label)
    splits = {}
    for split in SPLITS:
        names = doc.get(split)
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise _fail(meta, f"'{split}' must be a list of .npy files of vertex ids")
        splits[split] = [meta.parent / x for x in names]
        for path in splits[split]:
            shape, dtype = _npy_shape(meta, path)
            if len(shape) != 1 or not np.issubdtype(dtype, np.integer):
                raise _fail(meta, f"{path} holds {dtype}{list(shape)}, expected 1-d vertex ids")
    sha = doc.get("sha256", {})
    if not isinstance(sha, dict):
        raise _fail(meta, "'sha256' must map file names to their sha256")
    return ChunkedGraph(
        meta, doc["name"], n, num_classes, dim, bool(doc.get("undirected", True)),
        edges, feat, label, splits, sha,
    )  # fmt: skip


def _edge_files(meta: Path, entries: Any) -> list[EdgeFile]:
    if not isinstance(entries, list) or not entries:
        raise _fail(meta, "'edges' must be a non-empty list of {src, dst} or {parquet} files")
    files = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("parquet"), str):
            path = meta.parent / entry["parquet"]
            if not path.is_file():
                raise _fail(meta, f"{path} named in it is missing")
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise _fail(
                    meta, f"{path} is Parquet, which needs pyarrow: {install_command('parquet')}"
                ) from None
            schema = pq.read_schema(path)
            if not {"src", "dst"} <= set(schema.names):
                raise _fail(meta, f"{path} has columns {schema.names}, expected src and dst")
            files.append(EdgeFile(pq.ParquetFile(path).metadata.num_rows, parquet=path))
            continue
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("src"), str)
            and isinstance(entry.get("dst"), str)
        ):
            raise _fail(
                meta, f"an entry of 'edges' is {entry!r}, expected {{src, dst}} or {{parquet}}"
            )
        src, dst = meta.parent / entry["src"], meta.parent / entry["dst"]
        shapes = [_npy_shape(meta, p) for p in (src, dst)]
        if any(len(s) != 1 or not np.issubdtype(d, np.integer) for s, d in shapes) or (
            shapes[0][0] != shapes[1][0]
        ):
            raise _fail(
                meta,
                f"{src.name} / {dst.name} hold {shapes[0][1]}{list(shapes[0][0])} / "
                f"{shapes[1][1]}{list(shapes[1][0])}: expected 1-d integer ids of equal length",
            )
        files.append(EdgeFile(shapes[0][0][0], src=src, dst=dst))
    return files


# ------------------------------------------------------------------ reading in one process


def _identity(cfg: ChunkedDatasetConfig) -> dict[str, Any]:
    from gnnrun.data.prepare import dataset_identity  # prepare imports every source's registry

    return dataset_identity(cfg)


def _inputs(cfg: ChunkedDatasetConfig) -> list[Path]:
    meta = Path(cfg.path)
    meta = meta / METADATA if meta.is_dir() else meta
    if not meta.is_file():  # a path that names nothing: never the copy of another graph
        return [meta]
    return open_chunked(meta).files()


@register_source("chunked", ChunkedDatasetConfig, inputs=_inputs)
def load(cfg: ChunkedDatasetConfig) -> GraphDataset:
    """The whole graph in one process (`gnnrun data prepare` of a graph that fits)."""
    graph = open_chunked(cfg.path)
    n = graph.num_nodes
    pieces = list(graph.read_edges(0, graph.num_edges, 1 << 62))
    src = np.concatenate([s for s, _ in pieces] + [np.zeros(0, np.int64)])
    dst = np.concatenate([d for _, d in pieces] + [np.zeros(0, np.int64)])
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise _fail(graph.metadata_path, f"edges have vertex ids outside [0, {n})")
    indptr, indices = csr_from_edges(src, dst, n, symmetrize=graph.undirected)
    every = np.arange(n, dtype=np.int64)
    feat = np.concatenate(
        [r.astype(np.float32) for r in graph.read_rows(graph.feat, every)]
    ).reshape(n, graph.feat_dim)
    label = np.concatenate(list(graph.read_rows(graph.label, every))).astype(np.int64)
    splits = [
        np.sort(np.concatenate([*graph.read_split(s), np.zeros(0, np.int64)])) for s in SPLITS
    ]
    return GraphDataset(
        name=cfg.name,
        indptr=indptr,
        indices=indices,
        feat=feat,
        label=label,
        train_idx=splits[0],
        val_idx=splits[1],
        test_idx=splits[2],
        num_classes=graph.num_classes,
        directed=not graph.undirected,
        task=task_for(graph.num_classes),
        info={"source": "chunked", "input_checksum": graph.checksum(_identity(cfg))},
    )


# ------------------------------------------------------------------ writing


class ChunkWriter:
    """Writes a chunked graph into a folder, file by file; `finish` writes metadata.json."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.doc: dict[str, Any] = {"edges": [], "feat": [], "label": [], "sha256": {}}
        self.doc |= {split: [] for split in SPLITS}
        self.next_row = {"feat": 0, "label": 0}
        for sub in ("edges", "feat", "label", "splits"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)

    def _save(self, rel: str, array: np.ndarray) -> str:
        np.save(self.folder / rel, np.ascontiguousarray(array), allow_pickle=False)
        self.doc["sha256"][rel] = sha256_file(self.folder / rel)
        return rel

    def edges(self, src: np.ndarray, dst: np.ndarray) -> None:
        i = len(self.doc["edges"])
        self.doc["edges"].append(
            {
                "src": self._save(f"edges/src-{i:05d}.npy", src),
                "dst": self._save(f"edges/dst-{i:05d}.npy", dst),
            }
        )

    def rows(self, key: str, rows: np.ndarray) -> None:
        """The next rows of `feat` or `label`."""
        i, lo = len(self.doc[key]), self.next_row[key]
        self.next_row[key] = lo + rows.shape[0]
        rel = self._save(f"{key}/{key}-{i:05d}.npy", rows)
        self.doc[key].append({"file": rel, "rows": [lo, self.next_row[key]]})

    def split(self, split: str, ids: np.ndarray) -> None:
        i = len(self.doc[split])
        self.doc[split].append(self._save(f"splits/{split}-{i:05d}.npy", ids.astype(np.int64)))

    def finish(
        self, name: str, num_nodes: int, num_classes: int, feat_dim: int, undirected: bool
    ) -> Path:
        header = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "name": name,
            "num_nodes": num_nodes,
            "num_classes": num_classes,
            "feat_dim": feat_dim,
            "undirected": undirected,
        }
        write_json(self.folder / METADATA, header | self.doc)
        return self.folder / METADATA


# source name -> writes that source's graph chunk by chunk without holding it: fn(cfg,
# writer, edges_per_file, rows_per_file) -> the header (num_nodes, num_classes, feat_dim,
# undirected) for `ChunkWriter.finish`.
CHUNK_STREAMERS: dict[str, Callable[[Any, ChunkWriter, int, int], dict[str, Any]]] = {}


def streams_chunks(source: str) -> Callable:
    def add(fn: Callable) -> Callable:
        CHUNK_STREAMERS[source] = fn
        return fn

    return add


def _pieces(total: int, step: int) -> Iterable[tuple[int, int]]:
    return ((lo, min(lo + step, total)) for lo in range(0, max(total, 1), step))


def write_dataset_chunks(
    dataset: GraphDataset, writer: ChunkWriter, edges_per_file: int, rows_per_file: int
) -> None:
    """A dataset in memory (or memory-mapped) as chunks: its stored in-edges (both
    directions of an undirected graph), rows and split, in files of the given sizes."""
    if dataset.hetero is not None or dataset.link_train is not None:
        raise GnnrunError(
            f"{dataset.name} is heterogeneous or a link-prediction copy, which the chunked "
            "format does not hold: chunk a homogeneous node-classification dataset"
        )
    indptr = np.asarray(dataset.indptr)
    for lo, hi in _pieces(dataset.num_edges, edges_per_file):
        dst = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
        writer.edges(np.asarray(dataset.indices[lo:hi], dtype=np.int64), dst.astype(np.int64))
    for lo, hi in _pieces(dataset.num_nodes, rows_per_file):
        writer.rows("feat", np.asarray(dataset.feat[lo:hi], dtype=np.float32))
        writer.rows("label", np.asarray(dataset.label[lo:hi], dtype=np.int64))
    for split in SPLITS:
        writer.split(split, np.asarray(getattr(dataset, split)))


def write_chunks(
    output: Path,
    cfg: DatasetConfig,
    build: Callable[[DatasetConfig], GraphDataset] | None,
    edges_per_file: int = EDGES_PER_FILE,
    rows_per_file: int = ROWS_PER_FILE,
) -> Path:
    """Write dataset `cfg` to `output` in the chunked format, atomically; return the path of
    its metadata.json. A source with a streaming writer (CHUNK_STREAMERS) is drawn chunk by
    chunk; any other is built once in memory (`build`) and cut into files."""
    if edges_per_file < 1 or rows_per_file < 1:
        raise GnnrunError("--edges-per-file and --rows-per-file must be positive")
    with atomic_directory(Path(output)) as tmp:
        writer = ChunkWriter(tmp)
        if cfg.source in CHUNK_STREAMERS:
            header = CHUNK_STREAMERS[cfg.source](cfg, writer, edges_per_file, rows_per_file)
        else:
            dataset = build(cfg)
            write_dataset_chunks(dataset, writer, edges_per_file, rows_per_file)
            header = {
                "num_nodes": dataset.num_nodes,
                "num_classes": dataset.num_classes,
                "feat_dim": dataset.feat_dim,
                "undirected": not dataset.directed,
            }
        writer.finish(cfg.name, **header)
    return Path(output) / METADATA
