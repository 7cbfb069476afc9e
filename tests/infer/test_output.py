"""The sharded output of predict / embed: columns, the manifest, reading back, damage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gnnrun.errors import GnnrunError
from gnnrun.infer.output import (
    FORMAT_VERSION,
    MANIFEST,
    read_output,
    write_shard,
)


def _write(tmp_path, shards: list[np.ndarray], parquet: bool = False) -> dict:
    """Shards of `embed`-like rows with ids counting down, and their manifest."""
    files, tables, start = {}, {}, 0
    for shard, rows in enumerate(shards):
        ids = np.arange(start + len(rows) - 1, start - 1, -1)
        arrays, parquets = write_shard(
            tmp_path, shard, ids, rows, lambda r: {"embedding": r}, chunk=3, parquet=parquet
        )
        files |= arrays
        tables |= parquets
        start += len(rows)
    manifest = {
        "format_version": FORMAT_VERSION,
        "kind": "embed",
        "columns": ["embedding"],
        "shards": [len(r) for r in shards],
        "files": files,
        "parquet": tables,
    }
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    return manifest


def test_shards_read_back_sorted_by_id(tmp_path):
    rows = [np.arange(14, dtype=np.float32).reshape(7, 2), np.ones((0, 2), np.float32)]
    rows.append(np.full((4, 2), 9.0, np.float32))
    manifest = _write(tmp_path, rows, parquet=True)
    out = read_output(tmp_path)
    assert out["ids"].tolist() == list(range(11))
    assert np.array_equal(out["embedding"][:7], rows[0][::-1])  # ids counted down
    assert manifest["files"]["embedding-00002.npy"]["shape"] == [4, 2]
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    table = pandas.read_parquet(tmp_path / "parquet").sort_values("id")
    assert np.array_equal(np.stack(table["embedding"].to_list()), out["embedding"])


def test_a_damaged_shard_is_named(tmp_path):
    _write(tmp_path, [np.zeros((5, 3), np.float32)])
    shard = tmp_path / "embedding-00000.npy"
    shard.write_bytes(shard.read_bytes()[:-4])
    with pytest.raises(GnnrunError, match="embedding-00000.npy has .* bytes, expected"):
        read_output(tmp_path)
    with pytest.raises(GnnrunError, match="no gnnrun predict / embed output at"):
        read_output(tmp_path / "nothing")
