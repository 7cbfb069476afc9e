"""task=link's training pairs and losses (GAE's reconstruction loss, self-pairs) and its held-out pairs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError
from gnnrun.tasks.link import LinkObjective, LinkTask, LinkTaskConfig

EMPTY = np.zeros((2, 0), dtype=np.int64)


def path_graph(directed: bool = False) -> GraphDataset:
    """Vertices 0 - 1 - 2 and 3 alone; the training pairs (0, 1) and (1, 2), stored once."""
    return GraphDataset(
        name="path",
        indptr=np.array([0, 1, 3, 4, 4]),
        indices=np.array([1, 0, 2, 1]),
        feat=np.zeros((4, 1), dtype=np.float32),
        label=np.zeros(4, dtype=np.int64),
        train_idx=np.arange(4),
        val_idx=np.arange(0),
        test_idx=np.arange(0),
        num_classes=1,
        directed=directed,
        link_train=np.array([[0, 1], [1, 2]]),
        link_val=EMPTY,
        link_test=EMPTY,
    )


def objective(dataset: GraphDataset, **settings) -> LinkObjective:
    return LinkObjective(LinkTaskConfig(**settings), dataset, 0, None)


def gae_loss(h: np.ndarray, ones: set[tuple[int, int]]) -> float:
    """Kipf & Welling's loss, written out entry by entry: norm * the mean over all N^2
    entries of pos_weight * -log sigmoid(s) (an entry 1) or -log(1 - sigmoid(s)) (0)."""
    n = h.shape[0]
    pos_weight = (n * n - len(ones)) / len(ones)
    norm = n * n / (2 * (n * n - len(ones)))
    total = 0.0
    for u in range(n):
        for v in range(n):
            p = 1 / (1 + math.exp(-float(h[u] @ h[v])))
            total += -pos_weight * math.log(p) if (u, v) in ones else -math.log(1 - p)
    return norm * total / (n * n)


H = np.array([[0.5, -1.0], [1.5, 0.25], [-0.75, 0.5], [0.1, 2.0]])
BOTH_WAYS = {(0, 1), (1, 0), (1, 2), (2, 1)}


@pytest.mark.parametrize(
    ("directed", "self_pairs", "ones"),
    [
        (False, False, BOTH_WAYS),
        (False, True, BOTH_WAYS | {(v, v) for v in range(4)}),
        (True, False, {(0, 1), (1, 2)}),
    ],
)
def test_reconstruction_loss_is_gaes_weighted_loss_over_every_pair(directed, self_pairs, ones):
    task = objective(path_graph(directed), loss="reconstruction", self_pairs=self_pairs)
    h = torch.tensor(H, dtype=torch.float64, requires_grad=True)
    loss = task.reconstruction_loss(h)
    assert loss.item() == pytest.approx(gae_loss(H, ones), rel=1e-12)
    loss.backward()  # it trains the embeddings
    assert h.grad is not None and h.grad.abs().sum() > 0


def test_reconstruction_loss_in_row_chunks_is_the_same(monkeypatch):
    task = objective(path_graph(), loss="reconstruction", self_pairs=True)
    h = torch.tensor(H, dtype=torch.float64)
    whole = task.reconstruction_loss(h)
    monkeypatch.setattr("gnnrun.tasks.link.RECONSTRUCTION_ROWS", 3)  # rows 0-2, then 3
    assert task.reconstruction_loss(h).item() == pytest.approx(whole.item(), rel=1e-12)


def test_self_pairs_add_each_vertex_with_itself_after_the_training_edges():
    plain = objective(path_graph())
    paired = objective(path_graph(), self_pairs=True)
    assert plain.edges["train"].tolist() == [[0, 1], [1, 2]]
    assert paired.edges["train"].tolist() == [[0, 1, 0, 1, 2, 3], [1, 2, 0, 1, 2, 3]]
    assert paired.train_ids.tolist() == list(range(6))
    # A step's targets: the pairs (v, v) score a vertex's embedding against itself.
    seeds, positives, targets = paired.step(torch.tensor([4, 5]), key=7)
    assert positives.tolist() == [[2, 3], [2, 3]]
    assert seeds[targets.positives].tolist() == [[2, 3], [2, 3]]
    # Negatives are keyed by edge id: the graph's own edges keep theirs.
    a = plain.step(torch.tensor([0, 1]), key=7)[2]
    b = paired.step(torch.tensor([0, 1]), key=7)[2]
    assert torch.equal(a.negatives, b.negatives)


def test_the_sampled_loss_refuses_a_reconstruction_step():
    task = objective(path_graph(), loss="reconstruction")
    seeds, _, targets = task.step(torch.tensor([0, 1]), key=1)
    with pytest.raises(ValueError, match="reconstruction_loss"):
        task.loss(None, torch.zeros(len(seeds), 2), targets)


def test_reconstruction_needs_the_dot_scorer():
    with pytest.raises(GnnrunError, match="task.scorer=dot"):
        LinkTaskConfig(loss="reconstruction", scorer="mlp").validate()
    LinkTaskConfig(loss="reconstruction").validate()


def test_hits_at_names_each_k_once():
    with pytest.raises(GnnrunError, match=r"task.hits_at \[10, 10\] names a K twice"):
        LinkTaskConfig(hits_at=[10, 10]).validate()
    LinkTaskConfig(hits_at=[10, 1]).validate()


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"self_pairs": True}, "task.self_pairs=true pairs"),
        ({"loss": "reconstruction"}, "task.loss=reconstruction pairs"),
    ],
)
def test_a_heterogeneous_graph_refuses_pairing_every_vertex(settings, named):
    typed = dataclasses.replace(path_graph(), name="typed", hetero=object())
    with pytest.raises(GnnrunError, match=f"{named} .* typed is heterogeneous: use task.loss=bce"):
        LinkTask(LinkTaskConfig(**settings)).check_targets(typed)
    LinkTask(LinkTaskConfig()).check_targets(typed)


@pytest.mark.parametrize(
    ("eval_negatives", "reported"), [(1, [1]), (3, [1, 3]), (1000, [1, 3, 10])]
)
def test_hits_at_k_only_up_to_the_negatives(eval_negatives, reported):
    """An edge ranks at most eval_negatives + 1: Hits@K for a larger K is 1 whatever the model,
    so it is not reported."""
    from gnnrun.comm import Communicator

    task = LinkTask(LinkTaskConfig(eval_negatives=eval_negatives, hits_at=[1, 3, 10]))
    outputs = {"val": (torch.tensor([0.9, 0.1]), torch.tensor([[0.5], [0.7]]))}
    figures = task.metrics(outputs, Communicator())
    assert sorted(int(k.split("@")[1]) for k in figures if "hits@" in k) == reported
    assert {"val_mrr", "val_auc", "val_ap"} <= figures.keys()


@pytest.mark.parametrize("eval_sampler", ["per_source", "uniform"])
def test_held_out_pairs_are_drawn_once_and_scored_as_their_embeddings(monkeypatch, eval_sampler):
    """Every evaluation scores the same fixed negatives: drawn at the first, kept after;
    each held-out pair's score is the scorer's on its two vertices' embeddings."""
    import gnnrun.tasks.link as link
    from gnnrun.data.edge_split import held_out_negative_pairs
    from gnnrun.models.link import DotScorer

    dataset = dataclasses.replace(
        path_graph(), link_val=np.array([[0, 2], [3, 3]]), link_test=np.array([[1], [3]])
    )
    target = objective(dataset, eval_negatives=3, eval_sampler=eval_sampler)
    drawn = []

    def counting(*args, **kwargs):
        drawn.append(args[5])  # the split
        return held_out_negative_pairs(*args, **kwargs)

    monkeypatch.setattr(link, "held_out_negative_pairs", counting)
    h = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    model = type("Model", (), {"score": staticmethod(DotScorer())})()
    first = target.scores(model, lambda ids: h[ids])
    second = target.scores(model, lambda ids: h[ids])
    assert sorted(drawn) == ["test", "val"]  # once each, at the first evaluation
    for split, (positive, negative) in first.items():
        assert torch.equal(positive, second[split][0]) and torch.equal(negative, second[split][1])
        pairs = dataset.link_val if split == "val" else dataset.link_test
        expected = (h[pairs[0]] * h[pairs[1]]).sum(-1)
        assert torch.allclose(positive, expected)
        ends = held_out_negative_pairs(
            torch.from_numpy(pairs),
            target.eval_ids[split],
            3,
            target.destinations,
            target.task.split_seed,
            split,
            eval_sampler,
            target.sources,
        )
        assert torch.allclose(negative, (h[ends[0]] * h[ends[-1]]).sum(-1))
