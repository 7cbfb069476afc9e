from __future__ import annotations

import numpy as np
import pytest

from gnnrun.data import build_dataset
from gnnrun.data.custom import CustomDatasetConfig
from gnnrun.data.graph import csr_from_edges, is_symmetric
from gnnrun.data.registry import SplitFractions
from gnnrun.errors import GnnrunError

N = 10
# a directed path 0->1->...->9, one duplicate (0->1 twice) and a self-loop (4->4)
SRC = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 4])
DST = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 4])
LABEL = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, -1])
FEAT = np.arange(N * 3, dtype=np.float64).reshape(N, 3)


def _cfg(path, to_undirected=True, **kwargs):
    return CustomDatasetConfig(name="mine", path=str(path), to_undirected=to_undirected, **kwargs)


def _in_csr(src, dst):
    """The in-CSR of (src, dst): row v lists the sources of v's in-edges."""
    return csr_from_edges(src, dst, N, symmetrize=False)


def _encodings():
    indptr, indices = _in_csr(SRC, DST)
    return {
        "edge_index": {"edge_index": np.stack([SRC, DST])},
        "edges": {"edges": np.stack([SRC, DST], axis=1)},
        "csr": {"indptr": indptr, "indices": indices},
    }


def _save(tmp_path, graph, **extra):
    path = tmp_path / "graph.npz"
    arrays = {**graph, "feat": FEAT, "label": LABEL, **extra}
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.parametrize("encoding", ["edge_index", "edges", "csr"])
def test_each_encoding_directed_and_undirected(tmp_path, encoding):
    path = _save(tmp_path, _encodings()[encoding])
    directed = build_dataset(_cfg(path, to_undirected=False))
    assert directed.directed and directed.num_edges == 9  # duplicate and self-loop dropped
    # in-CSR: row v lists the sources of v's in-edges, here the single predecessor v-1
    assert directed.indptr.tolist() == [0] + list(range(10))
    assert directed.indices.tolist() == list(range(9))
    assert directed.feat.dtype == np.float32 and np.array_equal(directed.feat, FEAT)
    assert directed.num_classes == 3 and directed.task == "multiclass"
    assert directed.info["graph_encoding"] == encoding

    undirected = build_dataset(_cfg(path))
    assert not undirected.directed and undirected.num_edges == 18
    assert is_symmetric(undirected.indptr, undirected.indices)


def test_without_split_stratified_and_seeded(tmp_path):
    path = _save(tmp_path, _encodings()["edges"])
    cfg = _cfg(path, split=SplitFractions(1 / 3, 1 / 3, 1 / 3), seed=5)
    ds = build_dataset(cfg)
    assert not ds.info["split_from_file"]
    for part in (ds.train_idx, ds.val_idx, ds.test_idx):
        assert sorted(LABEL[part].tolist()) == [0, 1, 2]  # one per class each
    assert 9 not in np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx])  # unlabelled
    again = build_dataset(cfg)
    assert np.array_equal(ds.train_idx, again.train_idx)


def test_split_as_ids_and_masks(tmp_path):
    graph = _encodings()["edge_index"]
    path = _save(
        tmp_path,
        graph,
        train_idx=np.array([3, 0, 1]),
        val_idx=np.array([4]),
        test_idx=np.array([8, 7]),
    )
    ds = build_dataset(_cfg(path))
    assert ds.info["split_from_file"]
    assert (
        ds.train_idx.tolist() == [0, 1, 3]
        and ds.val_idx.tolist() == [4]
        and ds.test_idx.tolist() == [7, 8]
    )
    masks = {name: np.zeros(N, bool) for name in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][[0, 2]] = True
    masks["val_mask"][5] = True
    masks["test_mask"][[6, 8]] = True
    ds = build_dataset(_cfg(_save(tmp_path, graph, **masks)))
    assert (
        ds.train_idx.tolist() == [0, 2]
        and ds.val_idx.tolist() == [5]
        and ds.test_idx.tolist() == [6, 8]
    )


def test_binary_task_and_num_nodes(tmp_path):
    label = np.array([0, 1] * 5)
    path = _save(tmp_path, _encodings()["edges"], label=label, num_nodes=np.array(N))
    ds = build_dataset(_cfg(path))
    assert ds.task == "binary" and ds.num_classes == 2


def _error(tmp_path, match, graph=None, **extra):
    graph = _encodings()["edge_index"] if graph is None else graph
    path = _save(tmp_path, graph, **extra)
    with pytest.raises(GnnrunError, match=match):
        build_dataset(_cfg(path))


def test_missing_file(tmp_path):
    with pytest.raises(GnnrunError, match="nope.npz not found; set dataset.path"):
        build_dataset(_cfg(tmp_path / "nope.npz"))


