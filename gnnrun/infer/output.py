"""What `gnnrun predict` and `gnnrun embed` write: one shard per rank and a manifest.

    manifest.json          kind, layer, columns, the run, checkpoint and dataset it came
                           from, every shard's rows and file records (shape, dtype, bytes,
                           sha256), the metrics and the throughput
    ids-00000.npy          int64: the original id (the dataset source's) of each row
    class-00000.npy        predict: int64 predicted class
    prob-00000.npy         predict, multiclass: float32 [rows, classes] probabilities
    score-00000.npy        predict, binary: float32 probability of class 1
                           (the columns of a prediction are the task's: gnnrun.tasks)
    embedding-00000.npy    embed: float32 [rows, width] the chosen layer's output
    parquet/part-00000.parquet   the same columns in one table (with pyarrow)

Rows are in no particular order across shards; `read_output` concatenates the
shards and can sort them by id. The directory appears only once complete: the
shards are written into a temporary directory that is renamed into place after
the manifest (gnnrun.infer.run), so a directory with a manifest is a finished output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_rows, load_recorded_array, read_manifest, sha256_file

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def shard_file(column: str, shard: int) -> str:
    return f"{column}-{shard:05d}.npy"


def parquet_file(shard: int) -> str:
    """In a folder of its own: readers of a Parquet dataset take every file of a folder."""
    return f"parquet/part-{shard:05d}.parquet"


def write_shard(
    directory: Path,
    shard: int,
    ids: np.ndarray,
    rows: np.ndarray,
    columns: Callable[[np.ndarray], dict[str, np.ndarray]],
    chunk: int,
    parquet: bool,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Write shard `shard`: `ids`, and `columns(rows[a:b])` for chunks of `chunk` rows (so
    that memory follows the chunk); return the records of its .npy files and of its
    Parquet file (none without `parquet`)."""
    n = int(ids.shape[0])
    spans = [(a, min(a + chunk, n)) for a in range(0, n, chunk)] or [(0, 0)]
    probe = columns(np.asarray(rows[0:0]))  # names, dtypes and trailing shapes
    with atomic_rows(directory / shard_file("ids", shard), (n,), np.int64) as append:
        append(ids)
    with contextlib.ExitStack() as files:
        appends = {
            name: files.enter_context(
                atomic_rows(directory / shard_file(name, shard), (n, *empty.shape[1:]), empty.dtype)
            )
            for name, empty in probe.items()
        }
        for a, b in spans:
            for name, values in columns(np.asarray(rows[a:b])).items():
                appends[name](values)
    arrays = {
        shard_file(name, shard): _record(directory / shard_file(name, shard))
        for name in ("ids", *probe)
    }
    tables = {}
    if parquet:
        path = directory / parquet_file(shard)
        path.parent.mkdir(exist_ok=True)
        _write_parquet(path, ids, rows, columns, spans)
        tables[parquet_file(shard)] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return arrays, tables


def _record(path: Path) -> dict[str, Any]:
    array = np.load(path, mmap_mode="r")
    return {
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "bytes": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def _write_parquet(
    path: Path,
    ids: np.ndarray,
    rows: np.ndarray,
    columns: Callable[[np.ndarray], dict[str, np.ndarray]],
    spans: list[tuple[int, int]],
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gnnrun.io import atomic_file

    def table(a: int, b: int) -> Any:
        fields = {"id": pa.array(np.asarray(ids[a:b], dtype=np.int64))}
        for name, values in columns(np.asarray(rows[a:b])).items():
            if values.ndim == 2:  # one fixed-size list per row
                flat = pa.array(values.reshape(-1))
                fields[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
            else:
                fields[name] = pa.array(values)
        return pa.table(fields)

    with atomic_file(path, "wb") as f:
        first = table(*spans[0])
        with pq.ParquetWriter(f, first.schema) as writer:
            writer.write_table(first)
            for a, b in spans[1:]:
                writer.write_table(table(a, b))


def parquet_available() -> bool:
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def read_output(path: Path, sort: bool = True) -> dict[str, np.ndarray]:
    """A finished output's columns, every shard's rows together (`sort`: by id), each file
    checked against the manifest."""
    path = Path(path)
    manifest = read_output_manifest(path)
    fix = f"run the command that wrote {path} again"
    columns: dict[str, list[np.ndarray]] = {}
    for shard in range(len(manifest["shards"])):
        for name in ("ids", *manifest["columns"]):
            rel = shard_file(name, shard)
            array = load_recorded_array(path / rel, manifest["files"][rel], fix, mmap=False)
            columns.setdefault(name, []).append(array)
    joined = {name: np.concatenate(parts) for name, parts in columns.items()}
    if sort:
        order = np.argsort(joined["ids"], kind="stable")
        joined = {name: values[order] for name, values in joined.items()}
    return joined


def read_output_manifest(path: Path) -> dict[str, Any]:
    return read_manifest(
        Path(path),
        MANIFEST,
        FORMAT_VERSION,
        "gnnrun predict / embed output",
        "write it with `gnnrun predict run=RUN_DIR` or `gnnrun embed run=RUN_DIR`",
        fields={"kind": str, "columns": list, "shards": list, "files": dict},
    )


def refuse_occupied(path: Path) -> None:
    """Refuse an output directory that exists with anything in it (a finished output
    above all): the output is renamed into place, never written over or into."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        raise GnnrunError(
            f"{path} already holds a finished output: move it away, or set "
            "predict.output_dir to another directory"
        )
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise GnnrunError(
            f"{path} exists and is not an empty directory: set predict.output_dir to a new "
            "or empty directory"
        )
