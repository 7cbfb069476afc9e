from __future__ import annotations

import numpy as np
import pytest

from gnnrun.data import build_dataset, load_prepared, prepare_dataset
from gnnrun.data.custom import CustomDatasetConfig
from gnnrun.data.registry import SplitFractions
from gnnrun.errors import GnnrunError

# A small bibliographic graph. The target type is not the first one, so its ids are offset.
NODE_TYPES = ["author", "paper", "field"]
WRITES = np.array([[0, 0, 1, 2, 3, 3], [0, 1, 1, 2, 3, 5]])  # author -> paper; author 4 alone
# paper -> paper, with a repeated edge (0 -> 1) and a self-loop (4 -> 4), both dropped
CITES = np.array([[0, 0, 2, 3, 5, 4], [1, 1, 1, 2, 0, 4]])
HAS_TOPIC = np.array([[0, 1, 2, 4, 5], [0, 0, 1, 1, 0]])  # paper -> field
GIVEN = {
    ("author", "writes", "paper"): WRITES,
    ("paper", "cites", "paper"): CITES,
    ("paper", "has_topic", "field"): HAS_TOPIC,
}
FEAT_PAPER = np.arange(18, dtype=np.float64).reshape(6, 3)
FEAT_FIELD = np.array([[1.0, 0.0], [0.0, 1.0]])
LABEL = np.array([0, 1, 2, 0, 1, -1])  # of the 6 papers


def _arrays(**changes):
    """The graph as the arrays of the documented layout; None in `changes` removes one."""
    arrays = {
        "node_types": np.array(NODE_TYPES),
        "target": np.array("paper"),
        "num_nodes__author": np.array(5),
        "feat__paper": FEAT_PAPER,
        "feat__field": FEAT_FIELD,
        "label": LABEL,
    }
    for (s, r, d), edge_index in GIVEN.items():
        arrays[f"edge_index__{s}__{r}__{d}"] = edge_index
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


def _save_npz(tmp_path, arrays, name="graph.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def _save_dir(tmp_path, arrays, name="graph"):
    path = tmp_path / name
    path.mkdir()
    for key, value in arrays.items():
        np.save(path / f"{key}.npy", value)
    return path


def _cfg(path, to_undirected=True, **kwargs):
    return CustomDatasetConfig(name="mine", path=str(path), to_undirected=to_undirected, **kwargs)


def _build(tmp_path, to_undirected=True, **changes):
    return build_dataset(_cfg(_save_npz(tmp_path, _arrays(**changes)), to_undirected))


def _stored_edges(ds):
    """{(relation, homogenised source, homogenised destination)} of the CSR."""
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ds.indptr))
    return set(zip(ds.edge_type.tolist(), ds.indices.tolist(), dst.tolist(), strict=True))


def _expected_edges(schema, edges):
    """The stored edges `edges` ({relation: 2 x E typed ids}) make: self-loops and repeats gone."""
    expected = set()
    for relation, (src, dst) in edges.items():
        r = schema.relations.index(relation)
        for u, v in zip(
            schema.to_homogeneous(relation[0], src).tolist(),
            schema.to_homogeneous(relation[2], dst).tolist(),
            strict=True,
        ):
            if u != v:
                expected.add((r, u, v))
    return expected


def _reversed(given):
    return {(d, f"rev_{r}", s): edge_index[::-1] for (s, r, d), edge_index in given.items()}


def test_npz_and_directory_give_the_same_prepared_dataset(tmp_path):
    from_npz = prepare_dataset(
        _cfg(_save_npz(tmp_path, _arrays()), prepared_dir=str(tmp_path / "p1"))
    )
    from_dir = prepare_dataset(
        _cfg(_save_dir(tmp_path, _arrays()), prepared_dir=str(tmp_path / "p2"))
    )
    assert from_npz.checksum == from_dir.checksum  # the digest of every array
    assert from_npz.hetero == from_dir.hetero
    assert from_npz.info["config"] == from_dir.info["config"]
    arrays_npz, arrays_dir = from_npz.arrays(), from_dir.arrays()
    assert arrays_npz.keys() == arrays_dir.keys()
    for name, array in arrays_npz.items():
        assert np.array_equal(array, arrays_dir[name]), name
        assert array.dtype == arrays_dir[name].dtype, name
    assert len(from_dir.info["inputs"]) == len(_arrays())  # every .npy file it read
    assert len(from_npz.info["inputs"]) == 1


