"""partitioner=multilevel: deterministic, within its balance caps, near METIS's cut, the same
assignment whatever the rank count, and bad settings refused."""

from __future__ import annotations

import numpy as np
import pytest

from gnnrun.errors import GnnrunError
from gnnrun.partition.metis import (
    MetisPartitionerConfig,
    metis_adjacency,
    metis_partition,
    vertex_weights,
)
from gnnrun.partition.multilevel import MultilevelPartitionerConfig, multilevel_partition


def _cut(dataset, parts: np.ndarray) -> int:
    indptr, indices = metis_adjacency(dataset)
    rows = np.repeat(np.arange(dataset.num_nodes), np.diff(indptr))
    return int((parts[rows] != parts[indices]).sum())


def _loads(dataset, cfg, parts: np.ndarray) -> np.ndarray:
    """[parts, constraints]: each part's weight in each balance constraint."""
    weights = vertex_weights(dataset, cfg)
    out = np.zeros((cfg.num_parts, weights.shape[1]), dtype=np.int64)
    np.add.at(out, parts, weights)
    return out


def test_same_seed_same_parts_other_seed_other_parts(tiny):
    cfg = MultilevelPartitionerConfig(num_parts=4)
    first = multilevel_partition(tiny, cfg)
    again = multilevel_partition(tiny, MultilevelPartitionerConfig(num_parts=4))
    other = multilevel_partition(tiny, MultilevelPartitionerConfig(num_parts=4, seed=1))
    assert np.array_equal(first.parts, again.parts)
    assert not np.array_equal(first.parts, other.parts)
    assert first.info["levels"] >= 1 and first.info["coarse_vertices"][0] == tiny.num_nodes


def test_every_constraint_within_its_cap_and_the_cut_near_metis(tiny):
    """Each part holds at most 1.03 x its even share of vertices, edges and each split (or
    the even share and the heaviest vertex, where one vertex outweighs 3%), and the cut
    is far below random's and near METIS's."""
    cfg = MultilevelPartitionerConfig(num_parts=4)
    parts = multilevel_partition(tiny, cfg).parts
    loads = _loads(tiny, cfg, parts)
    weights = vertex_weights(tiny, cfg)
    even = weights.sum(axis=0) / 4
    caps = np.maximum(np.floor(even * 1.03), np.ceil(even) + weights.max(axis=0))
    assert np.all(loads <= caps), (loads / even).max(axis=0)
    assert sorted(np.unique(parts)) == [0, 1, 2, 3]
    metis = _cut(tiny, metis_partition(tiny, MetisPartitionerConfig(num_parts=4)).parts)
    random_cut = _cut(tiny, np.arange(tiny.num_nodes) % 4)
    assert _cut(tiny, parts) < 0.5 * random_cut and _cut(tiny, parts) < 1.6 * metis


def test_one_part_is_everything(tiny):
    parts = multilevel_partition(tiny, MultilevelPartitionerConfig(num_parts=1)).parts
    assert parts.shape == (tiny.num_nodes,) and not parts.any()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"imbalance": 1.0}, "partitioner.imbalance=1.0 must lie in"),
        ({"max_coarse_vertices": 50}, "partitioner.max_coarse_vertices=50 must be at least 30"),
        ({"coarsen_iterations": 0}, "partitioner.coarsen_iterations must be at least 1"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(GnnrunError, match=message):
        MultilevelPartitionerConfig(num_parts=4, **settings).validate()