def test_missing_keys(tmp_path):
    _error(
        tmp_path, r"no graph found \(keys present: feat, label\).*edge_index \(2 x E\)", graph={}
    )
    _error(tmp_path, r"label missing \(keys present: edge_index, feat\)", label=None)
    _error(
        tmp_path,
        "a CSR needs both indptr and indices, indices is missing",
        graph={"indptr": np.zeros(N + 1, int)},
    )
    _error(
        tmp_path,
        "several graph encodings",
        graph={**_encodings()["edges"], **_encodings()["edge_index"]},
    )
    _error(
        tmp_path,
        "split is incomplete: test_idx missing",
        train_idx=np.array([0]),
        val_idx=np.array([1]),
    )
    _error(tmp_path, "mixes split ids", train_idx=np.array([0]), val_mask=np.ones(N, bool))


def test_wrong_shapes(tmp_path):
    _error(
        tmp_path,
        r"edge_index has shape \(11, 2\), expected \(2, E\)",
        graph={"edge_index": np.stack([SRC, DST], 1)},
    )
    _error(
        tmp_path,
        r"edges has shape \(2, 11\), expected \(E, 2\)",
        graph={"edges": np.stack([SRC, DST])},
    )
    _error(tmp_path, r"feat has shape \(10,\), expected \(N, F\)", feat=np.zeros(N))
    _error(tmp_path, r"label has shape \(9,\), expected \(10,\)", label=LABEL[:9])
    _error(tmp_path, "label has dtype float64, expected integers", label=LABEL.astype(float))
    _error(
        tmp_path,
        "indptr describes 9 vertices but feat has 10 rows",
        graph={"indptr": np.zeros(N, int), "indices": np.zeros(0, int)},
    )
    _error(
        tmp_path,
        "indptr must start at 0",
        graph={"indptr": np.full(N + 1, 1), "indices": np.zeros(0, int)},
    )
    _error(tmp_path, r"num_nodes is 12 but feat has 10 rows", num_nodes=np.array(12))
    _error(
        tmp_path,
        r"train_mask has shape \(9,\)",
        train_mask=np.ones(9, bool),
        val_mask=np.ones(N, bool),
        test_mask=np.ones(N, bool),
    )


def test_out_of_range(tmp_path):
    _error(tmp_path, "label has values below -1", label=np.full(N, -2))
    _error(tmp_path, "no vertex has a label", label=np.full(N, -1))
    _error(
        tmp_path, r"edges has vertex ids outside \[0, 10\)", graph={"edges": np.array([[0, 10]])}
    )
    _error(
        tmp_path, r"edge_index has vertex ids outside", graph={"edge_index": np.array([[-1], [0]])}
    )
    _error(
        tmp_path,
        r"indices|csr has vertex ids outside",
        graph={"indptr": np.r_[0, np.ones(N, int)], "indices": np.array([99])},
    )
    split = {"val_idx": np.array([1]), "test_idx": np.array([2])}
    _error(
        tmp_path,
        r"train_idx has vertex ids outside \[0, 10\) \(min 0, max 10\)",
        train_idx=np.array([0, 10]),
        **split,
    )
    _error(tmp_path, r"train_idx has vertex ids outside", train_idx=np.array([-1]), **split)
    _error(tmp_path, "train_idx holds 1 unlabelled vertices", train_idx=np.array([9]), **split)
    _error(
        tmp_path,
        "train_idx and test_idx share 1 vertices",
        train_idx=np.array([2]),
        val_idx=np.array([1]),
        test_idx=np.array([2]),
    )


def test_object_arrays_refused(tmp_path):
    path = tmp_path / "graph.npz"
    np.savez(
        path,
        edges=np.array([[0, 1]]),
        feat=np.array([{"a": 1}], dtype=object),
        label=np.zeros(1, int),
    )
    with pytest.raises(GnnrunError, match="no object arrays"):
        build_dataset(_cfg(path))


def test_a_changed_file_is_prepared_again_a_moved_one_is_not(tmp_path, capsys):
    from gnnrun.data import prepare_dataset

    path = _save(tmp_path, _encodings()["edges"])
    cfg = CustomDatasetConfig(
        name="mine", path=str(path), prepared_dir=str(tmp_path / "prepared" / "mine")
    )
    assert prepare_dataset(cfg).num_nodes == N
    three = {"edges": np.array([[0, 1], [1, 2]]), "feat": np.eye(3), "label": np.array([0, 1, 0])}
    np.savez(path, **three)  # rewritten in place, same name
    assert prepare_dataset(cfg).num_nodes == 3
    assert f"{path} changed since it was prepared" in " ".join(capsys.readouterr().err.split())
    moved = tmp_path / "elsewhere.npz"
    path.rename(moved)
    moved.touch()  # a new mtime, the same content
    again = prepare_dataset(CustomDatasetConfig(**{**cfg.__dict__, "path": str(moved)}))
    assert again.num_nodes == 3 and "preparing it again" not in capsys.readouterr().err


