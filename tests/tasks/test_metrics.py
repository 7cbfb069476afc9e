"""ROC-AUC against scikit-learn's, ties included."""

from __future__ import annotations

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
    from gnnrun.tasks.metrics import pairwise_auc

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
