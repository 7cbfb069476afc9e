"""Uniform neighbour sampling without replacement, one hop at a time, and block compaction;
training chains the hops into a minibatch's blocks (gnnrun.algorithms.minibatch.sources).

Fanout convention (gnnrun's, as PyG's `num_neighbors`): `fanouts` are listed
from the seeds outwards. `[15, 10, 5]` gives every seed 15 neighbours, each of
those 10, and the next hop 5. DGL's `NeighborSampler([15, 10, 5])` is the
opposite order (its seeds get 5): pass `[5, 10, 15]` here for the same sample
sizes. The blocks are ordered from the INPUT layer to the OUTPUT layer
(`blocks[-1]` has the seeds as destinations), ready for a model that runs
`blocks[0], blocks[1], ...`. Hop `layer` (0 for the seeds' own neighbours)
samples with `fanouts[layer]`.

Randomness is counter-based: the neighbours drawn for vertex `v` at hop
`layer` depend on `(seed, layer, v)` only (a splitmix64 hash of them keys the
draws), not on the thread count, the rest of the batch, or the process that
samples. A vertex's owner in a distributed sampler therefore reproduces
single-process sampling exactly. For `v` with degree `d` and fanout `k`:

    mix(z)      = splitmix64 finaliser of (z + golden)     (64-bit wrap-around)
    key(v)      = mix(mix(mix(seed) + layer) + v)
    draw(v, i)  = mix(key(v) + i * golden)                 i = 0, 1, ...
    below(r, b) = ((r >> 32) * b) >> 32                    uniform in [0, b)

If `k < 0` or `k >= d`, all `d` neighbours are taken. Otherwise Floyd's
algorithm picks `k` distinct CSR positions: for i in 0..k-1, j = d - k + i,
t = below(draw(v, i), j + 1), take t, or j if t is already taken. Positions
are sorted, so each row lists its sampled neighbours in CSR order.

Compaction relabels one sampled hop into a `Block`: the sources are the
destinations first (in order), then every other neighbour in order of first
appearance (destinations in order, each row in CSR order); `src_ids` are the
ids in the sampled graph.

The native kernels are kernels/sampler.cpp (OpenMP, on `torch.get_num_threads()`
threads); the numpy functions `*_reference` here implement the same semantics
bit for bit and are both the test oracle and the fallback when no compiler is
available.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gnnrun.ops.block import Block
from gnnrun.ops.native import native_op

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)

ArrayLike = torch.Tensor | np.ndarray | Sequence[int]


# --------------------------------------------------------------------------- RNG


def _mix_int(z: int) -> int:
    """splitmix64 on one Python int (exact 64-bit wrap-around)."""
    z = (z + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 on a uint64 array (numpy's unsigned arithmetic wraps around)."""
    z = np.asarray(z, dtype=np.uint64) + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * _MUL1
    z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


def vertex_keys(nodes: np.ndarray, seed: int, layer: int) -> np.ndarray:
    """key(v) = mix(mix(mix(seed) + layer) + v): what every draw for v at this hop derives from."""
    seed_key = _mix_int((_mix_int(seed & _MASK64) + (layer & _MASK64)) & _MASK64)
    return mix64(np.asarray(nodes, dtype=np.int64).astype(np.uint64) + np.uint64(seed_key))


