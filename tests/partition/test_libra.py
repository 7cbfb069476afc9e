"""The native Libra kernel against its Python reference, and Libra against random vertex cut."""

from __future__ import annotations

import numpy as np
import pytest

from gnnrun.ops.native import load_kernel_file
from gnnrun.partition import partition_dataset
from gnnrun.partition.libra import (
    BALANCE_SLACK,
    libra_assign,
    libra_assign_reference,
    reverse_edges,
)
from gnnrun.partition.registry import PartitionerConfig


@pytest.mark.parametrize("num_parts", [1, 2, 5, 64])
def test_native_kernel_matches_reference(num_parts):
    if not load_kernel_file("libra"):
        pytest.skip("native kernels could not be built here (no compiler)")
    rng = np.random.default_rng(num_parts)
    n = 300
    # A hub (vertex 0) and self-loops exercise the corner cases of the masks.
    src = np.concatenate([rng.integers(0, n, 3000), np.zeros(200, np.int64), [5, 7]])
    dst = np.concatenate([rng.integers(0, n, 3000), rng.integers(0, n, 200), [5, 7]])
    native = libra_assign(src, dst, n, num_parts)
    reference = libra_assign_reference(src, dst, n, num_parts, BALANCE_SLACK)
    assert np.array_equal(native, reference)
    loads = np.bincount(native, minlength=num_parts)
    assert loads.max() <= (1 + BALANCE_SLACK) * src.size / num_parts + 2


def test_libra_replicates_less_than_random_edge_assignment(tiny, tmp_path):
    book = partition_dataset(tiny, PartitionerConfig(name="libra", num_parts=4), tmp_path / "p")
    # Random vertex cut: every edge to a uniformly random part.
    rng = np.random.default_rng(0)
    src = np.asarray(tiny.indices, dtype=np.int64)
    dst = np.repeat(np.arange(tiny.num_nodes), np.diff(tiny.indptr))
    part = rng.integers(0, 4, src.size)
    pairs = np.unique(np.concatenate([src * 4 + part, dst * 4 + part]))
    random_factor = pairs.size / tiny.num_nodes  # distinct (vertex, part) clones per vertex
    assert book.manifest["summary"]["replication_factor"] < 0.75 * random_factor


def test_reverse_edges_native_matches_reference(tiny, monkeypatch):
    native = reverse_edges(tiny.indptr, tiny.indices)
    monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
    load_kernel_file.cache_clear()
    try:
        reference = reverse_edges(tiny.indptr, tiny.indices)
    finally:
        load_kernel_file.cache_clear()
    assert np.array_equal(native, reference)
    src = np.asarray(tiny.indices)
    dst = np.repeat(np.arange(tiny.num_nodes), np.diff(tiny.indptr))
    assert np.array_equal(src[native], dst) and np.array_equal(dst[native], src)
