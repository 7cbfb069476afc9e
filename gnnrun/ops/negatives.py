"""Negative edges for link prediction, drawn counter-based: the same in every process.

Every draw is a function of (key, edge id, j) only, with the splitmix64 hash
of gnnrun.ops.sampling: draw(e, j) = mix(key(e) + j * golden), key(e) =
mix(mix(mix(key) + stream) + e). The j-th negative of edge e is therefore the
same whichever rank builds the minibatch and whatever else is in it, which is
what lets a distributed run reproduce one process's minibatches exactly.

Three samplers, each returning `num` negatives per positive edge (u, v):

- `per_source` (DGL's `PerSourceUniform`, OGB's ogbl-citation2 convention):
  (u, w), w uniform over the vertices;
- `uniform`: (a, b), both ends uniform over the vertices (PyG's random
  negative pairs, without rejecting true edges);
- `degree`: (u, w), w drawn in proportion to degree ** 0.75 (word2vec's
  smoothing), so that popular vertices are negatives as often as they are
  positives' ends.

None rejects true edges: on a sparse graph a negative is an edge with
probability about average degree / vertices (DGL and OGB do the same).
"""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.ops.sampling import mix64, vertex_keys

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Streams keep the draws of one key apart by purpose.
DESTINATION_STREAM = 1
SOURCE_STREAM = 2
DEGREE_POWER = 0.75


def draws(edge_ids: torch.Tensor, num: int, key: int, stream: int) -> np.ndarray:
    """[len(edge_ids), num] uint64 draws, each a function of (key, stream, edge id, j)."""
    keys = vertex_keys(edge_ids.numpy(), key, stream)
    j = np.arange(num, dtype=np.uint64) * _GOLDEN
    return mix64(keys[:, None] + j[None, :])


def below(draw: np.ndarray, bound: int) -> np.ndarray:
    """Uniform integers in [0, bound) from 64-bit draws (the high 32 bits, scaled)."""
    return ((draw >> np.uint64(32)) * np.uint64(bound) >> np.uint64(32)).astype(np.int64)


def unit(draw: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1) from 64-bit draws (53 bits)."""
    return (draw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def degree_weights(degree: np.ndarray) -> np.ndarray:
    """The cumulative distribution the `degree` sampler draws from: degree ** 0.75, normalised."""
    weights = np.asarray(degree, dtype=np.float64) ** DEGREE_POWER
    total = weights.sum()
    if total == 0:  # no edges: fall back to uniform
        weights, total = np.ones_like(weights), float(weights.size)
    return np.cumsum(weights) / total


def sample_negatives(
    sampler: str,
    positives: torch.Tensor,
    edge_ids: torch.Tensor,
    num: int,
    key: int,
    destinations: tuple[int, int],
    sources: tuple[int, int] | None = None,
    degree_cdf: np.ndarray | None = None,
) -> torch.Tensor:
    """[2, len(edge_ids) * num] negative pairs for `positives` [2, E] (source, destination)
    whose global edge ids are `edge_ids`: positive i's negatives are columns i*num..i*num+num-1.
    Negative ends are drawn from vertex ranges (first id, count): `destinations`, and
    `sources` for `uniform` (the destinations' range when None); on a heterogeneous graph,
    the target relation's destination and source types. `degree_cdf` (`degree_weights`
    of the destinations' degrees) is what `degree` draws from."""
    first, count = destinations
    destination = draws(edge_ids, num, key, DESTINATION_STREAM)
    if sampler == "per_source":
        dst = below(destination, count)
    elif sampler == "degree":
        if degree_cdf is None:
            raise ValueError("the degree sampler needs the degree distribution (degree_weights)")
        dst = np.minimum(np.searchsorted(degree_cdf, unit(destination), side="right"), count - 1)
    elif sampler == "uniform":
        source_first, source_count = sources or destinations
        dst = below(destination, count)
        src = below(draws(edge_ids, num, key, SOURCE_STREAM), source_count) + source_first
        return torch.from_numpy(np.stack([src.reshape(-1), dst.reshape(-1) + first]))
    else:
        raise ValueError(f"unknown negative sampler {sampler!r}")
    src = positives[0].repeat_interleave(num)
    return torch.stack([src, torch.from_numpy(dst.reshape(-1) + first)])