def _floyd(keys: np.ndarray, deg: np.ndarray, k: int) -> np.ndarray:
    """Floyd's algorithm for many rows at once: [rows, k] sorted distinct positions in [0, deg)."""
    chosen = np.empty((keys.size, k), dtype=np.int64)
    base = deg - k
    for i in range(k):
        j = base + i
        r = mix64(keys + np.uint64((i * _GOLDEN) & _MASK64))
        t = ((r >> np.uint64(32)) * (j + 1).astype(np.uint64)) >> np.uint64(32)
        t = t.astype(np.int64)
        taken = (chosen[:, :i] == t[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, j, t)
    chosen.sort(axis=1)
    return chosen


# --------------------------------------------------------------------- references


def _numpy(x: ArrayLike, dtype: type | None = None) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def sample_neighbors_reference(
    indptr: ArrayLike, indices: ArrayLike, nodes: ArrayLike, fanout: int, seed: int, layer: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """numpy oracle (and fallback) of `sample_neighbors`: identical output."""
    ptr = _numpy(indptr, np.int64)
    idx = _numpy(indices)
    v = _numpy(nodes, np.int64).ravel()
    num_nodes = ptr.size - 1
    if v.size and (v.min() < 0 or v.max() >= num_nodes):
        raise ValueError(f"sample_neighbors: node id outside [0, {num_nodes})")
    start = ptr[v]
    deg = ptr[v + 1] - start
    count = deg if fanout < 0 else np.minimum(deg, fanout)
    offsets = np.zeros(v.size + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    total = int(offsets[-1])
    row = np.repeat(np.arange(v.size), count)
    local = np.arange(total, dtype=np.int64) - offsets[row]  # full rows: every position
    sampled = np.flatnonzero(count < deg)
    if sampled.size:
        if deg[sampled].max() > 2**32:
            raise ValueError("sample_neighbors: a degree above 2^32 to sample from")
        pos = _floyd(vertex_keys(v[sampled], seed, layer), deg[sampled], fanout)
        slots = offsets[sampled][:, None] + np.arange(fanout)
        local[slots.ravel()] = pos.ravel()
    neighbors = idx[start[row] + local].astype(np.int64)
    return torch.from_numpy(offsets), torch.from_numpy(neighbors)


def compact_reference(
    dst_nodes: ArrayLike, offsets: ArrayLike, neighbors: ArrayLike
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """numpy oracle (and fallback) of `compact`: identical output."""
    dst = _numpy(dst_nodes, np.int64).ravel()
    nbr = _numpy(neighbors, np.int64).ravel()
    off = _numpy(offsets, np.int64).ravel()
    if off.size != dst.size + 1 or off[0] != 0 or off[-1] != nbr.size:
        raise ValueError("compact: offsets do not span neighbors")
    n_dst = dst.size
    keys = np.concatenate([dst, nbr])
    if keys.size and keys.min() < 0:
        raise ValueError("compact: negative id")
    # return_index gives each id's first position (numpy sorts stably for it).
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    local = np.empty(uniq.size, dtype=np.int64)
    is_dst = first < n_dst
    local[is_dst] = first[is_dst]
    new = np.flatnonzero(~is_dst)
    new = new[np.argsort(first[new], kind="stable")]
    local[new] = n_dst + np.arange(new.size)
    indices = local[inverse.ravel()[n_dst:]]
    src_ids = np.concatenate([dst, uniq[new]])
    return torch.from_numpy(off.copy()), torch.from_numpy(indices), torch.from_numpy(src_ids)


# ------------------------------------------------------------------ dispatching


def _ids(x: ArrayLike) -> torch.Tensor:
    t = torch.as_tensor(x)
    return t.to(torch.int64).contiguous()


def _index_tensor(x: ArrayLike) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dtype not in (torch.int32, torch.int64):
        t = t.to(torch.int64)
    return t.contiguous()


def _use_native(native: bool | None, name: str):
    if native is False:
        return None
    op = native_op(name, "sampler")
    if op is None and native:
        raise RuntimeError(f"native gnnrun::{name} (kernels/sampler.cpp) is unavailable")
    return op


def sample_neighbors(
    indptr: ArrayLike,
    indices: ArrayLike,
    nodes: ArrayLike,
    fanout: int,
    seed: int,
    layer: int,
    *,
    native: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample up to `fanout` distinct in-neighbours of every vertex in `nodes` (raw, uncompacted).

    Returns `(offsets, neighbors)`: int64 `offsets` [len(nodes) + 1] and int64
    `neighbors`, the ids (in the graph's id space) of the sampled in-neighbours
    of `nodes[i]` at `neighbors[offsets[i]:offsets[i + 1]]`, in CSR order. Row
    `i` has exactly min(deg, fanout) entries (all of them for fanout < 0). The
    choice for a vertex depends only on (seed, layer, vertex id).
    `native=None` uses the C++ kernel when it builds, else the reference;
    True/False force one.
    """
    op = _use_native(native, "sample_neighbors")
    if op is None:
        return sample_neighbors_reference(indptr, indices, nodes, fanout, seed, layer)
    offsets, neighbors = op(
        _ids(indptr), _index_tensor(indices), _ids(nodes), int(fanout), int(seed), int(layer)
    )
    return offsets, neighbors


def sample_relations(
    indptr: ArrayLike,
    indices: ArrayLike,
    rows: ArrayLike,
    fanouts: Sequence[int],
    seed: int,
    layer: int,
    *,
    native: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_neighbors` over the rows `v * R + r` of a per-relation CSR
    (gnnrun.data.hetero.relation_indptr), relation r's rows with `fanouts[r]`: the
    same (offsets, neighbors) form over `rows`. A row's draws are keyed by its row id,
    so each relation of a vertex draws on its own."""
    rows = _ids(rows)
    distinct = sorted(set(fanouts))
    if len(distinct) == 1:
        return sample_neighbors(indptr, indices, rows, distinct[0], seed, layer, native=native)
    fanout_of_row = torch.tensor(list(fanouts), dtype=torch.int64)[rows % len(fanouts)]
    counts = torch.empty(rows.numel(), dtype=torch.int64)
    groups = []
    for fanout in distinct:
        chosen = torch.nonzero(fanout_of_row == fanout).squeeze(1)
        offsets, neighbors = sample_neighbors(
            indptr, indices, rows[chosen], fanout, seed, layer, native=native
        )
        counts[chosen] = offsets[1:] - offsets[:-1]
        groups.append((chosen, offsets, neighbors))
    offsets = torch.zeros(rows.numel() + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=offsets[1:])
    merged = torch.empty(int(offsets[-1]), dtype=torch.int64)
    for chosen, group_offsets, neighbors in groups:
        lengths = group_offsets[1:] - group_offsets[:-1]
        shift = torch.repeat_interleave(offsets[chosen] - group_offsets[:-1], lengths)
        merged[shift + torch.arange(neighbors.numel())] = neighbors
    return offsets, merged


def compact(
    dst_nodes: ArrayLike, offsets: ArrayLike, neighbors: ArrayLike, *, native: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Relabel a sampled hop into block form: `(indptr, indices, src_ids)`, all int64.

    `src_ids` lists `dst_nodes` first, then every other id of `neighbors` in
    order of first appearance; `indices` are positions in `src_ids`, so
    `src_ids[indices] == neighbors`; `indptr` is `offsets`.
    """
    op = _use_native(native, "compact")
    if op is None:
        return compact_reference(dst_nodes, offsets, neighbors)
    indptr, indices, src_ids = op(_ids(dst_nodes), _ids(offsets), _ids(neighbors))
    return indptr, indices, src_ids


def sample_blocks(
    indptr: ArrayLike,
    indices: ArrayLike,
    seeds: ArrayLike,
    fanouts: Sequence[int],
    seed: int,
    *,
    native: bool | None = None,
) -> list[Block]:
    """Sample a multi-layer computation graph around `seeds`; blocks from input to output layer.

    The hops training chains (gnnrun.algorithms.sample_minibatch), on a bare CSR: for
    programs and benchmarks that sample outside a training run.

    `fanouts[0]` is the number of neighbours each seed gets (PyG order, see the
    module docstring); `blocks[-1].src_ids[:len(seeds)]` are the seeds. Seeds
    should be distinct: a repeated seed stays a repeated destination.
    """
    ptr = _ids(indptr)
    idx = _index_tensor(indices)
    dst = _ids(seeds)
    blocks = []
    for layer, fanout in enumerate(fanouts):
        offsets, neighbors = sample_neighbors(ptr, idx, dst, fanout, seed, layer, native=native)
        block_ptr, block_idx, src_ids = compact(dst, offsets, neighbors, native=native)
        blocks.append(Block(block_ptr, block_idx, int(src_ids.numel()), src_ids))
        dst = src_ids
    blocks.reverse()
    return blocks
