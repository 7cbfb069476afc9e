from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gnnrun.data import build_dataset
from gnnrun.data.graph import is_symmetric
from gnnrun.data.musae import MusaeDatasetConfig
from gnnrun.data.registry import SplitFractions
from gnnrun.errors import GnnrunError


def _cfg(raw_dir, **kwargs):
    return MusaeDatasetConfig(name="facebook", raw_dir=str(raw_dir), **kwargs)


def test_facebook_statistics_and_determinism(shared_datasets):
    raw_dir = shared_datasets / "facebook_pagepage"
    ds = build_dataset(_cfg(raw_dir))

    edges = pd.read_csv(raw_dir / "facebook_edges.csv").to_numpy()
    assert edges.shape == (171002, 2)
    loops = edges[:, 0] == edges[:, 1]
    assert int(loops.sum()) == 179
    lo, hi = (
        np.minimum(edges[~loops, 0], edges[~loops, 1]),
        np.maximum(edges[~loops, 0], edges[~loops, 1]),
    )
    pairs = np.unique(lo * 22470 + hi).size
    assert ds.num_edges == 2 * pairs == 341646
    assert ds.info["self_loops_dropped"] == 179

    assert ds.num_nodes == 22470
    assert ds.num_classes == 4 and ds.task == "multiclass"
    assert ds.info["classes"] == ["company", "government", "politician", "tvshow"]
    assert np.bincount(ds.label).tolist() == [6495, 6880, 5768, 3327]
    assert ds.feat.shape == (22470, 128) and ds.feat.dtype == np.float32
    norms = np.linalg.norm(ds.feat.astype(np.float64), axis=0)  # = singular values
    assert np.all(np.diff(norms) <= 1e-3 * norms[0])
    assert is_symmetric(ds.indptr, ds.indices) and not ds.directed
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ds.indptr))
    assert not np.any(ds.indices == dst)

    # seeded stratified split with the default fractions 0.2 / 0.2 / 0.6, per class
    for c, count in enumerate(np.bincount(ds.label)):
        assert np.count_nonzero(ds.label[ds.train_idx] == c) == round(0.2 * count)
        assert np.count_nonzero(ds.label[ds.val_idx] == c) == round(0.2 * count)
    parts = np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx])
    assert np.unique(parts).size == parts.size
    assert abs(ds.test_idx.size / ds.num_nodes - 0.6) < 0.001

    again = build_dataset(_cfg(raw_dir))
    assert again.feat.tobytes() == ds.feat.tobytes()
    for name in ("indptr", "indices", "label", "train_idx", "val_idx", "test_idx"):
        assert np.array_equal(getattr(again, name), getattr(ds, name))


def _write_tiny(raw_dir, prefix="facebook"):
    rng = np.random.default_rng(1)
    n, f = 40, 12
    raw_dir.mkdir(parents=True, exist_ok=True)
    edges = rng.integers(0, n, size=(100, 2))
    edges[0] = [3, 3]
    pd.DataFrame(edges, columns=["id_1", "id_2"]).to_csv(
        raw_dir / f"{prefix}_edges.csv", index=False
    )
    features = {str(v): sorted(rng.choice(f, size=3, replace=False).tolist()) for v in range(n)}
    features["5"] = []  # a page without features
    (raw_dir / f"{prefix}_features.json").write_text(json.dumps(features))
    types = np.array(["tvshow", "company", "politician"])[np.arange(n) % 3]
    target = pd.DataFrame({"id": np.arange(n)[::-1], "page_type": types[::-1], "kind": "x"})
    target.to_csv(raw_dir / f"{prefix}_target.csv", index=False)
    bag = np.zeros((n, f), dtype=np.float32)
    for v, active in features.items():
        bag[int(v), active] = 1.0
    return bag, types


def test_tiny_dense_features_and_svd(tmp_path):
    bag, types = _write_tiny(tmp_path)
    dense = build_dataset(_cfg(tmp_path, feature_dim=0))
    assert np.array_equal(dense.feat, bag)
    assert dense.info["classes"] == ["company", "politician", "tvshow"]
    assert np.array_equal(np.array(dense.info["classes"])[dense.label], types)

    reduced = build_dataset(_cfg(tmp_path, feature_dim=4))
    exact = np.linalg.svd(bag.astype(np.float64), compute_uv=False)[:4]
    np.testing.assert_allclose(np.linalg.norm(reduced.feat, axis=0), exact, rtol=1e-5)
    # U*S spans the same space as the best rank-4 approximation's rows
    np.testing.assert_allclose(
        reduced.feat @ reduced.feat.T,
        _rank_k_gram(bag, 4),
        atol=1e-4,
    )


