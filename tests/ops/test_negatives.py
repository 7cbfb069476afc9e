"""Keyed negative sampling: each edge's negatives depend on (key, edge id, j) only, lie in
range, and follow their sampler's distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.ops.negatives import DEGREE_POWER, degree_weights, sample_negatives


def positives(n: int, count: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, n, (2, count)))


@pytest.mark.parametrize("sampler", ["per_source", "uniform", "degree"])
def test_an_edges_negatives_do_not_depend_on_the_rest_of_the_batch(sampler):
    n = 1000
    cdf = degree_weights(np.arange(n) % 7)
    pos = positives(n, 64)
    ids = torch.arange(100, 164)
    whole = sample_negatives(sampler, pos, ids, 5, 11, (0, n), degree_cdf=cdf)
    half = sample_negatives(sampler, pos[:, 32:], ids[32:], 5, 11, (0, n), degree_cdf=cdf)
    assert whole.shape == (2, 64 * 5)
    assert torch.equal(whole[:, 32 * 5 :], half)
    other_key = sample_negatives(sampler, pos, ids, 5, 12, (0, n), degree_cdf=cdf)
    assert not torch.equal(whole, other_key)
    assert whole.min() >= 0 and whole.max() < n


def test_per_source_and_degree_keep_the_source_and_uniform_draws_both_ends():
    n = 500
    pos = positives(n, 200)
    ids = torch.arange(200)
    cdf = degree_weights(np.ones(n))
    for sampler in ("per_source", "degree"):
        neg = sample_negatives(sampler, pos, ids, 3, 1, (0, n), degree_cdf=cdf)
        assert torch.equal(neg[0], pos[0].repeat_interleave(3))
    neg = sample_negatives("uniform", pos, ids, 3, 1, (0, n))
    assert (neg[0] != pos[0].repeat_interleave(3)).float().mean() > 0.9


def test_uniform_destinations_are_uniform_and_degree_ones_follow_degree_to_the_power():
    n, draws = 20, 200_000
    degree = np.arange(n) + 1
    pos = torch.zeros(2, draws // 10, dtype=torch.int64)
    ids = torch.arange(draws // 10)
    uniform = np.bincount(sample_negatives("per_source", pos, ids, 10, 3, (0, n))[1], minlength=n)
    np.testing.assert_allclose(uniform / draws, np.full(n, 1 / n), rtol=0.05)
    cdf = degree_weights(degree)
    weighted = sample_negatives("degree", pos, ids, 10, 3, (0, n), degree_cdf=cdf)[1]
    expected = degree**DEGREE_POWER / (degree**DEGREE_POWER).sum()
    np.testing.assert_allclose(np.bincount(weighted, minlength=n) / draws, expected, rtol=0.05)


def test_negatives_stay_in_their_vertex_ranges():
    """A heterogeneous graph's target relation: destinations of one type, sources of another."""
    pos = torch.stack([torch.full((50,), 3), torch.full((50,), 120)])
    ids = torch.arange(50)
    cdf = degree_weights(np.ones(30))
    for sampler in ("per_source", "uniform", "degree"):
        neg = sample_negatives(sampler, pos, ids, 4, 7, (100, 30), (0, 10), degree_cdf=cdf)
        assert neg[1].min() >= 100 and neg[1].max() < 130, sampler
        assert neg[0].min() >= 0 and neg[0].max() < 10, sampler
