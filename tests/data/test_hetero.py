"""The heterogeneous prepared format: homogenised ids, the typed CSR, its invariants, saving
and loading, and the synthetic MAG-shaped generator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges
from gnnrun.data.hetero import HeteroSchema, relation_indptr, typed_csr
from gnnrun.data.synthetic_hetero import SyntheticHeteroConfig, generate
from gnnrun.errors import GnnrunError


@pytest.fixture(scope="module")
def tiny() -> GraphDataset:
    return generate(SyntheticHeteroConfig(name="tiny", num_papers=300, num_classes=4, feat_dim=5))


def test_ids_round_trip_per_type(tiny):
    schema = tiny.hetero
    for t, count in enumerate(schema.type_counts):
        typed = np.arange(count)
        ids = schema.to_homogeneous(schema.node_types[t], typed)
        assert ids.min() == schema.offsets[t] and ids.max() == schema.offsets[t + 1] - 1
        types, back = schema.to_typed(ids)
        assert np.all(types == t) and np.array_equal(back, typed)
    assert np.array_equal(
        schema.type_of(np.arange(tiny.num_nodes)),
        np.repeat(np.arange(schema.num_types), schema.type_counts),
    )


def test_typed_csr_keeps_every_edge_with_its_relation_listed_by_relation():
    schema = HeteroSchema(
        ["a", "b"], [3, 2], [2, 0], [("a", "x", "b"), ("b", "y", "a"), ("a", "z", "a")], "a"
    )
    edges = {
        ("a", "x", "b"): (np.array([0, 2, 2, 0]), np.array([1, 0, 0, 1])),  # one repeat
        ("b", "y", "a"): (np.array([1, 0]), np.array([2, 2])),
        ("a", "z", "a"): (np.array([1, 0, 2]), np.array([2, 0, 2])),  # a self-loop (0 -> 0)
    }
    indptr, indices, edge_type = typed_csr(schema, edges)
    dst = np.repeat(np.arange(5), np.diff(indptr))
    stored = set(zip(indices.tolist(), dst.tolist(), edge_type.tolist(), strict=True))
    assert stored == {(0, 4, 0), (2, 3, 0), (4, 2, 1), (3, 2, 1), (1, 2, 2)}
    assert indices.size == 5  # the repeat and the self-loop are gone
    by_row = relation_indptr(indptr, edge_type, schema.num_relations)
    # Row v * R + r lists relation r's in-edges of v: vertex 2 (type a) has y from 3 and 4.
    assert sorted(indices[by_row[2 * 3 + 1] : by_row[2 * 3 + 2]].tolist()) == [3, 4]
    assert indices[by_row[2 * 3 + 2] : by_row[2 * 3 + 3]].tolist() == [1]


def test_one_type_one_relation_has_the_homogeneous_bytes():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 300), rng.integers(0, 50, 300)
    schema = HeteroSchema(["v"], [50], [4], [("v", "e", "v")], "v")
    both = (np.concatenate([src, dst]), np.concatenate([dst, src]))
    indptr, indices, edge_type = typed_csr(schema, {("v", "e", "v"): both})
    plain_indptr, plain_indices = csr_from_edges(src, dst, 50, symmetrize=True)
    assert indptr.tobytes() == plain_indptr.tobytes()
    assert indices.tobytes() == plain_indices.tobytes()
    assert np.all(edge_type == 0)
    assert np.array_equal(relation_indptr(indptr, edge_type, 1), indptr)


def test_saved_and_loaded_with_types_features_and_relations(tiny, tmp_path):
    tiny.save(tmp_path / "d")
    loaded = GraphDataset.load(tmp_path / "d", verify=True)
    assert loaded.hetero == tiny.hetero
    assert np.array_equal(loaded.edge_type, tiny.edge_type)
    assert loaded.typed_feat[1:] == [None, None, None]
    assert np.array_equal(loaded.typed_feat[0], tiny.typed_feat[0])
    assert loaded.feat.shape == (tiny.num_nodes, 0)
    statistics = loaded.statistics()["heterogeneous"]
    assert statistics["node_types"]["paper"] == {"vertices": 300, "feat_dim": 5}
    assert sum(statistics["relations"].values()) == tiny.num_edges


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: {"edge_type": np.roll(d.edge_type, 1)}, "do not join the vertex types"),
        (lambda d: {"typed_feat": [None] * 4}, "type 'paper' has features of shape None"),
        (
            lambda d: {"label": np.where(np.arange(d.num_nodes) == d.num_nodes - 1, 0, d.label)},
            "outside the target type",
        ),
        (
            lambda d: {"hetero": dataclasses.replace(d.hetero, type_counts=[300, 450, 4, 23])},
            "are not the",
        ),
    ],
)
def test_broken_invariants_are_named(tiny, change, message):
    broken = dataclasses.replace(tiny, **change(tiny))
    with pytest.raises(GnnrunError, match=message):
        broken.validate()


def test_synthetic_hetero_is_deterministic_and_mag_shaped():
    cfg = SyntheticHeteroConfig(name="t", num_papers=400, num_classes=4, feat_dim=3)
    first, second = generate(cfg), generate(cfg)
    for name, array in first.arrays().items():
        assert np.array_equal(array, second.arrays()[name]), name
    schema = first.hetero
    assert schema.node_types == ["paper", "author", "institution", "field"]
    assert len(schema.relations) == 8 and schema.target == "paper"
    counts = np.bincount(first.edge_type.astype(np.int64), minlength=8)
    assert np.array_equal(counts[:4], counts[4:])  # every relation has its reverse
    assert set(np.flatnonzero(first.label >= 0)) == set(range(400))  # papers only


def test_types_with_fewer_vertices_than_classes_are_generated():
    """100 papers with 16 classes give 8 fields: classes without a field draw from all."""
    dataset = generate(SyntheticHeteroConfig(name="t", num_papers=100, num_classes=16))
    dataset.validate()
    assert dataset.hetero.type_counts[3] == 8 and dataset.num_edges > 0