def test_schema_type_ranges_and_relations(tmp_path):
    ds = _build(tmp_path)
    schema = ds.hetero
    assert schema.node_types == NODE_TYPES and schema.target == "paper"
    assert schema.type_counts == [5, 6, 2]  # author from num_nodes, paper and field from feat
    assert schema.offsets.tolist() == [0, 5, 11, 13] and ds.num_nodes == 13
    given = sorted(GIVEN)  # given relations first, in sorted order, then their reverses
    assert schema.relations == given + [(d, f"rev_{r}", s) for s, r, d in given]
    assert ds.directed and ds.info["graph_encoding"] == "heterogeneous"


@pytest.mark.parametrize("to_undirected", [True, False])
def test_every_given_edge_is_stored_with_its_relation(tmp_path, to_undirected):
    ds = _build(tmp_path, to_undirected)
    schema = ds.hetero
    edges = {**GIVEN, **(_reversed(GIVEN) if to_undirected else {})}
    assert _stored_edges(ds) == _expected_edges(schema, edges)
    assert ds.num_edges == len(_expected_edges(schema, edges))  # each stored once
    # the ids round-trip between the homogenised and the typed id spaces
    for (s, r, d), (src, dst) in GIVEN.items():
        rows = [
            (rel, u, v)
            for rel, u, v in _stored_edges(ds)
            if rel == schema.relations.index((s, r, d))
        ]
        u = np.array([row[1] for row in rows])
        v = np.array([row[2] for row in rows])
        src_type, src_typed = schema.to_typed(u)
        dst_type, dst_typed = schema.to_typed(v)
        assert set(src_type.tolist()) <= {schema.type_index(s)}
        assert set(dst_type.tolist()) <= {schema.type_index(d)}
        typed_pairs = set(zip(src_typed.tolist(), dst_typed.tolist(), strict=True))
        given_pairs = zip(src.tolist(), dst.tolist(), strict=True)
        assert typed_pairs == {(a, b) for a, b in given_pairs if s != d or a != b}
        assert np.array_equal(schema.to_homogeneous(s, src_typed), u)
        assert np.array_equal(schema.to_homogeneous(d, dst_typed), v)


def test_reverse_relations_only_with_to_undirected(tmp_path):
    directed = _build(tmp_path, to_undirected=False)
    assert directed.hetero.relations == sorted(GIVEN)
    undirected = _build(tmp_path)
    names = undirected.hetero.relation_names()
    assert {"rev_writes", "rev_cites", "rev_has_topic"} <= set(names) and len(names) == 6
    # the reverse of paper -cites-> paper is a relation of its own, in the other direction
    cites = undirected.hetero.relations.index(("paper", "cites", "paper"))
    rev_cites = undirected.hetero.relations.index(("paper", "rev_cites", "paper"))
    stored = _stored_edges(undirected)
    forward = {(u, v) for r, u, v in stored if r == cites}
    backward = {(u, v) for r, u, v in stored if r == rev_cites}
    assert backward == {(v, u) for u, v in forward} and forward != backward


def test_a_given_reverse_is_not_added_again(tmp_path):
    rev_writes = np.array([[1, 2], [0, 3]])  # paper -> author, not the mirror of WRITES
    ds = _build(tmp_path, **{"edge_index__paper__rev_writes__author": rev_writes})
    schema = ds.hetero
    assert schema.relations.count(("paper", "rev_writes", "author")) == 1
    assert ("author", "writes", "paper") in schema.relations
    assert not [r for r in schema.relation_names() if r.startswith("rev_rev")]
    r = schema.relations.index(("paper", "rev_writes", "author"))
    assert {(u, v) for rel, u, v in _stored_edges(ds) if rel == r} == {(6, 0), (7, 3)}
    # a relation given only as rev_<name> gets <name> as its reverse
    ds = _build(
        tmp_path,
        **{
            "edge_index__author__writes__paper": None,
            "edge_index__paper__rev_writes__author": rev_writes,
        },
    )
    assert ("author", "writes", "paper") in ds.hetero.relations
    assert len(ds.hetero.relations) == 6


def test_features_on_their_types(tmp_path):
    ds = _build(tmp_path)
    schema = ds.hetero
    assert schema.feat_dims == [0, 3, 2]
    assert ds.feat.shape == (13, 0)
    author, paper, field = ds.typed_feat
    assert author is None
    assert paper.dtype == np.float32 and np.array_equal(paper, FEAT_PAPER)
    assert field.dtype == np.float32 and np.array_equal(field, FEAT_FIELD)
    # without any features every type is featureless
    bare = _build(tmp_path, feat__paper=None, feat__field=None, num_nodes__field=np.array(2))
    assert bare.hetero.feat_dims == [0, 0, 0] and bare.typed_feat == [None, None, None]


