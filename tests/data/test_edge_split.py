"""Held-out edges for link prediction: disjoint, whole pairs, reproducible, absent from the
message-passing graph in both directions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.data.edge_split import held_out_negatives, split_edges
from gnnrun.data.graph import csr_from_edges, edges_from_csr
from gnnrun.data.synthetic import SyntheticDatasetConfig, generate


@pytest.fixture(scope="module")
def undirected():
    dataset = generate(SyntheticDatasetConfig(name="t", num_nodes=500, avg_degree=8))
    return dataset.indptr, dataset.indices


def pairs(edges: np.ndarray, n: int) -> np.ndarray:
    """Each edge as one key of its unordered vertex pair."""
    low, high = np.minimum(edges[0], edges[1]), np.maximum(edges[0], edges[1])
    return low * n + high


def test_an_undirected_split_keeps_pairs_whole_and_out_of_the_graph(undirected):
    indptr, indices = undirected
    n = indptr.size - 1
    split = split_edges(
        indptr,
        indices,
        False,
        0.1,
        0.2,
        seed=3,
    )
    train, val, test = (pairs(e, n) for e in (split.train, split.val, split.test))
    everything = pairs(np.stack(edges_from_csr(indptr, indices)), n)
    assert np.array_equal(np.sort(np.concatenate([train, val, test])), np.unique(everything))
    assert len(set(train) | set(val) | set(test)) == train.size + val.size + test.size
    assert val.size == round(0.1 * everything.size / 2) and test.size == round(
        0.2 * everything.size / 2
    )
    graph = pairs(np.stack(edges_from_csr(split.indptr, split.indices)), n)
    assert set(graph) == set(train)  # both directions of every training pair, nothing held out
    assert graph.size == 2 * train.size


def test_the_same_seed_gives_the_same_split_and_another_another(undirected):
    indptr, indices = undirected
    first = split_edges(indptr, indices, False, 0.1, 0.1, seed=1)
    again = split_edges(indptr, indices, False, 0.1, 0.1, seed=1)
    other = split_edges(indptr, indices, False, 0.1, 0.1, seed=2)
    for name in ("indptr", "indices", "train", "val", "test"):
        assert np.array_equal(getattr(first, name), getattr(again, name)), name
    assert not np.array_equal(first.test, other.test)


def test_a_directed_split_is_by_edge():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 100, 800), rng.integers(0, 100, 800)
    indptr, indices = csr_from_edges(src, dst, 100, symmetrize=False)
    split = split_edges(indptr, indices, True, 0.25, 0.25, seed=0)
    keys = [e[1] * 100 + e[0] for e in (split.train, split.val, split.test)]
    graph_src, graph_dst = edges_from_csr(split.indptr, split.indices)
    assert np.array_equal(np.sort(graph_dst * 100 + graph_src), np.sort(keys[0]))
    assert sum(k.size for k in keys) == indices.size
    assert not set(keys[1]) & set(keys[0]) and not set(keys[2]) & set(keys[0])


def test_fractions_that_leave_no_training_edges_are_refused(undirected):
    with pytest.raises(ValueError, match="leave training edges"):
        split_edges(*undirected, False, 0.5, 0.5, seed=0)


def test_held_out_negatives_are_fixed_per_edge_and_differ_between_splits_and_seeds(undirected):
    indptr, indices = undirected
    n = indptr.size - 1
    split = split_edges(indptr, indices, False, 0.1, 0.1, seed=0)
    ids = torch.arange(split.test.shape[1])
    test = held_out_negatives(split.test, ids, 20, (0, n), split_seed=0, split="test")
    assert test.shape == (ids.numel(), 20) and test.min() >= 0 and test.max() < n
    tail = held_out_negatives(split.test[:, 5:], ids[5:], 20, (0, n), split_seed=0, split="test")
    assert torch.equal(test[5:], tail)  # an edge's negatives do not depend on the others
    val_ids = torch.arange(split.val.shape[1])
    val = held_out_negatives(split.val, val_ids, 20, (0, n), split_seed=0, split="val")
    assert not torch.equal(val[:5], test[:5])
    reseeded = held_out_negatives(split.test, ids, 20, (0, n), split_seed=1, split="test")
    assert not torch.equal(reseeded, test)


def test_uniform_held_out_negatives_draw_both_ends_and_stay_fixed_per_edge(undirected):
    from gnnrun.data.edge_split import held_out_negative_pairs

    indptr, indices = undirected
    n = indptr.size - 1
    split = split_edges(indptr, indices, False, 0.1, 0.1, seed=0)
    ids = torch.arange(split.test.shape[1])
    pairs = held_out_negative_pairs(split.test, ids, 3, (0, n), 0, "test", "uniform")
    assert pairs.shape == (2, ids.numel(), 3) and pairs.min() >= 0 and pairs.max() < n
    # Not the edges' own sources (GAE's random pairs), and one edge's do not depend on
    # the others'.
    assert not torch.equal(pairs[0, :, 0], torch.as_tensor(split.test[0]))
    tail = held_out_negative_pairs(split.test[:, 5:], ids[5:], 3, (0, n), 0, "test", "uniform")
    assert torch.equal(pairs[:, 5:], tail)
    own = held_out_negative_pairs(split.test, ids, 3, (0, n), 0, "test", "per_source")
    assert torch.equal(own[1], held_out_negatives(split.test, ids, 3, (0, n), 0, "test"))


def test_the_link_dataset_is_written_once_and_made_again_for_another_split(tmp_path):
    from gnnrun.data.edge_split import load_link_dataset, prepare_link_dataset
    from gnnrun.errors import GnnrunError
    from gnnrun.tasks.link import LinkTaskConfig

    dataset = generate(SyntheticDatasetConfig(name="t", num_nodes=300, avg_degree=6))
    dataset.save(tmp_path / "t")
    task = LinkTaskConfig(prepared_dir=str(tmp_path / "t-link"))
    linked = prepare_link_dataset(dataset, task)
    assert linked.link_train.shape[0] == 2 and linked.num_edges == 2 * linked.link_train.shape[1]
    np.testing.assert_array_equal(linked.feat, dataset.feat)
    again = prepare_link_dataset(dataset, task)
    assert again.checksum == linked.checksum
    assert load_link_dataset(dataset, task).checksum == linked.checksum
    other = LinkTaskConfig(prepared_dir=task.prepared_dir, split_seed=1)
    with pytest.raises(GnnrunError, match="another split"):
        load_link_dataset(dataset, other)
    assert prepare_link_dataset(dataset, other).checksum != linked.checksum


def test_a_target_relations_held_out_edges_leave_with_their_reverse_twins():
    """synthetic-hetero-tiny, `writes` held out: no held-out (author, paper) pair is left in
    `writes` nor its (paper, author) twin in `rev_writes`; every other relation keeps all
    its edges, and the three sets partition the relation's edges."""
    from gnnrun.data.edge_split import split_relation
    from gnnrun.data.synthetic_hetero import SyntheticHeteroConfig
    from gnnrun.data.synthetic_hetero import generate as generate_hetero

    dataset = generate_hetero(SyntheticHeteroConfig(name="h", num_papers=400))
    names = dataset.hetero.relation_names()
    writes, rev_writes = names.index("writes"), names.index("rev_writes")
    split = split_relation(dataset, writes, 0.1, 0.2, seed=0)

    def edges(indptr, indices, edge_type, relation):
        src, dst = edges_from_csr(indptr, indices)
        mine = np.asarray(edge_type) == relation
        return set(zip(src[mine].tolist(), dst[mine].tolist(), strict=True))

    before = edges(dataset.indptr, dataset.indices, dataset.edge_type, writes)
    sets = [set(zip(*e.tolist(), strict=True)) for e in (split.train, split.val, split.test)]
    assert set.union(*sets) == before and sum(map(len, sets)) == len(before)
    held = sets[1] | sets[2]
    after = edges(split.indptr, split.indices, split.edge_type, writes)
    assert after == sets[0] and not after & held
    twins = edges(split.indptr, split.indices, split.edge_type, rev_writes)
    assert not twins & {(v, u) for u, v in held}
    assert twins == {(v, u) for u, v in sets[0]}
    for relation in range(len(names)):
        if relation not in (writes, rev_writes):
            assert edges(split.indptr, split.indices, split.edge_type, relation) == edges(
                dataset.indptr, dataset.indices, dataset.edge_type, relation
            )


