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

ROC-AUC (`pairwise_auc`) and average precision (`average_precision`, GAE's
second figure, scikit-learn's average_precision_score) pool every positive and
negative score. Both come from how many negatives lie below and tie with each
positive (`count_negatives`): ranks count their own negatives and sum the
counts, so the evaluation of many ranks moves the positive scores only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

HITS_AT = (10, 50, 100)
# Scores this close, relative to their size (at least 1), are ties: float32 scores of
# the same pair computed in another order differ by a few units of 2^-24 (6e-8).
TIE_RELATIVE = 1e-6
# Scores `ranks` compares at once.
RANK_CHUNK = 1 << 20


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
    rank = torch.empty(column.shape[0], dtype=torch.float64, device=column.device)
    # Rows at a time: the float64 copy and the comparisons of all of them at once took
    # 4x the scores' own memory (280 MB beside Facebook's 68 MB of test scores).
    rows = max(1, RANK_CHUNK // max(1, negatives.shape[1]))
    for i in range(0, column.shape[0], rows):
        block = negatives[i : i + rows].to(torch.float64)
        above = (block > column[i : i + rows] + tolerance[i : i + rows]).sum(dim=1)
        at_least = (block >= column[i : i + rows] - tolerance[i : i + rows]).sum(dim=1)
        rank[i : i + rows] = 0.5 * (above + at_least).to(torch.float64) + 1
    return rank


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


def count_negatives(positives: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """For each positive score, [2, P] int64: how many of `negatives` are below it (not
    tied), and how many are not above it (below or tied). Counts over disjoint sets of
    negatives add up, so ranks count their own and sum: no rank needs another's
    negatives for ROC-AUC or average precision."""
    # Evaluations hand their scores over on the CPU (a GPU rank's too). numpy's sort is
    # 2-3x torch's there; float32 scores sort as float32 (half the bytes), then widen,
    # exactly, to meet the float64 tie bounds.
    flat = negatives.detach().reshape(-1).cpu()
    wide = flat.dtype == torch.float64
    ordered = np.sort(flat.numpy() if wide else flat.to(torch.float32).numpy())
    ordered = torch.from_numpy(ordered.astype(np.float64, copy=False))
    positives = positives.detach().reshape(-1).cpu().to(torch.float64)
    tolerance = tie_tolerance(positives)
    below = torch.searchsorted(ordered, positives - tolerance, side="left")
    not_above = torch.searchsorted(ordered, positives + tolerance, side="right")
    return torch.stack([below, not_above])


def auc_from_counts(counts: torch.Tensor, negatives: int) -> float:
    """ROC-AUC from `count_negatives` over all `negatives`: each positive wins against the
    negatives below it and half of those tied with it (Mann-Whitney, ties halved)."""
    positives = counts.shape[1]
    if not positives or not negatives:
        return float("nan")
    return counts.sum().item() / 2 / (positives * negatives)


def average_precision_from_counts(
    positives: torch.Tensor, counts: torch.Tensor, negatives: int
) -> float:
    """Average precision (scikit-learn's average_precision_score) from the positive scores
    sorted highest first and their `count_negatives` over all `negatives`: the sum over
    the thresholds, highest first, of the precision there times the share of positives
    they add. Positives within `tie_tolerance` of the next one are one threshold, and a
    negative tied with a threshold's lowest positive is counted at it, as ROC-AUC and
    MRR count ties."""
    count = positives.numel()
    if not count or not negatives:
        return float("nan")
    positives = positives.to(torch.float64)
    if count > 1 and bool((positives[:-1] < positives[1:]).any()):
        raise ValueError("average_precision_from_counts needs the positives sorted highest first")
    # A threshold ends at a positive that the next one does not tie with.
    gap = positives[:-1] - positives[1:] > tie_tolerance(positives[:-1])
    ends = torch.cat([torch.nonzero(gap).reshape(-1), torch.tensor([count - 1])])
    hits = (ends + 1).to(torch.float64)
    at_or_above = negatives - counts[0, ends].to(torch.float64)
    precision = hits / (hits + at_or_above)
    added = torch.diff(hits, prepend=torch.zeros(1, dtype=torch.float64))
    return float((precision * added).sum() / count)


def average_precision(positives: torch.Tensor, negatives: torch.Tensor) -> float:
    """Average precision of positive against negative scores, all pooled (GAE's second
    figure): `average_precision_from_counts` in one process. A collapsed model scores the
    positives' share."""
    positives = torch.sort(positives.reshape(-1).to(torch.float64), descending=True).values
    counts = count_negatives(positives, negatives)
    return average_precision_from_counts(positives, counts, negatives.numel())


def pairwise_auc(positives: torch.Tensor, negatives: torch.Tensor) -> float:
    """ROC-AUC of positive against negative scores, ties (within `tie_tolerance`) counted
    half: gnnrun.tasks.metrics.roc_auc of the two pooled, by one sort of the negatives."""
    return auc_from_counts(count_negatives(positives, negatives), negatives.numel())
