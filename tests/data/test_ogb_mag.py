"""ogbn-mag from a small hand-made copy of the archive's layout, into the heterogeneous format."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gnnrun.cli import main
from gnnrun.data import build_dataset
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.ogb import OgbDatasetConfig, dataset_meta, input_files
from gnnrun.errors import GnnrunError

sys.path.insert(0, str(Path(__file__).parent))
from ogb_files import assert_a_cut_file_is_named, write_csv  # noqa: E402

NAME = "ogbn-mag"
COUNTS = {"paper": 30, "author": 20, "institution": 4, "field_of_study": 6}
TYPES = ["paper", "author", "institution", "field_of_study"]  # gnnrun's order: target first
P, F = COUNTS["paper"], 5
RNG = np.random.default_rng(1)
FEAT = RNG.standard_normal((P, F)).astype(np.float32)
LABEL = (np.arange(P) * 13) % 349
ORDER = RNG.permutation(P)
TRAIN, VALID, TEST = ORDER[:18], ORDER[18:24], ORDER[24:]
_papers, _authors = np.arange(P), np.arange(COUNTS["author"])
# Each relation's raw edges (head id, tail id), as edge.csv.gz lists them: cites has two
# self-loops (0 and 5) and a repeated edge, which are dropped.
EDGES = {
    ("author", "affiliated_with", "institution"): np.stack([_authors, _authors % 4], axis=1),
    ("author", "writes", "paper"): np.concatenate(
        [
            np.stack([_authors, (_authors * 3) % P], 1),
            np.stack([_authors, (_authors * 3 + 1) % P], 1),
        ]
    ),
    ("paper", "cites", "paper"): np.concatenate(
        [
            np.stack([_papers, (_papers + 1) % P], 1),
            np.stack([_papers, (_papers * 7) % P], 1),
            [[0, 1]],
        ]
    ),
    ("paper", "has_topic", "field_of_study"): np.concatenate(
        [np.stack([_papers, _papers % 6], 1), np.stack([_papers, (_papers + 2) % 6], 1)]
    ),
}
RELATION_FILES = ("edge.csv.gz", "num-edge-list.csv.gz")  # the ones read
FORWARD = [
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "has_topic", "field_of_study"),
    ("author", "affiliated_with", "institution"),
]
RELATIONS = FORWARD + [
    ("paper", "rev_writes", "author"),
    ("paper", "rev_cites", "paper"),
    ("field_of_study", "rev_has_topic", "paper"),
    ("institution", "rev_affiliated_with", "author"),
]


def _per_type(value) -> pd.DataFrame:
    """One row, a column per type (alphabetical, as the archive lists them)."""
    return pd.DataFrame([[value(t) for t in sorted(COUNTS)]], columns=sorted(COUNTS))


def _write_mag(root: Path, folder: str = "ogbn_mag") -> Path:
    """The archive's layout, as `mag.zip` unpacks (and renamed to `folder`)."""
    d = root / folder
    raw = d / "raw"
    d.mkdir(parents=True)
    (d / "RELEASE_v2.txt").write_text("offline test copy\n")
    write_csv(raw / "num-node-dict.csv.gz", _per_type(COUNTS.get), header=True)
    write_csv(raw / "nodetype-has-label.csv.gz", _per_type(lambda t: t == "paper"), header=True)
    write_csv(raw / "triplet-type-list.csv.gz", sorted(EDGES))
    for reltype, (relation, edges) in enumerate(sorted(EDGES.items())):
        relation_dir = raw / "relations" / "___".join(relation)
        write_csv(relation_dir / "edge.csv.gz", edges)
        write_csv(relation_dir / "num-edge-list.csv.gz", [len(edges)])
        write_csv(relation_dir / "edge_reltype.csv.gz", np.full((len(edges), 1), reltype))
    write_csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", FEAT)
    write_csv(raw / "node-label" / "paper" / "node-label.csv.gz", LABEL.reshape(-1, 1))
    write_csv(raw / "node_year" / "paper" / "node_year.csv.gz", np.full((P, 1), 2019))
    split = d / "split" / "time"
    write_csv(split / "nodetype-has-split.csv.gz", _per_type(lambda t: t == "paper"), header=True)
    for part, idx in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        write_csv(split / "paper" / f"{part}.csv.gz", idx.reshape(-1, 1))
    return d