def test_a_missing_or_other_file_never_takes_the_copy_of_the_one_prepared(tmp_path, capsys):
    """The prepared copy stands when its own file was deleted, not for another name: a typo
    in dataset.path must not train on the graph prepared before."""
    from gnnrun.data import prepare_dataset

    path = _save(tmp_path, _encodings()["edges"])
    cfg = _prepared_cfg(tmp_path, path)
    prepare_dataset(cfg)
    typo = tmp_path / "grpah.npz"
    with pytest.raises(GnnrunError, match=f"custom dataset file {typo} not found"):
        prepare_dataset(CustomDatasetConfig(**{**cfg.__dict__, "path": str(typo)}))
    assert f"it was prepared from {path.name}, and {typo} does not exist" in " ".join(
        capsys.readouterr().err.split()
    )
    other = tmp_path / "other.npz"
    np.savez(other, edges=np.array([[0, 1], [1, 2]]), feat=np.eye(3), label=np.array([0, 1, 0]))
    assert (
        prepare_dataset(CustomDatasetConfig(**{**cfg.__dict__, "path": str(other)})).num_nodes == 3
    )
    assert f"it was prepared from {path.name}, not other.npz" in " ".join(
        capsys.readouterr().err.split()
    )
    other.unlink()  # the prepared copy of a deleted file stands under the file's own name
    assert (
        prepare_dataset(CustomDatasetConfig(**{**cfg.__dict__, "path": str(other)})).num_nodes == 3
    )


def test_labels_far_beyond_the_vertex_count_are_refused(tmp_path):
    path = _save(tmp_path, _encodings()["edges"], label=np.where(LABEL == 2, 10**9, LABEL))
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(path))
    assert str(failure.value) == (
        f"custom dataset {path}: labels run up to 1000000000 for 9 labelled vertices "
        "(3 distinct values), which would make 1000000001 classes: renumber them 0..C-1 and "
        "keep -1 for unlabelled vertices, e.g. label[label >= 0] = "
        "numpy.unique(label[label >= 0], return_inverse=True)[1]"
    )


def test_more_classes_than_labelled_vertices_are_refused(tmp_path):
    label = np.full(N, -1)
    label[[0, 1, 2]] = [0, 4, 8]  # 9 classes for 3 labelled vertices, fewer than N = 10
    path = _save(tmp_path, _encodings()["edges"], label=label)
    with pytest.raises(GnnrunError, match=r"labels run up to 8 for 3 labelled vertices \(3 dis"):
        build_dataset(_cfg(path))
    label[[0, 1, 2]] = [0, 1, 1]  # two classes for three labelled vertices: fine
    assert build_dataset(_cfg(_save(tmp_path, _encodings()["edges"], label=label))).task == (
        "binary"
    )


def _prepared_cfg(tmp_path, path):
    return CustomDatasetConfig(
        name="mine", path=str(path), prepared_dir=str(tmp_path / "prepared" / "mine")
    )


def test_load_prepared_refuses_a_copy_whose_file_changed(tmp_path):
    from gnnrun.data import load_prepared, prepare_dataset

    path = _save(tmp_path, _encodings()["edges"])
    cfg = _prepared_cfg(tmp_path, path)
    prepare_dataset(cfg)
    assert load_prepared(cfg).num_nodes == N
    np.savez(path, edges=np.array([[0, 1], [1, 2]]), feat=np.eye(3), label=np.array([0, 1, 0]))
    with pytest.raises(
        GnnrunError,
        match=rf"out of date: {path} changed since it was prepared .*gnnrun data prepare "
        rf"dataset=custom dataset.name=mine dataset.path={path}` again",
    ):
        load_prepared(cfg)  # a rank: refuses rather than train on the old graph
    assert prepare_dataset(cfg).num_nodes == 3 and load_prepared(cfg).num_nodes == 3


