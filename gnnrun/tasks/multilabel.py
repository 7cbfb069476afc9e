"""`task=multilabel`: multi-label vertex classification, a vector of C binary labels per
vertex (ogbn-proteins, PPI, Yelp).

The dataset's `label` is an N x C matrix of 0 / 1, -1 where a label is unknown
(gnnrun.data.dataset); the model gives one logit per label. The loss is binary
cross-entropy with logits over each vertex's known labels (their mean per vertex,
then the mean over vertices), the metrics micro-F1 at probability 0.5 (true and
false positives and false negatives summed over every known label of every
vertex) and ROC-AUC averaged over the labels that have both classes in the split
(OGB's figure for ogbn-proteins); micro-F1 picks the best epoch. `gnnrun predict`
writes each vertex's probability per label.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.errors import GnnrunError
from gnnrun.tasks.base import Task
from gnnrun.tasks.metrics import gather_all, roc_auc
from gnnrun.tasks.registry import TASKS


@TASKS.register("multilabel")
class MultiLabelTask(Task):
    name = "multilabel"
    figures = (("f1", "micro-F1"), ("auc", "AUC"))
    best = "val_f1"
    shown_as = ("val F1", "test F1")
    shown = ("f1",)

    def check_dataset(self, dataset):
        if dataset.task != "multilabel":
            raise GnnrunError(
                f"task=multilabel learns a vector of binary labels per vertex, but dataset "
                f"{dataset.name!r} has one class per vertex: train it with task=node, or use a "
                "multi-label dataset (dataset=synthetic-multilabel, ogbn-proteins, or a custom "
                ".npz whose label is N x C)"
            )

    def vertex_loss(self, logits, labels, reduction="mean"):
        known = labels >= 0
        target = labels.clamp(min=0).to(logits.dtype)
        terms = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, target, reduction="none"
        )
        # Per vertex: the mean over its known labels (a vertex with none adds nothing).
        per_vertex = (terms * known).sum(1) / known.sum(1).clamp(min=1)
        if reduction == "none":
            return per_vertex
        return per_vertex.sum() if reduction == "sum" else per_vertex.mean()

    def metrics(self, outputs, comm):
        result = {}
        for split, (logits, labels) in outputs.items():
            predicted, positive, negative = logits > 0, labels == 1, labels == 0
            counts = torch.tensor(
                [
                    (predicted & positive).sum().item(),  # true positives
                    (predicted & negative).sum().item(),  # false positives
                    (~predicted & positive).sum().item(),  # false negatives
                    labels.shape[0],
                ],
                dtype=torch.float64,
            )
            comm.all_reduce_sum(counts)
            tp, fp, fn, vertices = counts.tolist()
            result[f"{split}_f1"] = (
                2 * tp / (2 * tp + fp + fn) if vertices and (tp + fp + fn) else float("nan")
            )
            scores, labels = gather_all(comm, (logits.float(), labels))
            result[f"{split}_auc"] = mean_label_auc(scores, labels)
        return result

    def output_columns(self, num_classes):
        return ("prob",)

    def prediction_columns(self, logits: np.ndarray) -> dict[str, np.ndarray]:
        """Each label's probability, [rows, C] (a label is predicted where it exceeds 0.5)."""
        return {"prob": (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)}


def mean_label_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC-AUC per label over its known entries, averaged over the labels with both
    classes (NaN when none has)."""
    aucs = []
    for j in range(labels.shape[1] if labels.ndim == 2 else 0):
        known = labels[:, j] >= 0
        auc = roc_auc(scores[known, j], labels[known, j])
        if not np.isnan(auc):
            aucs.append(auc)
    return float(np.mean(aucs)) if aucs else float("nan")
