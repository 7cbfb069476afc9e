"""Edge lists to the in-CSR that every gnnrun dataset stores."""

from __future__ import annotations

import numpy as np

from gnnrun.errors import GnnrunError


def check_edge_keys(rows: int, num_nodes: int) -> None:
    """Refuse a graph whose edges, sorted by the 64-bit key row * num_nodes + source, would
    overflow the key (and be mis-sorted without a word): rows x vertices must stay below
    2^63, about 3.03 billion vertices, fewer for a heterogeneous graph's rows per relation."""
    if int(rows) * int(num_nodes) > np.iinfo(np.int64).max:  # Python integers: exact
        raise GnnrunError(
            f"a graph of {num_nodes:,} vertices ({rows:,} CSR rows) is beyond the 64-bit "
            "edge keys gnnrun sorts its edges by (rows x vertices below 2^63, about 3.03 "
            "billion vertices, fewer with many relations): graphs this large are not "
            "supported yet"
        )


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 ids while they fit: half the bytes to read in every aggregation."""
    return np.dtype(np.int32) if num_nodes < 2**31 - 1 else np.dtype(np.int64)


def csr_from_edges(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    symmetrize: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Build the in-CSR (row = destination) of an edge list.

    Self-loops and duplicate edges are dropped; `symmetrize` adds every reverse
    edge first. Rows come out sorted, so equal graphs give equal bytes.
    """
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    if src.shape != dst.shape:
        raise ValueError(f"edge list halves differ in length: {src.shape} vs {dst.shape}")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"edge list has vertex ids outside [0, {num_nodes})")
    check_edge_keys(num_nodes, num_nodes)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    keys = sorted_unique(dst * num_nodes + src)  # sorted by (dst, src), duplicates gone
    dst_sorted = keys // num_nodes
    indices = (keys - dst_sorted * num_nodes).astype(index_dtype(num_nodes))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_sorted, minlength=num_nodes), out=indptr[1:])
    return indptr, indices


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique for integers via sort + mask: numpy 2.x's np.unique is ~50x slower here."""
    values = np.sort(values)
    if values.size == 0:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def unique_ids(ids: np.ndarray, num_nodes: int) -> np.ndarray:
    """Sorted distinct vertex ids by marking a bitmap: O(len + n), no sort."""
    seen = np.zeros(num_nodes, dtype=bool)
    seen[ids] = True
    return np.flatnonzero(seen)


def edges_from_csr(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every stored in-edge, in CSR order."""
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    return np.asarray(indices, dtype=np.int64), dst


def is_symmetric(indptr: np.ndarray, indices: np.ndarray) -> bool:
    src, dst = edges_from_csr(indptr, indices)
    n = indptr.shape[0] - 1
    check_edge_keys(n, n)
    return np.array_equal(np.sort(src * n + dst), np.sort(dst * n + src))


def stratified_split(
    label: np.ndarray, fractions: tuple[float, float, float], seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded per-class split of the labelled vertices into train/val/test (sorted ids)."""
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[], [], []]
    for cls in np.unique(label[label >= 0]):
        members = rng.permutation(np.flatnonzero(label == cls))
        n_train = int(round(fractions[0] * members.size))
        n_val = int(round(fractions[1] * members.size))
        n_test = min(int(round(fractions[2] * members.size)), members.size - n_train - n_val)
        parts[0].append(members[:n_train])
        parts[1].append(members[n_train : n_train + n_val])
        parts[2].append(members[n_train + n_val : n_train + n_val + n_test])
    return tuple(
        np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, np.int64) for p in parts
    )