def test_a_touched_file_is_kept_and_hashed_at_every_prepare(tmp_path, monkeypatch):
    import os

    import gnnrun.data.prepare as prepare_module
    from gnnrun.data import load_prepared, prepare_dataset

    path = _save(tmp_path, _encodings()["edges"])
    cfg = _prepared_cfg(tmp_path, path)
    first = prepare_dataset(cfg)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched, same bytes
    hashed = []
    real = prepare_module.sha256_file
    monkeypatch.setattr(prepare_module, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert prepare_dataset(cfg).checksum == first.checksum  # kept, not prepared again
    assert hashed == [path]
    prepare_dataset(cfg)
    assert hashed == [path, path]  # under 1 GiB: hashed every time
    load_prepared(cfg)
    assert hashed == [path, path]  # ranks trust the launcher's check (size and mtime)


def _rewrite_keeping_stamp(path, write) -> None:
    """Rewrite `path` with `write(path)`, then put its old modification time back
    (as `cp --preserve=timestamps other mine` does); the size must come out the same."""
    import os

    stat = path.stat()
    write(path)
    assert path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_rewrite_of_the_same_size_and_mtime_is_prepared_again(tmp_path, capsys):
    from gnnrun.data import prepare_dataset

    path = _save(tmp_path, _encodings()["edges"])
    cfg = _prepared_cfg(tmp_path, path)
    first = prepare_dataset(cfg)
    (tmp_path / "other").mkdir()
    other = _save(tmp_path / "other", _encodings()["edges"], label=LABEL[::-1].copy())
    _rewrite_keeping_stamp(path, lambda p: p.write_bytes(other.read_bytes()))
    again = prepare_dataset(cfg)
    assert again.checksum != first.checksum
    assert np.array_equal(again.label, LABEL[::-1])
    assert "same size, other content" in capsys.readouterr().err


def test_a_small_prepared_file_zeroed_with_its_mtime_kept_is_refused(tmp_path):
    from gnnrun.data import load_prepared, prepare_dataset
    from gnnrun.data.dataset import GraphDataset

    cfg = _prepared_cfg(tmp_path, _save(tmp_path, _encodings()["edges"]))
    prepare_dataset(cfg)
    label = tmp_path / "prepared" / "mine" / "label.npy"
    GraphDataset.load(label.parent)  # verified and remembered
    _rewrite_keeping_stamp(label, lambda p: np.save(p, np.zeros_like(np.load(p))))
    with pytest.raises(GnnrunError, match=r"label.npy does not match its checksum .*--force"):
        load_prepared(cfg)


def test_a_deleted_input_keeps_the_prepared_copy(tmp_path, capsys):
    from gnnrun.data import load_prepared, prepare_dataset

    path = _save(tmp_path, _encodings()["edges"])
    cfg = _prepared_cfg(tmp_path, path)
    first = prepare_dataset(cfg)
    path.unlink()  # raw files removed after preparing, to save space
    assert prepare_dataset(cfg).checksum == first.checksum
    assert load_prepared(cfg).checksum == first.checksum
    assert "preparing it again" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, what",
    [
        (b"edge_index,feat,label\n0,1,2\n", "text"),
        (b"", "empty"),
        (b"PK\x03\x04 cut short", "a damaged or cut short zip archive"),
        (b"\x80\x04\x95 pickled", "a Python pickle"),
        (None, "a single .npy array (numpy.save)"),
    ],
)
def test_a_npz_that_is_not_a_zip_is_named_for_what_it_is(tmp_path, content, what):
    path = tmp_path / "graph.npz"
    if content is None:
        with open(path, "wb") as f:
            np.save(f, FEAT)
    else:
        path.write_bytes(content)
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(path))
    message = str(failure.value)
    assert message == (
        f"cannot read {path} as a .npz: it is {what}, not a zip archive of .npy arrays; write it "
        "with numpy.savez (or savez_compressed), or set dataset.path to a folder of .npy files"
    )
    assert "pickled" not in message


def test_a_npy_in_a_folder_that_is_not_one_is_named(tmp_path):
    folder = tmp_path / "graph"
    folder.mkdir()
    np.save(folder / "edge_index.npy", np.stack([SRC, DST]))
    (folder / "label.npy").write_text("0 1 2\n")
    with pytest.raises(GnnrunError) as failure:
        build_dataset(_cfg(folder))
    assert str(failure.value) == (
        f"cannot read {folder / 'label.npy'} as a .npy: it is text, not a numpy array file; "
        "write it with numpy.save"
    )


def test_a_two_dimensional_label_is_a_multi_label_dataset(tmp_path):
    """An N x C label: C binary labels per vertex, -1 where unknown; a vertex with none known
    is left out of the drawn split; other values are refused in one line."""
    labels = np.random.default_rng(1).integers(0, 2, size=(N, 3))
    labels[0] = -1  # nothing known: unlabelled
    labels[1, 2] = -1
    ds = build_dataset(_cfg(_save(tmp_path, _encodings()["edges"], label=labels)))
    assert ds.task == "multilabel" and ds.num_classes == 3
    assert np.array_equal(ds.label, labels)
    split = np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx])
    assert 0 not in split and 1 in split
    labels[2, 1] = 2
    with pytest.raises(GnnrunError, match="0, 1 or -1 where unknown"):
        build_dataset(_cfg(_save(tmp_path, _encodings()["edges"], label=labels)))
