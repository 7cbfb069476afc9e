#!/usr/bin/env python
"""Link prediction's pooled ROC-AUC and average precision: gnnrun against scikit-learn.

Every evaluation of `task=link` ranks each held-out edge among its own
`task.eval_negatives` negatives (MRR, Hits@K) and also pools every positive and
negative score of the split for ROC-AUC and average precision. This times that
pooled part, `gnnrun.tasks.metrics.link_metrics` in one process, against
scikit-learn's `roc_auc_score` plus `average_precision_score` (the baseline,
measured in the same run) on the same random scores, at the sizes of Facebook's
validation and test splits (8,541 and 17,082 held-out edges, 1,000 negatives
each). It prints both figures of both, their differences (ties within 1e-6 of a
score's size are one score in gnnrun, distinct in scikit-learn), and the bytes
the ranks share for them, all ranks together: the positive scores only (4
bytes an edge), where gathering every score would share 4 x (1 + negatives).

    .venv/bin/python scripts/bench_link_metrics.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from gnnrun.comm import Communicator
from gnnrun.tasks.metrics import link_metrics

SPLITS = {"facebook val": 8_541, "facebook test": 17_082}


def timed(fn, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def sklearn_figures(labels, scores) -> tuple[float, float]:
    return roc_auc_score(labels, scores), average_precision_score(labels, scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timings per figure (median)")
    parser.add_argument("--negatives", type=int, default=1000, help="negatives per edge")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a rank's)")
    args = parser.parse_args()
    for name in ("rounds", "negatives", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    print(
        f"{'split':<15} {'pairs':>11} {'gnnrun s':>9} {'sklearn s':>10} {'speed-up':>9} "
        f"{'AUC':>8} {'dAUC':>8} {'AP':>8} {'dAP':>8} {'shared':>10} {'all scores':>11}"
    )
    for name, edges in SPLITS.items():
        g = torch.Generator().manual_seed(edges)
        # A model that ranks the held-out edges better than chance: positives drawn higher.
        positive = torch.randn(edges, generator=g) + 1.0
        negative = torch.randn(edges, args.negatives, generator=g)
        ours_s, ours = timed(
            partial(link_metrics, {"val": (positive, negative)}, Communicator(), [10]),
            args.rounds,
        )
        scores = torch.cat([positive, negative.reshape(-1)]).numpy()
        labels = torch.cat([torch.ones(edges), torch.zeros(negative.numel())]).numpy()
        theirs_s, theirs = timed(partial(sklearn_figures, labels, scores), args.rounds)
        print(
            f"{name:<15} {scores.size:>11,} {ours_s:>9.2f} {theirs_s:>10.2f} "
            f"{theirs_s / ours_s:>8.1f}x {ours['val_auc']:>8.5f} "
            f"{ours['val_auc'] - theirs[0]:>8.1e} {ours['val_ap']:>8.5f} "
            f"{ours['val_ap'] - theirs[1]:>8.1e} {edges * 4 / 1e6:>8.2f}MB "
            f"{scores.size * 4 / 1e6:>9.1f}MB"
        )


if __name__ == "__main__":
    main()