def test_counts_inferred_from_label_and_edges_and_types_sorted_without_node_types(tmp_path):
    ds = _build(
        tmp_path, node_types=None, num_nodes__author=None, feat__paper=None, feat__field=None
    )
    schema = ds.hetero
    assert schema.node_types == ["author", "field", "paper"]  # sorted
    # author: its largest id + 1 (author 4 has no edge: gone); field: from edges; paper: label
    assert schema.type_counts == [4, 2, 6]


def test_labels_and_split_on_the_target(tmp_path):
    split = {"train_idx": np.array([3, 0]), "val_idx": np.array([1]), "test_idx": np.array([2])}
    ds = _build(tmp_path, **split)
    offset = 5  # the papers follow the 5 authors
    assert ds.label.tolist() == [-1] * 5 + LABEL.tolist() + [-1, -1]
    assert ds.num_classes == 3 and ds.task == "multiclass"
    assert ds.info["split_from_file"]
    assert ds.train_idx.tolist() == [0 + offset, 3 + offset]
    assert ds.val_idx.tolist() == [1 + offset] and ds.test_idx.tolist() == [2 + offset]
    masks = {k: np.zeros(6, bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][[0, 4]] = True
    masks["val_mask"][2] = True
    masks["test_mask"][3] = True
    ds = _build(tmp_path, **masks)
    assert ds.train_idx.tolist() == [5, 9] and ds.val_idx.tolist() == [7]
    assert ds.test_idx.tolist() == [8]


def test_drawn_split_is_stratified_seeded_and_within_the_target(tmp_path):
    cfg = _cfg(_save_npz(tmp_path, _arrays()), split=SplitFractions(0.4, 0.2, 0.4), seed=3)
    ds = build_dataset(cfg)
    assert not ds.info["split_from_file"]
    parts = np.concatenate([ds.train_idx, ds.val_idx, ds.test_idx])
    schema = ds.hetero
    assert np.all(schema.type_of(parts) == schema.target_type)
    assert np.all(ds.label[parts] >= 0) and ds.train_idx.size > 0
    assert np.unique(parts).size == parts.size
    assert np.array_equal(build_dataset(cfg).train_idx, ds.train_idx)


def test_prepared_copy_loads_back(tmp_path):
    cfg = _cfg(_save_dir(tmp_path, _arrays()), prepared_dir=str(tmp_path / "prepared"))
    ds = prepare_dataset(cfg)
    loaded = load_prepared(cfg)
    assert loaded.hetero == ds.hetero
    assert np.array_equal(loaded.typed_feat[1], FEAT_PAPER)
    assert loaded.typed_feat[0] is None


def test_one_type_one_relation_is_the_homogeneous_graph(tmp_path):
    n = 10
    src = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 4, 9, 2])
    dst = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 4, 0, 7])
    label = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, -1])
    feat = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    homogeneous = build_dataset(
        _cfg(
            _save_npz(
                tmp_path,
                {"edge_index": np.stack([src, dst]), "feat": feat, "label": label},
                "h.npz",
            )
        )
    )
    both = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    hetero = build_dataset(
        _cfg(
            _save_npz(
                tmp_path,
                {
                    "edge_index__v__links__v": both,
                    "target": np.array("v"),
                    "feat__v": feat,
                    "label": label,
                },
                "g.npz",
            ),
            to_undirected=False,
        )
    )
    assert hetero.hetero.relations == [("v", "links", "v")]
    for name in ("indptr", "indices"):
        a, b = getattr(hetero, name), getattr(homogeneous, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert not hetero.edge_type.any()
    assert np.array_equal(hetero.typed_feat[0], homogeneous.feat)
    assert np.array_equal(hetero.label, homogeneous.label)


def test_a_directory_reads_the_homogeneous_layout_too(tmp_path):
    arrays = {
        "edges": np.array([[0, 1], [1, 2], [2, 3]]),
        "feat": np.eye(4),
        "label": np.array([0, 1, 0, 1]),
    }
    from_dir = build_dataset(_cfg(_save_dir(tmp_path, arrays)))
    from_npz = build_dataset(_cfg(_save_npz(tmp_path, arrays)))
    assert from_dir.hetero is None
    assert np.array_equal(from_dir.indptr, from_npz.indptr)
    assert np.array_equal(from_dir.indices, from_npz.indices)


def test_a_changed_or_added_file_in_the_directory_prepares_again(tmp_path, capsys):
    path = _save_dir(tmp_path, _arrays())
    cfg = _cfg(path, prepared_dir=str(tmp_path / "prepared"))
    first = prepare_dataset(cfg)
    assert prepare_dataset(cfg).checksum == first.checksum
    np.save(path / "feat__paper.npy", FEAT_PAPER + 1)
    second = prepare_dataset(cfg)
    assert second.checksum != first.checksum
    assert np.array_equal(second.typed_feat[1], FEAT_PAPER + 1)
    assert f"{path / 'feat__paper.npy'} changed since it was prepared" in " ".join(
        capsys.readouterr().err.split()
    )
    np.save(path / "train_idx.npy", np.array([0, 1]))
    np.save(path / "val_idx.npy", np.array([2]))
    np.save(path / "test_idx.npy", np.array([3]))
    third = prepare_dataset(cfg)
    assert third.info["split_from_file"] and third.train_idx.tolist() == [5, 6]
    assert "prepared from other input files" in capsys.readouterr().err


def test_a_deleted_directory_keeps_the_prepared_copy(tmp_path, capsys):
    import shutil

    path = _save_dir(tmp_path, _arrays())
    cfg = _cfg(path, prepared_dir=str(tmp_path / "prepared"))
    first = prepare_dataset(cfg)
    shutil.rmtree(path)
    assert prepare_dataset(cfg).checksum == first.checksum
    assert load_prepared(cfg).checksum == first.checksum
    assert "preparing it again" not in capsys.readouterr().err


# ------------------------------------------------------------------ bad input


def _error(tmp_path, match, to_undirected=True, **changes):
    path = _save_npz(tmp_path, _arrays(**changes))
    with pytest.raises(GnnrunError, match=match) as failure:
        build_dataset(_cfg(path, to_undirected))
    assert str(path) in str(failure.value)
    return str(failure.value)


def test_an_unknown_type_in_a_relation_name(tmp_path):
    _error(
        tmp_path,
        r"edge_index__venue__hosts__paper names the vertex type 'venue', which node_types "
        r"\(author, paper, field\) lacks: add it to node_types",
        edge_index__venue__hosts__paper=np.array([[0], [0]]),
    )
    _error(
        tmp_path,
        r"feat__venue names the vertex type 'venue'",
        feat__venue=np.ones((2, 2)),
    )
    _error(tmp_path, r"target names the vertex type 'venue'", target=np.array("venue"))


def test_ids_out_of_range_for_their_type(tmp_path):
    _error(
        tmp_path,
        r"edge_index__author__writes__paper has source ids \(row 0\) outside \[0, 5\) "
        r"\(min 0, max 5\): ids count from 0 within their type, and author has 5 vertices "
        r"\(from num_nodes__author\)",
        edge_index__author__writes__paper=np.array([[0, 5], [0, 1]]),
    )
    _error(
        tmp_path,
        r"edge_index__paper__has_topic__field has destination ids \(row 1\) outside \[0, 2\) "
        r".*\(from feat__field\)",
        edge_index__paper__has_topic__field=np.array([[0], [2]]),
    )
    # a paper id counted in the homogenised space (offset by the authors) is out of range
    _error(
        tmp_path,
        r"edge_index__paper__cites__paper has source ids \(row 0\) outside \[0, 6\)",
        edge_index__paper__cites__paper=np.array([[10], [0]]),
    )
    _error(
        tmp_path,
        r"has source ids \(row 0\) outside \[0, 5\) \(min -1",
        edge_index__author__writes__paper=np.array([[-1], [0]]),
    )


def test_feature_rows_not_the_type_count(tmp_path):
    _error(
        tmp_path,
        "feat__author has 4 rows but num_nodes__author is 5; give one feature row per author",
        feat__author=np.ones((4, 2)),
    )
    _error(
        tmp_path,
        r"label has 5 entries but feat__paper has 6 rows: both hold one row per paper vertex",
        feat__paper=FEAT_PAPER,
        label=LABEL[:5],
    )
    _error(
        tmp_path,
        r"label has 5 entries but the target type 'paper' has 6 vertices \(from num_nodes__paper\)",
        feat__paper=None,
        num_nodes__paper=np.array(6),
        label=LABEL[:5],
    )
    _error(tmp_path, r"feat__paper has shape \(6,\), expected", feat__paper=np.ones(6))
    _error(tmp_path, r"feat__paper has no columns; leave it out", feat__paper=np.ones((6, 0)))


def test_labels_on_a_non_target_count(tmp_path):
    message = _error(
        tmp_path,
        r"label has 5 entries but feat__paper has 6 rows: .* -1 for unlabelled\) "
        r"\(5 is the number of author vertices: is target right\?\)",
        label=np.array([0, 1, 0, 1, 0]),
    )
    assert "a heterogeneous graph holds edge_index__<src>__<relation>__<dst>" in message


def test_a_missing_target_or_label(tmp_path):
    _error(
        tmp_path,
        r"target is missing: save the name of the labelled vertex type as target, "
        r"e.g. target=numpy.array\('paper'\)",
        target=None,
    )
    _error(tmp_path, "label is missing: give one class per paper vertex", label=None)
    _error(tmp_path, "target holds 2 names, expected one", target=np.array(["paper", "author"]))
    _error(tmp_path, "target has dtype int64, expected strings", target=np.array(1))


def test_mixed_homogeneous_and_heterogeneous_keys(tmp_path):
    _error(
        tmp_path,
        r"it mixes homogeneous keys \(edge_index, feat\) with heterogeneous ones "
        r"\(edge_index__author__writes__paper, .*\); keep one layout",
        edge_index=np.array([[0], [1]]),
        feat=np.ones((13, 2)),
    )


def test_an_empty_directory(tmp_path):
    empty = tmp_path / "graph"
    empty.mkdir()
    (empty / "notes.txt").write_text("not an array")
    with pytest.raises(
        GnnrunError,
        match=rf"custom dataset directory {empty} holds no .npy files; write one array per file",
    ):
        build_dataset(_cfg(empty))


def test_names_that_are_not_plain(tmp_path):
    _error(
        tmp_path,
        r"edge_index__author__writes__to__paper is not named "
        r"edge_index__<source type>__<relation>__<destination type>",
        edge_index__author__writes__to__paper=np.array([[0], [0]]),
    )
    _error(
        tmp_path,
        r"node_types: the type 'field-of-study' is not a plain name: use a letter, then letters, "
        r"digits and single underscores, not ending in one such as 'field_of_study'",
        node_types=np.array(["author", "paper", "field-of-study"]),
    )
    _error(
        tmp_path,
        r"edge_index__author__wrote___paper has three underscores in a row: the names joined by "
        r"__ must not start or end with _",
        **{"edge_index__author__wrote___paper": np.array([[0], [0]])},
    )


def test_other_bad_arrays(tmp_path):
    _error(
        tmp_path,
        r"unknown arrays feat_author \(feat_author: the parts of an array name are joined by "
        r"two underscores, as in feat__paper\); rename or remove them",
        feat_author=np.ones((5, 2)),
    )
    _error(
        tmp_path,
        r"edge_index__author__writes__paper has shape \(6, 2\), expected \(2, E\)",
        edge_index__author__writes__paper=WRITES.T,
    )
    _error(
        tmp_path,
        "edge_index__author__writes__paper has dtype float64, expected integers",
        edge_index__author__writes__paper=WRITES.astype(float),
    )
    _error(tmp_path, r"num_nodes__author is \[5, 6\]", num_nodes__author=np.array([5, 6]))
    _error(
        tmp_path,
        r"the number of field vertices is unknown \(no num_nodes__field, feat__field or "
        r"edges\): give num_nodes__field",
        feat__field=None,
        edge_index__paper__has_topic__field=None,
    )
    _error(
        tmp_path,
        "node_types repeats paper",
        node_types=np.array(["author", "paper", "field", "paper"]),
    )
    _error(tmp_path, "no vertex has a label", label=np.full(6, -1))
    split = {"val_idx": np.array([1]), "test_idx": np.array([2])}
    _error(
        tmp_path,
        r"train_idx has ids within the target type 'paper' outside \[0, 6\)",
        train_idx=np.array([6]),
        **split,
    )
    _error(tmp_path, "train_idx holds 1 unlabelled vertices", train_idx=np.array([5]), **split)
    _error(
        tmp_path,
        "it holds no relation; give each relation's edges as edge_index__<src>__<relation>__<dst>",
        **{f"edge_index__{s}__{r}__{d}": None for s, r, d in GIVEN},
    )