def test_a_relation_name_two_relations_share_is_refused_and_the_canonical_one_taken(tmp_path):
    """`writes` from authors and from papers: the bare name is ambiguous, so it is refused
    listing both canonical names, and each canonical name picks its own relation."""
    from gnnrun.data.custom import CustomDatasetConfig, load
    from gnnrun.data.edge_split import target_relation
    from gnnrun.errors import GnnrunError

    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "g.npz",
        node_types=np.array(["paper", "author"]),
        target=np.array("paper"),
        num_nodes__author=np.array(20),
        feat__paper=rng.normal(size=(30, 4)),
        label=rng.integers(0, 3, 30),
        edge_index__author__writes__paper=np.stack(
            [rng.integers(0, 20, 60), rng.integers(0, 30, 60)]
        ),
        edge_index__paper__writes__paper=rng.integers(0, 30, (2, 60)),
    )
    dataset = load(CustomDatasetConfig(name="g", path=str(tmp_path / "g.npz")))
    relations = [tuple(r) for r in dataset.hetero.relations]
    with pytest.raises(GnnrunError) as refused:
        target_relation(dataset, "writes")
    assert str(refused.value) == (
        "task.relation=writes names 2 relations of g: give one as "
        "source__relation__destination, task.relation= one of author__writes__paper, "
        "paper__writes__paper"
    )
    for canonical in ("author__writes__paper", "paper__writes__paper"):
        assert relations[target_relation(dataset, canonical)] == tuple(canonical.split("__"))
    with pytest.raises(GnnrunError, match="is heterogeneous: .* one of author__writes__paper"):
        target_relation(dataset, None)
    with pytest.raises(GnnrunError, match="paper__rev_writes__author, paper__rev_writes__paper"):
        target_relation(dataset, "rev_writes")  # each writes has its reverse
