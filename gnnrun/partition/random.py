"""Edge cut by a seeded uniform vertex assignment: the baseline METIS is measured against.

A vertex's part is computed from its id alone, `hash_parts(ids, N, P, seed)`: a seeded
pseudo-random permutation pi of [0, N) (a Feistel network on the smallest even-bit
domain that holds N, walked until it lands inside [0, N)), and part(v) = pi(v) mod P.
That is a shuffled round-robin, so parts are uniformly random and their sizes differ
by at most one, and any process can tell any vertex's part without holding the others:
the ranks of a distributed partition (gnnrun.partition.distributed) assign exactly as
one process does.
"""

from __future__ import annotations

import numpy as np

from gnnrun.data.dataset import GraphDataset
from gnnrun.partition.registry import Assignment, PartitionerConfig, register_partitioner

_ROUNDS = 4  # Luby-Rackoff: four rounds of a pseudo-random function make a permutation look random
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fast, well-spread hash of uint64 values (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _round_keys(seed: int) -> list[np.uint64]:
    keys = np.random.default_rng([seed, 0x6E6E7275]).integers(
        0, 2**63, size=_ROUNDS, dtype=np.uint64
    )
    return [np.uint64(k) for k in keys]


def permute_ids(ids: np.ndarray, num_nodes: int, seed: int) -> np.ndarray:
    """pi(ids): a seeded permutation of [0, num_nodes), computed per id (int64 out)."""
    half = max(1, (int(num_nodes - 1).bit_length() + 1) // 2)  # 2 * half bits hold num_nodes
    low_mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    keys = _round_keys(seed)

    def feistel(x: np.ndarray) -> np.ndarray:
        left, right = x >> shift, x & low_mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & low_mask)
        return (left << shift) | right

    out = feistel(np.asarray(ids, dtype=np.int64).astype(np.uint64))
    # Cycle walking: a permutation of [0, 4^half) restricted to [0, N) by applying it
    # again to values that land outside; at most 4x the domain, so a few walks.
    outside = np.flatnonzero(out >= np.uint64(num_nodes))
    while outside.size:
        out[outside] = feistel(out[outside])
        outside = outside[out[outside] >= np.uint64(num_nodes)]
    return out.astype(np.int64)


def hash_parts(ids: np.ndarray, num_nodes: int, num_parts: int, seed: int) -> np.ndarray:
    """The part of each vertex in `ids` under partitioner=random (int32)."""
    return (permute_ids(ids, num_nodes, seed) % num_parts).astype(np.int32)


@register_partitioner("random", "edge_cut")
def random_partition(dataset: GraphDataset, cfg: PartitionerConfig) -> Assignment:
    ids = np.arange(dataset.num_nodes, dtype=np.int64)
    return Assignment(hash_parts(ids, dataset.num_nodes, cfg.num_parts, cfg.seed))
