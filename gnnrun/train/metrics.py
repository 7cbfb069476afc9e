"""Evaluation metrics over all ranks: accuracy, and ROC-AUC for binary tasks."""

from __future__ import annotations

import torch
import torch.distributed as dist

from gnnrun.comm import Communicator


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula, ties averaged."""
    positives = int(labels.sum())
    negatives = labels.numel() - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = torch.argsort(scores)
    sorted_scores = scores[order]
    ranks = torch.empty(scores.numel(), dtype=torch.float64)
    ranks[order] = torch.arange(1, scores.numel() + 1, dtype=torch.float64)
    # Average the ranks of tied scores.
    unique, inverse, counts = torch.unique_consecutive(
        sorted_scores, return_inverse=True, return_counts=True
    )
    if unique.numel() < scores.numel():
        ends = torch.cumsum(counts, 0).to(torch.float64)
        mean_rank = ends - (counts.to(torch.float64) - 1) / 2
        ranks[order] = mean_rank[inverse]
    rank_sum = ranks[labels.bool()].sum().item()
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def evaluate_outputs(
    outputs: dict[str, tuple[torch.Tensor, torch.Tensor]], task: str, comm: Communicator
) -> dict[str, float]:
    """{split}_acc (and {split}_auc for binary tasks) over the vertices of every rank."""
    result = {}
    for split, (logits, labels) in outputs.items():
        counts = torch.tensor(
            [(logits.argmax(1) == labels).sum().item(), labels.numel()], dtype=torch.float64
        )
        comm.all_reduce_sum(counts)
        result[f"{split}_acc"] = float(counts[0] / counts[1]) if counts[1] else float("nan")
        if task == "binary":
            scores = torch.softmax(logits, 1)[:, 1]
            if comm.distributed:
                gathered: list = [None] * comm.world_size
                dist.all_gather_object(gathered, (scores, labels))
                scores = torch.cat([s for s, _ in gathered])
                labels = torch.cat([y for _, y in gathered])
            result[f"{split}_auc"] = roc_auc(scores, labels)
    return result
