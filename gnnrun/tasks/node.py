"""`task=node`: vertex classification, one class per vertex (cross-entropy; accuracy, and
ROC-AUC where there are two classes)."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.errors import GnnrunError
from gnnrun.tasks.base import Task
from gnnrun.tasks.metrics import accuracy_metrics
from gnnrun.tasks.registry import TASKS


@TASKS.register("node")
class NodeTask(Task):
    name = "node"
    figures = (("acc", "acc"), ("auc", "AUC"))
    best = "val_acc"
    shown = ("auc", "acc")  # AUC for two classes, else accuracy

    def best_metric(self, history):
        # Two classes: ROC-AUC (they are seldom balanced: Tolokers is 78% one class).
        return "val_auc" if any("val_auc" in r for r in history) else self.best

    def check_dataset(self, dataset):
        if dataset.task == "multilabel":
            raise GnnrunError(
                f"dataset {dataset.name!r} has {dataset.num_classes} binary labels per vertex: "
                "train it with task=multilabel"
            )

    def vertex_loss(self, logits, labels, reduction="mean"):
        return torch.nn.functional.cross_entropy(logits, labels, reduction=reduction)

    def metrics(self, outputs, comm):
        return accuracy_metrics(outputs, comm)

    def settings(self):
        return {}  # vertex classification records none, as before tasks existed

    def output_columns(self, num_classes: int) -> tuple[str, ...]:
        return ("class", "score") if num_classes == 2 else ("class", "prob")

    def prediction_columns(self, logits: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted class and probabilities (two classes: the probability of class 1)."""
        shifted = logits - logits.max(axis=1, keepdims=True)
        prob = np.exp(shifted)
        prob /= prob.sum(axis=1, keepdims=True)
        columns = {"class": logits.argmax(axis=1).astype(np.int64)}
        if logits.shape[1] == 2:
            columns["score"] = prob[:, 1].astype(np.float32)
        else:
            columns["prob"] = prob.astype(np.float32)
        return columns
