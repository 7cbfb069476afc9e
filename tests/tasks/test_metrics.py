"""ROC-AUC against scikit-learn's, ties included; link metrics over several ranks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gnnrun.tasks.metrics import roc_auc


@pytest.mark.parametrize("ties", [False, True])
def test_roc_auc_matches_sklearn(ties):
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    scores = rng.random(500) + 0.3 * labels
    if ties:
        scores = np.round(scores, 1)
    expected = sklearn_metrics.roc_auc_score(labels, scores)
    assert roc_auc(torch.from_numpy(scores), torch.from_numpy(labels)) == pytest.approx(expected)


def test_roc_auc_of_one_class_is_nan():
    assert np.isnan(roc_auc(torch.rand(5), torch.ones(5, dtype=torch.int64)))


@pytest.mark.parametrize("ties", [False, True])
def test_pairwise_auc_is_roc_auc_of_positives_and_negatives_together(ties):
    from gnnrun.tasks.link_metrics import pairwise_auc

    rng = np.random.default_rng(1)
    # Scores at least 1e-4 apart: closer ones tie (gnnrun.tasks.link_metrics.tie_tolerance).
    distinct = torch.from_numpy(rng.permutation(2400) / 2000)
    positive, negative = distinct[:300] + 0.2001, distinct[300:].reshape(300, 7)
    if ties:
        positive, negative = positive.round(decimals=1), negative.round(decimals=1)
    scores = torch.cat([positive, negative.reshape(-1)])
    labels = torch.cat([torch.ones(300), torch.zeros(2100)]).long()
    assert pairwise_auc(positive, negative) == pytest.approx(roc_auc(scores, labels))


def test_link_metrics_in_one_process_follow_the_ranks_by_hand():
    from gnnrun.comm import Communicator
    from gnnrun.tasks.metrics import link_metrics

    positive = torch.tensor([0.9, 0.5, 0.1])
    negative = torch.tensor([[0.1, 0.2, 0.3], [0.6, 0.5, 0.1], [0.8, 0.7, 0.6]])
    # ranks: 1; 1 + 1 above + the tie halved = 2.5; 4
    figures = link_metrics({"test": (positive, negative)}, Communicator(), hits_at=[1, 3])
    assert figures["test_mrr"] == pytest.approx((1 + 1 / 2.5 + 1 / 4) / 3)
    assert figures["test_hits@1"] == pytest.approx(1 / 3)
    assert figures["test_hits@3"] == pytest.approx(2 / 3)
    # AUC against all nine negatives: 0.9 beats 9; 0.5 beats 4 and ties 1; 0.1 ties 2.
    assert figures["test_auc"] == pytest.approx((9 + 4.5 + 1) / 27)


def evaluate_shares(rank: int, world: int, cases) -> list[dict[str, float]]:
    from gnnrun.comm import Communicator
    from gnnrun.tasks.metrics import link_metrics

    figures = []
    for positive, negative in cases:
        # Uneven shares, the last rank's empty: edges [0, 10) on rank 0, [10, E) on rank 1.
        start, stop = [(0, 10), (10, positive.numel()), (positive.numel(),) * 2][rank]
        share = {"val": (positive[start:stop], negative[start:stop])}
        figures.append(link_metrics(share, Communicator(), hits_at=[1, 10]))
    return figures


def test_link_metrics_of_ranks_equal_one_process_without_gathering_negatives():
    """Each rank counts its own negatives around every positive: the figures of three ranks
    (one without edges) are those of one process holding every edge, collapsed scores
    (every one within a tie of the others, across ranks) included."""
    from gnnrun.comm import Communicator
    from gnnrun.tasks.metrics import link_metrics
    from gnnrun.testing import run_on_ranks

    g = torch.Generator().manual_seed(4)
    positive = (torch.rand(40, generator=g) * 20).round() / 20 + 0.2  # ties, across ranks too
    negative = (torch.rand(40, 25, generator=g) * 20).round() / 20
    flat = torch.full((12,), 0.6931472)
    tied = flat[:, None] + 1e-7 * torch.rand(12, 5, generator=g)
    apart = tied.clone()
    apart[11, 0] = 0.1  # one score apart, on rank 1 only: not collapsed on any rank
    overflowed = negative.clone()
    overflowed[30, 2] = float("nan")  # on rank 1 only: no figure of any rank ranks it
    cases = [(positive, negative), (flat, tied), (flat, apart), (positive, overflowed)]
    one = [link_metrics({"val": case}, Communicator(), hits_at=[1, 10]) for case in cases]
    assert set(one[0]) == {"val_mrr", "val_hits@1", "val_hits@10", "val_auc", "val_ap"}
    assert one[1]["val_collapsed"] == 1.0 and one[1]["val_auc"] == pytest.approx(0.5)
    assert "val_collapsed" not in one[2]
    assert one[3]["val_nonfinite"] == 1.0 and all(math.isnan(one[3][k]) for k in one[0])
    for figures in run_on_ranks(evaluate_shares, 3, cases):
        for ranks_figures, process_figures in zip(figures, one, strict=True):
            assert ranks_figures == pytest.approx(process_figures, rel=1e-12, nan_ok=True)


def test_a_split_without_edges_has_no_figures_and_did_not_collapse():
    from gnnrun.comm import Communicator
    from gnnrun.tasks.metrics import link_metrics

    figures = link_metrics({"val": (torch.zeros(0), torch.zeros(0, 5))}, Communicator(), [1])
    assert "val_collapsed" not in figures and all(math.isnan(v) for v in figures.values())
