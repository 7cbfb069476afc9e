"""Evaluation metrics over all ranks: accuracy, ROC-AUC for binary tasks, and MRR, Hits@K,
ROC-AUC and average precision for link prediction (gnnrun.tasks.link_metrics); the tasks
choose theirs."""

from __future__ import annotations

import math

import torch

from gnnrun.comm import Communicator
from gnnrun.tasks.link_metrics import (
    auc_from_counts,
    average_precision_from_counts,
    collapsed,
    count_negatives,
    ranks,
)


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


def gather_all(comm: Communicator, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Every rank's `tensors`, concatenated in rank order (each rank gets them all)."""
    if not comm.distributed:
        return tensors
    gathered = comm.all_gather_object(tensors)
    return tuple(torch.cat(parts) for parts in zip(*gathered, strict=True))


def link_metrics(
    outputs: dict[str, tuple[torch.Tensor, torch.Tensor]],
    comm: Communicator,
    hits_at: tuple[int, ...] | list[int],
) -> dict[str, float]:
    """{split}_mrr, {split}_hits@K, {split}_auc and {split}_ap (average precision) over
    the held-out edges of every rank,
    each ranked against its own negatives (positive scores [E], negative scores [E, k]).
    Scores that are not finite rank nothing: the split's figures are then NaN, and
    {split}_nonfinite counts those scores."""
    result = {}
    for split, (positive, negative) in outputs.items():
        rank = ranks(positive, negative)
        nonfinite = int((~positive.isfinite()).sum()) + int((~negative.isfinite()).sum())
        sums = torch.tensor(
            [
                float((1 / rank).sum()),
                *(float((rank <= k).sum()) for k in hits_at),
                nonfinite,
                negative.numel(),
                rank.numel(),
            ],
            dtype=torch.float64,
        )
        comm.all_reduce_sum(sums)  # every rank takes the same branch below
        if sums[-3] > 0:
            figures = ["mrr", *(f"hits@{k}" for k in hits_at), "auc", "ap"]
            result |= {f"{split}_{f}": float("nan") for f in figures}
            result[f"{split}_nonfinite"] = float(sums[-3])
            continue
        count = float(sums[-1])
        result[f"{split}_mrr"] = float(sums[0]) / count if count else float("nan")
        for i, k in enumerate(hits_at):
            result[f"{split}_hits@{k}"] = float(sums[1 + i]) / count if count else float("nan")
        auc, ap, is_collapsed = pooled_metrics(positive, negative, int(sums[-2]), comm)
        result[f"{split}_auc"] = auc
        result[f"{split}_ap"] = ap
        if is_collapsed:
            result[f"{split}_collapsed"] = 1.0
    return result


def pooled_metrics(
    positive: torch.Tensor, negative: torch.Tensor, negatives: int, comm: Communicator
) -> tuple[float, float, bool]:
    """ROC-AUC, average precision and whether the scores collapsed, over every rank's
    positive and negative scores pooled (`negatives` of them on all ranks). The ranks gather the positives only (one score
    per held-out edge): each counts its own negatives around every positive, and the
    counts add up (gnnrun.tasks.link_metrics.count_negatives)."""
    (positives,) = gather_all(comm, (positive.reshape(-1),))
    positives = torch.sort(positives.to(torch.float64), descending=True).values
    counts = comm.all_reduce_sum(count_negatives(positives, negative))
    auc = auc_from_counts(counts, negatives)
    ap = average_precision_from_counts(positives, counts, negatives)
    if not negatives:  # nothing held out: nothing ranked, nothing collapsed
        return auc, ap, False
    # Every score, every rank's, within a tie of the others: the largest and the
    # negated smallest over ranks.
    local = negative.detach().reshape(-1)
    ends = [float(local.max()), -float(local.min())] if local.numel() else [-math.inf] * 2
    spread = torch.tensor(ends, dtype=torch.float64)
    high, neg_low = comm.all_reduce_max(spread).tolist()
    return auc, ap, collapsed(positives, torch.tensor([high, -neg_low]))


def accuracy_metrics(
    outputs: dict[str, tuple[torch.Tensor, torch.Tensor]], comm: Communicator
) -> dict[str, float]:
    """{split}_acc over the vertices of every rank (and {split}_auc where there are two
    classes: the probability of class 1 ranked against the labels)."""
    result = {}
    for split, (logits, labels) in outputs.items():
        counts = torch.tensor(
            [(logits.argmax(1) == labels).sum().item(), labels.numel()], dtype=torch.float64
        )
        comm.all_reduce_sum(counts)
        result[f"{split}_acc"] = float(counts[0] / counts[1]) if counts[1] else float("nan")
        if logits.shape[1] == 2:
            scores, labels = gather_all(comm, (torch.softmax(logits, 1)[:, 1], labels))
            result[f"{split}_auc"] = roc_auc(scores, labels)
    return result
