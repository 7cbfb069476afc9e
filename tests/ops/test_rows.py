"""take_rows equals numpy's fancy indexing, on memory-mapped and odd inputs alike."""

from __future__ import annotations

import numpy as np

from gnnrun.ops.rows import take_rows


def test_take_rows_matches_numpy(tmp_path):
    feat = np.random.default_rng(0).standard_normal((100, 7)).astype(np.float32)
    np.save(tmp_path / "f.npy", feat)
    mapped = np.load(tmp_path / "f.npy", mmap_mode="r")
    rows = np.array([5, 0, 99, 5, 42])
    assert np.array_equal(take_rows(mapped, rows), feat[rows])
    assert np.array_equal(take_rows(mapped, np.zeros(0, np.int64)), feat[:0])
    labels = np.arange(100)
    assert np.array_equal(take_rows(labels, rows), labels[rows])  # 1-d: numpy path
    assert np.array_equal(take_rows(feat[:, ::2], rows), feat[:, ::2][rows])  # non-contiguous


def test_take_rows_into_given_memory():
    """`out` receives the rows (a part of a larger buffer, as a pinned one), on both paths."""
    feat = np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32)
    rows = np.array([3, 49, 0])
    buffer = np.zeros((5, 4), np.float32)
    assert take_rows(feat, rows, out=buffer[1:4]) is not None
    assert np.array_equal(buffer[1:4], feat[rows]) and not buffer[0].any() and not buffer[4].any()
    labels, into = np.arange(50), np.zeros(3, np.int64)
    take_rows(labels, rows, out=into)
    assert np.array_equal(into, rows)