def _cfg(root: Path) -> OgbDatasetConfig:
    return OgbDatasetConfig(name=NAME, ogb_name=NAME, root=str(root))


def _expected_edges(relation) -> set[tuple[int, int]]:
    """(source, destination) ids within their types of a relation or its reverse."""
    source, name, destination = relation
    reverse = name.startswith("rev_")
    raw = EDGES[(destination, name[4:], source) if reverse else relation]
    pairs = {(int(h), int(t)) for h, t in raw if not (source == destination and h == t)}
    return {(t, h) for h, t in pairs} if reverse else pairs


@pytest.fixture
def mag(tmp_path, offline) -> GraphDataset:
    _write_mag(tmp_path)
    return build_dataset(_cfg(tmp_path))


def test_schema_orders_types_target_first_with_reverse_relations(mag):
    schema = mag.hetero
    assert schema.node_types == TYPES and schema.target == "paper"
    assert schema.type_counts == [COUNTS[t] for t in TYPES]
    assert schema.feat_dims == [F, 0, 0, 0]
    assert schema.relations == RELATIONS
    assert mag.num_nodes == sum(COUNTS.values()) and mag.directed
    assert mag.num_classes == 349 and mag.task == "multiclass"
    assert mag.feat.shape == (mag.num_nodes, 0)


def test_every_edge_is_stored_with_its_relation(mag):
    schema = mag.hetero
    dst = np.repeat(np.arange(mag.num_nodes), np.diff(mag.indptr))
    src = np.asarray(mag.indices, dtype=np.int64)
    relation_of = np.asarray(mag.edge_type, dtype=np.int64)
    for r, relation in enumerate(schema.relations):
        here = relation_of == r
        src_type, src_ids = schema.to_typed(src[here])
        dst_type, dst_ids = schema.to_typed(dst[here])
        assert np.all(src_type == TYPES.index(relation[0]))
        assert np.all(dst_type == TYPES.index(relation[2]))
        assert np.array_equal(schema.to_homogeneous(relation[0], src_ids), src[here])
        assert np.array_equal(schema.to_homogeneous(relation[2], dst_ids), dst[here])
        stored = list(zip(src_ids.tolist(), dst_ids.tolist(), strict=True))
        assert len(stored) == len(set(stored))  # no edge twice
        assert set(stored) == _expected_edges(relation), relation
    assert mag.num_edges == sum(len(_expected_edges(r)) for r in RELATIONS)
    assert mag.info["raw_edges"] == sum(len(e) for e in EDGES.values())


def test_features_labels_and_split_are_on_papers(mag):
    schema = mag.hetero
    assert np.array_equal(mag.typed_feat[0], FEAT) and mag.typed_feat[0].dtype == np.float32
    assert mag.typed_feat[1:] == [None, None, None]
    papers = schema.to_homogeneous("paper", np.arange(P))
    assert np.array_equal(mag.label[papers], LABEL)
    others = np.setdiff1d(np.arange(mag.num_nodes), papers)
    assert others.size == mag.num_nodes - P and np.all(mag.label[others] == -1)
    for stored, raw in ((mag.train_idx, TRAIN), (mag.val_idx, VALID), (mag.test_idx, TEST)):
        assert np.array_equal(stored, np.sort(schema.to_homogeneous("paper", raw)))
        assert np.all(schema.type_of(stored) == schema.target_type)


