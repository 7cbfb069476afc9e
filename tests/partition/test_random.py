"""partitioner=random: a seeded permutation computed per vertex, so parts are balanced to
one vertex and any process can tell any vertex's part."""

from __future__ import annotations

import numpy as np
import pytest

from gnnrun.partition.random import hash_parts, permute_ids


@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 1000, 4097, 50_001])
def test_the_permutation_is_one(n):
    assert np.array_equal(np.sort(permute_ids(np.arange(n), n, seed=3)), np.arange(n))


def test_parts_differ_by_at_most_one_vertex_and_follow_the_seed():
    n = 10_007
    parts = hash_parts(np.arange(n), n, 7, seed=0)
    sizes = np.bincount(parts, minlength=7)
    assert sizes.max() - sizes.min() <= 1
    # Computed for any subset of ids, in any order: the same parts.
    ids = np.random.default_rng(0).permutation(n)[:500]
    assert np.array_equal(hash_parts(ids, n, 7, seed=0), parts[ids])
    other = hash_parts(np.arange(n), n, 7, seed=1)
    assert 0.8 < np.mean(other != parts) < 0.9  # another seed: about 6/7 move
    # Not the ids' order: neighbours in id are no more often together than chance.
    assert abs(np.mean(parts[1:] == parts[:-1]) - 1 / 7) < 0.03
