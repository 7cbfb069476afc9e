"""ROC-AUC against scikit-learn's, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnrun.train.metrics import roc_auc


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
