"""task=node: what a prediction per vertex holds."""

from __future__ import annotations

import numpy as np

from gnnrun.tasks import TASKS, TaskConfig


def test_prediction_columns():
    task = TASKS.get("node")(TaskConfig(name="node"))
    logits = np.array([[1.0, 3.0, 0.0], [5.0, -1.0, 2.0]], dtype=np.float32)
    columns = task.prediction_columns(logits)
    assert columns["class"].tolist() == [1, 0] and columns["class"].dtype == np.int64
    expected = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(columns["prob"], expected, rtol=1e-6)
    binary = task.prediction_columns(np.array([[0.0, 0.0], [2.0, 0.0]], dtype=np.float32))
    np.testing.assert_allclose(binary["score"], [0.5, 1 / (1 + np.e**2)], rtol=1e-6)
    assert set(binary) == set(task.output_columns(2)) == {"class", "score"}
