"""Row gathers from (memory-mapped) arrays."""

from __future__ import annotations

import warnings

import numpy as np
import torch

# The source may be a read-only memory map, which torch only reads here: its warning about
# non-writable arrays does not apply. Installed once at import: `catch_warnings` saves and
# restores the process's filter list, which races between the threads that gather rows.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def read_only_tensor(array: np.ndarray) -> torch.Tensor:
    """`torch.from_numpy(array)` for an array torch only reads (a read-only memory map's
    pages, not a copy), without torch's warning that it cannot protect it."""
    return torch.from_numpy(array)


def take_rows(array: np.ndarray, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`array[rows]` along the first axis, thread-parallel.

    numpy's fancy indexing is single-threaded; torch's index_select is not and
    gathers from a memory-mapped feature matrix about 6x faster here. The source
    may be a read-only memmap (torch only reads it). `out`: where to put them (say, part
    of a pinned buffer), instead of a new array.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if array.ndim != 2 or not array.flags.c_contiguous or array.dtype.kind not in "fiu":
        if out is None:
            return np.asarray(array[rows])
        out[...] = array[rows]
        return out
    source = read_only_tensor(array)
    index = torch.from_numpy(rows)
    if out is None:
        return source.index_select(0, index).numpy()
    torch.index_select(source, 0, index, out=torch.from_numpy(out))
    return out