def test_inputs_are_the_files_read(mag, tmp_path):
    d = tmp_path / "ogbn_mag"
    inputs = {p.relative_to(d).as_posix() for p in input_files(_cfg(tmp_path))}
    relations = [f"raw/relations/{'___'.join(r)}/{f}" for r in EDGES for f in RELATION_FILES]
    assert inputs == {
        "raw/num-node-dict.csv.gz",
        "raw/triplet-type-list.csv.gz",
        *relations,
        "raw/node-feat/paper/node-feat.csv.gz",
        "raw/node-label/paper/node-label.csv.gz",
        "split/time/paper/train.csv.gz",
        "split/time/paper/valid.csv.gz",
        "split/time/paper/test.csv.gz",
    }
    assert len(mag.info["inputs"]) == len(inputs)


def test_data_info_prepares_and_prints_it(tmp_path, offline, capsys):
    _write_mag(tmp_path / "raw" / "ogb")
    code = main(["data", "info", "dataset=ogbn-mag", f"paths.raw_root={tmp_path / 'raw'}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "field_of_study" in out and "embedding" in out and "rev_cites" in out
    prepared = GraphDataset.load(tmp_path / "data" / "prepared" / NAME, verify=True)
    assert prepared.hetero.relations == RELATIONS
    assert np.array_equal(prepared.typed_feat[0], FEAT) and prepared.typed_feat[3] is None
    assert np.array_equal(prepared.label[:P], LABEL)


def test_missing_files_are_all_named(tmp_path, offline):
    d = _write_mag(tmp_path)
    gone = [
        "raw/relations/paper___cites___paper/edge.csv.gz",
        "raw/node-feat/paper/node-feat.csv.gz",
        "split/time/paper/valid.csv.gz",
    ]
    for rel in gone:
        (d / rel).unlink()
    with pytest.raises(GnnrunError) as err:
        build_dataset(_cfg(tmp_path))
    missing = str(err.value).split("must hold")[0]
    assert "3 of the dataset's files are missing" in missing
    for rel in gone:
        assert str(d / rel) in missing
    assert str(d / "raw" / "num-node-dict.csv.gz") not in missing
    assert dataset_meta(NAME)["url"] in str(err.value)


def test_unrenamed_archive_folder_is_pointed_out(tmp_path, offline):
    _write_mag(tmp_path, folder="mag")
    with pytest.raises(GnnrunError, match="mag exists: rename it to .*ogbn_mag"):
        build_dataset(_cfg(tmp_path))


@pytest.mark.parametrize(
    "rel",
    [
        "raw/num-node-dict.csv.gz",
        "raw/relations/author___writes___paper/edge.csv.gz",
        "raw/node-feat/paper/node-feat.csv.gz",
        "raw/node-label/paper/node-label.csv.gz",
        "split/time/paper/test.csv.gz",
    ],
)
def test_a_cut_file_is_named_in_one_line(tmp_path, offline, rel):
    victim = _write_mag(tmp_path) / rel
    assert_a_cut_file_is_named(victim, _cfg(tmp_path), dataset_meta(NAME)["url"])


def test_ids_outside_their_type_name_the_relation_file(tmp_path, offline):
    d = _write_mag(tmp_path)
    path = d / "raw" / "relations" / "author___affiliated_with___institution" / "edge.csv.gz"
    write_csv(path, [[0, 0], [1, COUNTS["institution"]]])  # institution 4 of 0..3
    with pytest.raises(GnnrunError, match=r"institution ids outside \[0, 4\)") as err:
        build_dataset(_cfg(tmp_path))
    assert str(path) in str(err.value)


def test_a_relation_missing_from_the_triplet_list_is_named(tmp_path, offline):
    d = _write_mag(tmp_path)
    write_csv(d / "raw" / "triplet-type-list.csv.gz", sorted(EDGES)[1:])
    with pytest.raises(GnnrunError, match="triplet-type-list.csv.gz lists the relations"):
        build_dataset(_cfg(tmp_path))
