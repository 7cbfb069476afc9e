"""Row gathers from (memory-mapped) arrays."""

from __future__ import annotations

import warnings

import numpy as np
import torch


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`array[rows]` along the first axis, thread-parallel.

    numpy's fancy indexing is single-threaded; torch's index_select is not and
    gathers from a memory-mapped feature matrix about 6x faster here. The source
    may be a read-only memmap: torch only reads it, so its warning about
    non-writable arrays does not apply.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if array.ndim != 2 or not array.flags.c_contiguous or array.dtype.kind not in "fiu":
        return np.asarray(array[rows])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        source = torch.from_numpy(array)
    return source.index_select(0, torch.from_numpy(rows)).numpy()