def _rank_k_gram(matrix, k):
    u, s, _ = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    us = u[:, :k] * s[:k]
    return us @ us.T


def test_tiny_split_fractions_and_seed(tmp_path):
    _write_tiny(tmp_path)
    cfg = _cfg(tmp_path, feature_dim=0, split=SplitFractions(0.5, 0.25, 0.25), seed=3)
    a = build_dataset(cfg)
    for c in range(3):  # classes of 14, 13, 13 pages; Python's round() halves to even
        count = np.count_nonzero(a.label == c)
        n_train, n_val = round(0.5 * count), round(0.25 * count)
        assert np.count_nonzero(a.label[a.train_idx] == c) == n_train
        assert np.count_nonzero(a.label[a.val_idx] == c) == n_val
        assert np.count_nonzero(a.label[a.test_idx] == c) == min(
            round(0.25 * count), count - n_train - n_val
        )
    b = build_dataset(_cfg(tmp_path, feature_dim=0, split=SplitFractions(0.5, 0.25, 0.25), seed=4))
    assert not np.array_equal(a.train_idx, b.train_idx)


def test_errors(tmp_path):
    with pytest.raises(GnnrunError, match="facebook_edges.csv.*MUSAE"):
        build_dataset(_cfg(tmp_path / "nowhere"))
    _write_tiny(tmp_path)
    (tmp_path / "facebook_features.json").unlink()
    with pytest.raises(GnnrunError) as err:
        build_dataset(_cfg(tmp_path))
    assert "missing facebook_features.json" in str(err.value)
    assert "GNNRUN_RAW_ROOT" in str(err.value)
    _write_tiny(tmp_path)
    with pytest.raises(GnnrunError, match="no column 'category'"):
        build_dataset(_cfg(tmp_path, label_column="category"))
    with pytest.raises(GnnrunError, match="feature_dim=12 must be below 12"):
        build_dataset(_cfg(tmp_path, feature_dim=12))


@pytest.mark.parametrize(
    ("suffix", "cut"),
    [("features.json", 0.5), ("edges.csv", 0.7), ("target.csv", 0.6), ("edges.csv", 0.0)],
    ids=["json-cut", "edges-cut", "target-cut", "edges-empty"],
)
def test_a_cut_file_is_named_in_one_line(tmp_path, suffix, cut):
    _write_tiny(tmp_path)
    victim = tmp_path / f"facebook_{suffix}"
    data = victim.read_bytes()
    victim.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(tmp_path, feature_dim=0))
    message = str(failure.value)
    assert str(victim) in message and "\n" not in message


def _sorted_target(raw_dir) -> None:
    """The target file in id order, as the published Facebook file is."""
    path = raw_dir / "facebook_target.csv"
    pd.read_csv(path).sort_values("id").to_csv(path, index=False)


def test_a_target_file_cut_at_a_line_end_is_blamed_not_the_edges(tmp_path):
    _write_tiny(tmp_path)
    _sorted_target(tmp_path)
    target = tmp_path / "facebook_target.csv"
    lines = target.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:21]))  # the header and vertices 0..19 of 40
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(tmp_path, feature_dim=0))
    message = str(failure.value)
    assert message.startswith(f"{target} lists 20 vertices (ids 0..19) but facebook_edges.csv ")
    assert "the target file looks cut short, download it again" in message


@pytest.mark.parametrize("cut", ["19,", "19"], ids=["label-gone", "comma-gone"])
def test_a_target_row_cut_short_is_damaged_not_a_class(tmp_path, cut):
    _write_tiny(tmp_path)
    _sorted_target(tmp_path)
    target = tmp_path / "facebook_target.csv"
    lines = target.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:20]) + cut)  # vertex 19's row cut short
    with pytest.raises(GnnrunError, match=r"facebook_target.csv \(vertex 19 has no page_type\)"):
        build_dataset(_cfg(tmp_path, feature_dim=0))


@pytest.mark.parametrize("feature_dim", [0, 4])
def test_a_huge_feature_id_is_refused_with_the_id_and_the_vertex_count(tmp_path, feature_dim):
    _write_tiny(tmp_path)
    features = tmp_path / "facebook_features.json"
    table = json.loads(features.read_text())
    table["7"] = [1, 999_999_999_999]
    features.write_text(json.dumps(table))
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(tmp_path, feature_dim=feature_dim))
    message = str(failure.value)
    assert message.startswith(
        f"cannot read {features} (feature id 999999999999 of vertex 7 is far beyond the 13 "
        "distinct feature ids of its 40 vertices: feature ids number the features 0..F-1, and "
        "this one would make 1,000,000,000,000 feature columns): the file looks cut short or "
        "damaged"
    ), message
