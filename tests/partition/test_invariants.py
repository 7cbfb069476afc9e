"""DESIGN.md's partition oracles, for every partitioner, on synthetic-tiny and Cora, 1-4 parts."""

from __future__ import annotations

import numpy as np
import pytest

from gnnrun.data.graph import edges_from_csr
from gnnrun.partition import partition_dataset
from gnnrun.partition.metis import (
    MetisPartitionerConfig,
    TwoLevelPartitionerConfig,
    metis_adjacency,
    vertex_weights,
)
from gnnrun.partition.registry import PARTITIONERS, PartitionerConfig


def make_config(name: str, num_parts: int) -> PartitionerConfig:
    if name == "metis":
        return MetisPartitionerConfig(num_parts=num_parts)
    if name == "two_level":
        return TwoLevelPartitionerConfig(
            num_parts=num_parts, num_machines=2 if num_parts % 2 == 0 else 1, layout="trainers"
        )
    return PARTITIONERS.schema(name)(name=name, num_parts=num_parts)


def global_edge_keys(dataset) -> np.ndarray:
    src, dst = edges_from_csr(dataset.indptr, dataset.indices)
    return np.sort(dst * dataset.num_nodes + src)


def part_edge_keys(part, n: int) -> np.ndarray:
    """The part's in-edges as sorted global (dst, src) keys."""
    src, dst = edges_from_csr(part["indptr"], part["indices"])
    nodes = part["nodes"]
    return np.sort(nodes[dst] * n + nodes[src])


def split_ids(part, split: str) -> np.ndarray:
    return part["nodes"][part[split]]


