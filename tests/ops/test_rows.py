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
