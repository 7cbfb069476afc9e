from __future__ import annotations

import numpy as np
import pytest

from gnnrun.data import build_dataset
from gnnrun.data.graph import is_symmetric
from gnnrun.data.heterophilous import HeterophilousDatasetConfig
from gnnrun.errors import GnnrunError


def _cfg(file, split=0):
    return HeterophilousDatasetConfig(name="tolokers", file=str(file), split=split)


def _undirected_pairs(edges: np.ndarray, n: int) -> int:
    """Distinct undirected non-loop pairs in an E x 2 edge list."""
    a, b = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    keep = a != b
    keys = np.minimum(a, b)[keep] * n + np.maximum(a, b)[keep]
    return int(np.unique(keys).size)


def test_tolokers_statistics(shared_datasets):
    file = shared_datasets / "tolokers" / "tolokers.npz"
    ds = build_dataset(_cfg(file))
    with np.load(file) as raw:
        edges, train_masks = raw["edges"], raw["train_masks"]
        val_masks, test_masks = raw["val_masks"], raw["test_masks"]
    assert ds.num_nodes == 11758
    assert edges.shape == (519000, 2)
    pairs = _undirected_pairs(edges, ds.num_nodes)
    assert pairs == 519000  # the file lists each undirected edge once, no loops, no duplicates
    assert ds.num_edges == 2 * pairs == 1038000
    assert is_symmetric(ds.indptr, ds.indices) and not ds.directed
    assert ds.feat.shape == (11758, 10) and ds.feat.dtype == np.float32
    assert ds.num_classes == 2 and ds.task == "binary"
    assert np.array_equal(ds.train_idx, np.flatnonzero(train_masks[0]))
    assert np.array_equal(ds.val_idx, np.flatnonzero(val_masks[0]))
    assert np.array_equal(ds.test_idx, np.flatnonzero(test_masks[0]))
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == (5879, 2939, 2940)


def test_tolokers_split_selects_mask_row(shared_datasets):
    file = shared_datasets / "tolokers" / "tolokers.npz"
    with np.load(file) as raw:
        train_masks, test_masks = raw["train_masks"], raw["test_masks"]
    ds = build_dataset(_cfg(file, split=7))
    assert np.array_equal(ds.train_idx, np.flatnonzero(train_masks[7]))
    assert np.array_equal(ds.test_idx, np.flatnonzero(test_masks[7]))
    assert not np.array_equal(ds.train_idx, np.flatnonzero(train_masks[0]))
    with pytest.raises(GnnrunError, match="10 fixed splits"):
        build_dataset(_cfg(file, split=10))


def _write(path, num_classes=3, **overrides):
    rng = np.random.default_rng(0)
    n = 12
    arrays = {
        "node_features": rng.standard_normal((n, 4)).astype(np.float32),
        "node_labels": np.arange(n) % num_classes,
        "edges": np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 3], [5, 5]]),
        "train_masks": np.tile(np.arange(n) < 4, (3, 1)),
        "val_masks": np.tile((np.arange(n) >= 4) & (np.arange(n) < 8), (3, 1)),
        "test_masks": np.tile(np.arange(n) >= 8, (3, 1)),
    }
    arrays.update(overrides)
    np.savez(path, **arrays)


def test_multiclass_file_and_duplicates(tmp_path):
    path = tmp_path / "roman.npz"
    _write(path)
    ds = build_dataset(_cfg(path, split=2))
    assert ds.task == "multiclass" and ds.num_classes == 3
    assert ds.num_edges == 8  # triangle (6) + the pair 3-4 listed both ways (2); loop dropped
    assert ds.train_idx.tolist() == [0, 1, 2, 3]


def test_missing_file_and_keys(tmp_path):
    with pytest.raises(GnnrunError, match="not found.*GNNRUN_RAW_ROOT.*heterophilous-graphs"):
        build_dataset(_cfg(tmp_path / "nope.npz"))
    path = tmp_path / "bad.npz"
    np.savez(path, node_features=np.zeros((2, 2), np.float32))
    with pytest.raises(GnnrunError, match="lacks node_labels, edges"):
        build_dataset(_cfg(path))


@pytest.mark.parametrize("cut", [0.0, 0.5, 0.95], ids=["empty", "half", "tail"])
def test_a_cut_file_is_named_in_one_line(tmp_path, cut):
    path = tmp_path / "roman.npz"
    _write(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(path))
    message = str(failure.value)
    assert message.startswith(f"cannot read {path} as .npz") and "\n" not in message
    assert "download it again" in message


def test_sparse_class_ids_are_refused(tmp_path):
    path = tmp_path / "roman.npz"
    _write(path, node_labels=np.arange(12) * 1000)  # 11,001 classes for 12 vertices
    with pytest.raises(GnnrunError, match=r"labels run up to 11000 for 12 labelled vertices"):
        build_dataset(_cfg(path))


def test_a_file_that_is_not_a_zip_is_named_for_what_it_is(tmp_path):
    path = tmp_path / "tolokers.npz"
    path.write_text("<html>404 Not Found</html>\n")  # a download that went wrong
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(path))
    message = str(failure.value)
    assert message.startswith(
        f"cannot read {path} as .npz (it is text, not a zip archive): the file looks cut short "
        "or damaged; download it again"
    )
    assert "pickled" not in message
