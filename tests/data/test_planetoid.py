from __future__ import annotations

import os
import pickle
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp

from gnnrun.data import build_dataset
from gnnrun.data.graph import is_symmetric
from gnnrun.data.planetoid import PlanetoidDatasetConfig, restricted_load
from gnnrun.errors import GnnrunError


def _cfg(raw_dir, name="cora"):
    return PlanetoidDatasetConfig(name=name, planetoid_name=name, raw_dir=str(raw_dir))


def test_cora_matches_published_statistics(shared_datasets):
    ds = build_dataset(_cfg(shared_datasets / "cora" / "raw"))
    assert ds.num_nodes == 2708
    assert ds.num_edges == 10556  # 5,278 undirected edges, both directions stored
    assert ds.feat.shape == (2708, 1433) and ds.feat.dtype == np.float32
    assert set(np.unique(ds.feat).tolist()) == {0.0, 1.0}  # raw binary, not normalised
    assert ds.num_classes == 7 and ds.task == "multiclass" and not ds.directed
    assert (ds.train_idx.size, ds.val_idx.size, ds.test_idx.size) == (140, 500, 1000)
    assert np.array_equal(ds.train_idx, np.arange(140))
    assert np.array_equal(ds.val_idx, np.arange(140, 640))
    assert np.array_equal(ds.test_idx, np.arange(1708, 2708))
    assert np.bincount(ds.label).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert np.bincount(ds.label[ds.train_idx]).tolist() == [20] * 7
    assert is_symmetric(ds.indptr, ds.indices)
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ds.indptr))
    assert not np.any(ds.indices == dst)  # no self-loops


def _dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _onehot(classes, num_classes):
    out = np.zeros((len(classes), num_classes), dtype=np.int32)
    out[np.arange(len(classes)), classes] = 1
    return out


def _write_citeseer_like(raw_dir, name="tiny"):
    """510 allx rows, 3 train, test ids 510..517 with gaps at 512 and 515 (isolated vertices)."""
    rng = np.random.default_rng(0)
    f, c, n_all = 6, 3, 510
    allx = (rng.random((n_all, f)) < 0.3).astype(np.float32)
    ally = _onehot(rng.integers(0, c, n_all), c)
    test_index = [513, 510, 517, 511, 516, 514]  # file order is not sorted; 512, 515 missing
    tx = (rng.random((len(test_index), f)) < 0.5).astype(np.float32)
    tx[:, 0] = np.arange(len(test_index)) + 2  # tag each test row so its destination is checkable
    ty = _onehot(rng.integers(0, c, len(test_index)), c)
    graph = defaultdict(list)
    for v in range(518):
        graph[v].append((v + 1) % 518)
    graph[512].append(512)  # a self-loop on an isolated-in-the-features vertex
    raw_dir.mkdir(parents=True, exist_ok=True)
    objects = {
        "x": sp.csr_matrix(allx[:3]),
        "y": ally[:3],
        "tx": sp.csr_matrix(tx),
        "ty": ty,
        "allx": sp.csr_matrix(allx),
        "ally": ally,
        "graph": graph,
    }
    for part, obj in objects.items():
        _dump(raw_dir / f"ind.{name}.{part}", obj)
    (raw_dir / f"ind.{name}.test.index").write_text("\n".join(map(str, test_index)) + "\n")
    return allx, ally, tx, ty, test_index


def test_citeseer_like_gaps_in_test_index(tmp_path):
    raw_dir = tmp_path / "raw"
    allx, ally, tx, ty, test_index = _write_citeseer_like(raw_dir)
    cfg = PlanetoidDatasetConfig(name="tiny", planetoid_name="citeseer", raw_dir=str(raw_dir))
    cfg.planetoid_name = "tiny"  # the file prefix; validate() is not run by build_dataset
    ds = build_dataset(cfg)

    assert ds.num_nodes == 518  # 510 + the full range 510..517
    for k, v in enumerate(test_index):
        assert np.array_equal(ds.feat[v], tx[k]), f"test row {k} must land on vertex {v}"
        assert ds.label[v] == np.argmax(ty[k])
    assert np.array_equal(ds.feat[:510], allx)
    assert np.array_equal(ds.label[:510], np.argmax(ally, axis=1))
    for gap in (512, 515):
        assert not ds.feat[gap].any()
        assert ds.label[gap] == -1
    assert np.array_equal(ds.test_idx, np.sort(test_index))
    assert np.array_equal(ds.train_idx, np.arange(3))
    assert np.array_equal(ds.val_idx, np.arange(3, 503))
    for idx in (ds.train_idx, ds.val_idx, ds.test_idx):
        assert not np.isin([512, 515], idx).any()
    assert ds.info["unlabelled_nodes"] == 2
    assert ds.num_edges == 2 * 518  # a ring, symmetrised; the self-loop is dropped
    assert is_symmetric(ds.indptr, ds.indices)


def test_missing_files_are_named(tmp_path):
    raw_dir = tmp_path / "raw"
    _write_citeseer_like(raw_dir, name="cora")
    (raw_dir / "ind.cora.graph").unlink()
    (raw_dir / "ind.cora.test.index").unlink()
    with pytest.raises(GnnrunError) as err:
        build_dataset(_cfg(raw_dir))
    message = str(err.value)
    assert "ind.cora.graph" in message and "ind.cora.test.index" in message
    assert "ind.cora.allx" not in message.split("place")[0]
    assert str(raw_dir) in message and "kimiyoung/planetoid" in message


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_refuses_forbidden_callables(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    _dump(evil, {"graph": _Exploit(marker)})
    with pytest.raises(GnnrunError, match="refusing"):
        restricted_load(evil)
    assert not marker.exists()

    # the same through the loader: a tampered graph file never runs
    raw_dir = tmp_path / "raw"
    _write_citeseer_like(raw_dir, name="cora")
    _dump(raw_dir / "ind.cora.graph", _Exploit(marker))
    with pytest.raises(GnnrunError, match="ind.cora.graph"):
        build_dataset(_cfg(raw_dir))
    assert not marker.exists()


def test_restricted_unpickler_refuses_other_globals(tmp_path):
    path = tmp_path / "other.pickle"
    _dump(path, {"f": eval})  # a builtin callable that is not on the allow list
    with pytest.raises(GnnrunError, match=r"refusing to load (__builtin__|builtins)\.eval"):
        restricted_load(path)


@pytest.mark.parametrize("part", ["allx", "graph", "test.index"])
def test_a_cut_file_is_one_line(tmp_path, part):
    raw_dir = tmp_path / "raw"
    _write_citeseer_like(raw_dir, name="cora")
    victim = raw_dir / f"ind.cora.{part}"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(raw_dir))
    message = str(failure.value)
    assert str(raw_dir) in message and "kimiyoung/planetoid" in message and "\n" not in message
    assert str(victim) in message or "cut short" in message
