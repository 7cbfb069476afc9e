"""Link-prediction metrics, with OGB's linkproppred conventions.

Two ways to rank a held-out edge's score:

- against negatives of its own (`ranking_metrics`, OGB's MRR evaluator, as for
  ogbl-citation2): each positive edge i has a fixed row of negative scores
  `negatives[i]`; its rank is 1 + the negatives scored above it, ties counted
  half (the mean of the optimistic rank, ties below, and the pessimistic
  one, ties above). MRR is the mean of 1 / rank, Hits@K the share of ranks
  <= K. Scores equal up to float32 rounding (within `tie_tolerance`) are
  ties: a model whose scores have collapsed to one value ranks every positive
  in the middle of its negatives (MRR about 2 / (k + 1)), not first because
  of the last bit of a sum;
- against one shared set of negatives (`hits_against_shared`, OGB's Hits@K
  evaluator, as for ogbl-collab): a positive is a hit when its score beats
  the K-th highest negative score strictly; with fewer than K negatives every
  positive is a hit.

ROC-AUC over positives and negatives is gnnrun.tasks.metrics.roc_auc;
`average_precision` is AP over them (GAE's second figure, scikit-learn's
average_precision_score), ties (within `tie_tolerance`) one threshold.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

HITS_AT = (10, 50, 100)
# Scores this close, relative to their size (at least 1), are ties: float32 scores of
# the same pair computed in another order differ by a few units of 2^-24 (6e-8).
TIE_RELATIVE = 1e-6


def tie_tolerance(scores: torch.Tensor) -> torch.Tensor:
    """How far from each score another one still ties with it."""
    return TIE_RELATIVE * scores.to(torch.float64).abs().clamp(min=1.0)


def ranks(positives: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """The rank of each positive score [n] among its own negatives [n, k], ties halved."""
    if negatives.dim() != 2 or negatives.shape[0] != positives.numel():
        raise ValueError(
            f"negatives must be [len(positives), k], got {tuple(negatives.shape)} "
            f"for {positives.numel()} positives"
        )
    column = positives.reshape(-1, 1).to(torch.float64)
    tolerance = tie_tolerance(column)
    negatives = negatives.to(torch.float64)
    above = (negatives > column + tolerance).sum(dim=1)
    at_least = (negatives >= column - tolerance).sum(dim=1)
    return 0.5 * (above + at_least).to(torch.float64) + 1


def collapsed(positives: torch.Tensor, negatives: torch.Tensor) -> bool:
    """Whether every score, positive and negative, ties with every other one: the model
    gives every pair the same score (it has collapsed) and ranks nothing."""
    scores = torch.cat([positives.reshape(-1), negatives.reshape(-1)]).to(torch.float64)
    if scores.numel() < 2:
        return False
    low, high = scores.min(), scores.max()
    return bool(high - low <= tie_tolerance(high.abs().maximum(low.abs())))


def ranking_metrics(
    positives: torch.Tensor, negatives: torch.Tensor, hits_at: Sequence[int] = HITS_AT
) -> dict[str, float]:
    """`mrr` and `hits@K` for each K of each positive against its own negatives."""
    rank = ranks(positives, negatives)
    if rank.numel() == 0:
        return {"mrr": float("nan"), **{f"hits@{k}": float("nan") for k in hits_at}}
    out = {"mrr": float((1 / rank).mean())}
    for k in hits_at:
        out[f"hits@{k}"] = float((rank <= k).to(torch.float64).mean())
    return out


def hits_against_shared(positives: torch.Tensor, negatives: torch.Tensor, k: int) -> float:
    """Share of positives scored strictly above the k-th highest of the shared negatives."""
    if negatives.numel() < k:
        return 1.0
    kth = torch.topk(negatives.reshape(-1), k).values[-1]
    return float((positives > kth).to(torch.float64).mean())


def average_precision(positives: torch.Tensor, negatives: torch.Tensor) -> float:
    """Average precision of positive against negative scores, all pooled: the sum over the
    distinct score thresholds, highest first, of the precision at each times the share
    of positives it adds (scikit-learn's average_precision_score). Tied scores (within
    `tie_tolerance`) are one threshold, so a collapsed model scores the positives' share."""
    scores = torch.cat([positives.reshape(-1), negatives.reshape(-1)]).to(torch.float64)
    if not positives.numel() or not negatives.numel():
        return float("nan")
    labels = torch.cat([torch.ones(positives.numel()), torch.zeros(negatives.numel())]).to(
        torch.float64
    )
    order = torch.argsort(scores, descending=True, stable=True)
    scores, labels = scores[order], labels[order]
    # A threshold ends where the next score is no longer tied with this one.
    gap = scores[:-1] - scores[1:] > tie_tolerance(scores[:-1])
    ends = torch.cat([torch.nonzero(gap).reshape(-1), torch.tensor([scores.numel() - 1])])
    hits = torch.cumsum(labels, 0)[ends]
    precision = hits / (ends + 1).to(torch.float64)
    recall_step = torch.diff(hits, prepend=torch.zeros(1, dtype=torch.float64))
    return float((precision * recall_step).sum() / positives.numel())