@pytest.mark.parametrize("num_parts", [1, 2, 3, 4])
@pytest.mark.parametrize("method", ["metis", "multilevel", "random", "two_level"])
def test_edge_cut_invariants(dataset, method, num_parts, tmp_path):
    book = partition_dataset(dataset, make_config(method, num_parts), tmp_path / "p")
    n = dataset.num_nodes
    owner, local = book.node_owner(), book.node_local()
    parts = [book.load_part(p) for p in range(num_parts)]
    keys = global_edge_keys(dataset)

    # Every vertex is solid in exactly one part, and the id maps round-trip.
    solid = np.concatenate([p["nodes"][: p.num_solid] for p in parts])
    assert np.array_equal(np.sort(solid), np.arange(n))
    for p, part in enumerate(parts):
        mine = part["nodes"][: part.num_solid]
        assert np.all(owner[mine] == p)
        assert np.array_equal(local[mine], np.arange(part.num_solid))
        # Every in-edge of a solid vertex is present, and nothing else.
        in_edges = keys[np.isin(keys // n, mine)]
        assert np.array_equal(part_edge_keys(part, n), in_edges)
        # Halo vertices are owned elsewhere, by the part the table says.
        halo = part["nodes"][part.num_solid :]
        assert np.all(owner[halo] != p)
        assert np.array_equal(part["halo_owner"], owner[halo])
        # Solid rows carry the original features and labels.
        assert np.array_equal(part["feat"], dataset.feat[mine])
        assert np.array_equal(part["label"], dataset.label[mine])
    for split in ("train_idx", "val_idx", "test_idx"):
        got = np.sort(np.concatenate([split_ids(part, split) for part in parts]))
        assert np.array_equal(got, np.sort(getattr(dataset, split)))
    assert book.manifest["summary"]["cut_edges"] == sum(
        f["cut_edges"] for f in book.manifest["parts"]
    )


@pytest.mark.parametrize("num_parts", [1, 2, 3, 4])
def test_vertex_cut_invariants(dataset, num_parts, tmp_path):
    book = partition_dataset(dataset, make_config("libra", num_parts), tmp_path / "p")
    n = dataset.num_nodes
    parts = [book.load_part(p) for p in range(num_parts)]
    root, root_local = book.node_owner(), book.node_local()

    # Every edge is in exactly one part.
    assert np.array_equal(
        np.sort(np.concatenate([part_edge_keys(p, n) for p in parts])), global_edge_keys(dataset)
    )
    # Every vertex has a clone somewhere; every clone carries the original features.
    clones = np.concatenate([p["nodes"] for p in parts])
    assert np.array_equal(np.unique(clones), np.arange(n))
    for part in parts:
        assert np.array_equal(part["feat"], dataset.feat[part["nodes"]])
        assert np.array_equal(part["label"], dataset.label[part["nodes"]])
        assert np.array_equal(part["root_part"], root[part["nodes"]])
    # One root per vertex, in a part that holds a clone of it, at the recorded local id.
    for v in range(0, n, max(1, n // 200)):
        assert parts[root[v]]["nodes"][root_local[v]] == v

    # Clone links: symmetric, leaf -> its root, root -> every leaf, same order on both sides.
    counts = np.bincount(clones, minlength=n)
    for p, part in enumerate(parts):
        links = part["clone_links"]
        mine_vid = part["nodes"][links[:, 0]]
        assert np.all(counts[mine_vid] > 1), "only split vertices have links"
        for q in range(num_parts):
            rows = links[links[:, 1] == q]
            back = parts[q]["clone_links"]
            back = back[back[:, 1] == p]
            assert np.array_equal(rows[:, 0], back[:, 2]) and np.array_equal(rows[:, 2], back[:, 0])
            assert np.array_equal(part["nodes"][rows[:, 0]], parts[q]["nodes"][rows[:, 2]])
            assert np.all(np.diff(part["nodes"][rows[:, 0]]) > 0), "rows ordered by original id"
        is_root = root[mine_vid] == p
        assert np.all(root[mine_vid[~is_root]] == links[~is_root, 1]), "a leaf links to its root"
        roots, per_root = np.unique(mine_vid[is_root], return_counts=True)
        assert np.array_equal(per_root, counts[roots] - 1), "a root links to each leaf"

    # Each split vertex is trained/evaluated once: at its root.
    for split in ("train_idx", "val_idx", "test_idx"):
        got = np.sort(np.concatenate([split_ids(part, split) for part in parts]))
        assert np.array_equal(got, np.sort(getattr(dataset, split)))
    summary = book.manifest["summary"]
    assert summary["replication_factor"] == pytest.approx(clones.size / n)
    if num_parts > 1:
        assert summary["imbalance"]["edges"] < 1.1, "Libra balances edges"


def test_metis_cuts_fewer_edges_than_random(tiny, tmp_path):
    metis = partition_dataset(tiny, make_config("metis", 4), tmp_path / "m")
    rand = partition_dataset(tiny, make_config("random", 4), tmp_path / "r")
    assert metis.manifest["summary"]["cut_edges"] < 0.5 * rand.manifest["summary"]["cut_edges"]
    imbalance = metis.manifest["summary"]["imbalance"]
    assert imbalance["solid"] < 1.1 and imbalance["edges"] < 1.1 and imbalance["train"] < 1.2


def test_two_level_groups_parts_by_machine(tiny, tmp_path):
    cfg = TwoLevelPartitionerConfig(num_parts=4, num_machines=2, layout="trainers")
    book = partition_dataset(tiny, cfg, tmp_path / "p")
    assert book.manifest["summary"]["machine_of_part"] == [0, 0, 1, 1]

    # The first level on its own: METIS over 2 machines, same graph, constraints and seed.
    import pymetis

    indptr, indices = metis_adjacency(tiny)
    first = pymetis.part_graph(
        2,
        pymetis.CSRAdjacency(indptr, indices),
        vweights=np.ascontiguousarray(vertex_weights(tiny, cfg), dtype=np.int64).ravel(),
        options=pymetis.Options(seed=cfg.seed),
    )
    machine = np.asarray(first.vertex_part)
    assert set(np.unique(machine)) == {0, 1}

    # Each machine's parts (0, 1 on machine 0; 2, 3 on machine 1) together own exactly
    # the vertices the first level gave that machine, and each of them owns some.
    owner = book.node_owner()
    for m, parts_of_m in enumerate(([0, 1], [2, 3])):
        held = np.flatnonzero(np.isin(owner, parts_of_m))
        assert np.array_equal(held, np.flatnonzero(machine == m)), m
        assert all(np.any(owner == p) for p in parts_of_m)


def test_two_level_machines_share_a_part_and_assign_its_vertices_to_trainers(tiny, tmp_path):
    """The paper's layout: one part per machine, each vertex assigned to one of its
    trainers, exactly as the per-trainer layout cuts the same machine part."""
    per_trainer = partition_dataset(
        tiny, make_config("two_level", 4), tmp_path / "trainers"
    ).node_owner()
    cfg = TwoLevelPartitionerConfig(num_parts=4, num_machines=2)  # layout=machines: the default
    book = partition_dataset(tiny, cfg, tmp_path / "machines")
    assert (book.num_parts, book.trainers_per_part, book.num_ranks) == (2, 2, 4)
    assert [book.part_of_rank(r) for r in range(4)] == [0, 0, 1, 1]
    assert np.array_equal(book.node_owner(), per_trainer // 2)
    for machine in range(2):
        part = book.load_part(machine)
        solid = part["nodes"][: part.num_solid]
        assert np.array_equal(machine * 2 + part["trainer"], per_trainer[solid])
        assert set(np.unique(part["trainer"][part["train_idx"]])) == {0, 1}


def test_partitioning_is_deterministic(tiny, tmp_path):
    for method in ("metis", "libra", "random"):
        a = partition_dataset(tiny, make_config(method, 3), tmp_path / f"{method}-a")
        b = partition_dataset(tiny, make_config(method, 3), tmp_path / f"{method}-b")
        assert {k: v["sha256"] for k, v in a.manifest["files"].items()} == {
            k: v["sha256"] for k, v in b.manifest["files"].items()
        }, method
