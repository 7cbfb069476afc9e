"""Reading a custom dataset's arrays (gnnrun.data.custom and gnnrun.data.custom_hetero): one
`.npz`, or a directory of `.npy` files, one per array; and the checks both layouts share:
integer arrays, and a split given as ids or as masks. Every problem is a GnnrunError made by
the caller's `fail(path, problem)`, which adds what its layout expects."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gnnrun.data.graph import sorted_unique
from gnnrun.errors import GnnrunError

SPLIT_IDX = ("train_idx", "val_idx", "test_idx")
SPLIT_MASK = ("train_mask", "val_mask", "test_mask")
Fail = Callable[[Path, str], GnnrunError]


def read_arrays(path: Path, expected: str) -> dict[str, np.ndarray]:
    """The arrays of the `.npz` at `path`, or of the `.npy` files of the directory `path`;
    `expected` says what they must hold, for the message when there is nothing."""
    if path.is_dir():
        return _load_directory(path)
    if not path.is_file():
        raise GnnrunError(
            f"custom dataset file {path} not found; set dataset.path to your .npz, or to a "
            f"folder of .npy files, one per array (they must hold {expected}; a "
            "heterogeneous graph's arrays: docs/datasets.md)"
        )
    if not zipfile.is_zipfile(path):  # numpy would call any other bytes "pickled (object) data"
        raise GnnrunError(
            f"cannot read {path} as a .npz: it is {what_it_is(path)}, not a zip archive of "
            ".npy arrays; write it with numpy.savez (or savez_compressed), or set dataset.path "
            "to a folder of .npy files"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GnnrunError(
            f"cannot read {path} as a .npz of plain arrays ({exc}); write it with numpy.savez "
            "and no object arrays"
        ) from None


def what_it_is(path: Path) -> str:
    """What the bytes at `path` look like, for a file that should be a .npz."""
    with open(path, "rb") as f:
        head = f.read(512)
    if not head:
        return "empty"
    if head.startswith(b"\x93NUMPY"):
        return "a single .npy array (numpy.save)"
    if head.startswith(b"PK"):
        return "a damaged or cut short zip archive"
    if head.startswith(b"\x80"):
        return "a Python pickle"
    if b"\0" not in head:
        return "text"
    return "of another format"


def npy_files(path: Path) -> list[Path]:
    """The `.npy` files of a directory dataset, sorted: every one is read."""
    return sorted(p for p in path.glob("*.npy") if p.is_file())


def _load_directory(path: Path) -> dict[str, np.ndarray]:
    files = npy_files(path)
    if not files:
        raise GnnrunError(
            f"custom dataset directory {path} holds no .npy files; write one array per file "
            "into it with numpy.save, named after the array (edge_index__<src>__<relation>"
            "__<dst>.npy, label.npy, target.npy, ... or edge_index.npy, feat.npy, label.npy), "
            "or set dataset.path to a .npz file"
        )
    arrays = {}
    for file in files:
        with open(file, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":
            raise GnnrunError(
                f"cannot read {file} as a .npy: it is {what_it_is(file)}, not a numpy array "
                "file; write it with numpy.save"
            )
        try:
            arrays[file.stem] = np.load(file, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise GnnrunError(
                f"cannot read {file} as a .npy of a plain array ({exc}); write it with "
                "numpy.save and no object arrays"
            ) from None
    return arrays


def int_array(
    path: Path,
    arrays: dict[str, np.ndarray],
    key: str,
    fail: Fail,
) -> np.ndarray:
    value = arrays[key]
    if not np.issubdtype(value.dtype, np.integer):
        raise fail(path, f"{key} has dtype {value.dtype}, expected integers")
    return value.astype(np.int64, copy=False)


def split_from_file(
    path: Path,
    arrays: dict[str, np.ndarray],
    n: int,
    label: np.ndarray,
    fail: Fail,
    ids: str = "vertex ids",
) -> tuple[np.ndarray, ...] | None:
    """The split the file gives (None: none); `ids` says what its ids are, in messages."""
    has_idx = [k for k in SPLIT_IDX if k in arrays]
    has_mask = [k for k in SPLIT_MASK if k in arrays]
    if has_idx and has_mask:
        raise fail(
            path, f"it mixes split ids ({', '.join(has_idx)}) and masks ({', '.join(has_mask)})"
        )
    if not has_idx and not has_mask:
        return None
    keys = SPLIT_IDX if has_idx else SPLIT_MASK
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise fail(path, f"the split is incomplete: {', '.join(missing)} missing")
    parts = []
    for key in keys:
        value = arrays[key]
        if has_mask:
            if value.dtype != np.bool_ or value.shape != (n,):
                raise fail(
                    path,
                    f"{key} has shape {value.shape} and dtype {value.dtype}, expected ({n},) bool",
                )
            idx = np.flatnonzero(value).astype(np.int64)
        else:
            idx = int_array(path, arrays, key, fail)
            if idx.ndim != 1:
                raise fail(path, f"{key} has shape {idx.shape}, expected a 1-d list of {ids}")
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise fail(
                    path,
                    f"{key} has {ids} outside [0, {n}) (min {idx.min()}, max {idx.max()})",
                )
            idx = sorted_unique(idx)
        unlabelled = int(np.count_nonzero(label[idx] < 0))
        if unlabelled:
            raise fail(path, f"{key} holds {unlabelled} unlabelled vertices (label -1)")
        parts.append(idx)
    for i in range(3):
        for j in range(i + 1, 3):
            common = np.intersect1d(parts[i], parts[j], assume_unique=True).size
            if common:
                raise fail(path, f"{keys[i]} and {keys[j]} share {common} vertices")
    return tuple(parts)
