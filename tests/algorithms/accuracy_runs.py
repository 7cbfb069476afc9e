"""Accuracy comparisons between algorithms on real ranks (imported by name by the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
import rank_train  # noqa: E402


def summaries_per_algorithm(
    configure, tmp_path, algorithms, dataset, nprocs, epochs, seeds, *overrides
) -> dict[str, list[dict]]:
    """Train every (seed, algorithm) with the same config otherwise; rank 0's summaries by
    algorithm, in seed order. All runs go through one launch whose ranks call `train` per config."""
    cfgs = [
        configure(
            f"dataset={dataset}",
            *overrides,
            f"algorithm={algorithm}",
            f"cluster.nprocs={nprocs}",
            f"train.epochs={epochs}",
            f"train.seed={seed}",
            f"train.checkpoint_dir={tmp_path}/ckpt/{algorithm}/{seed}",
        )
        for seed in range(seeds)
        for algorithm in algorithms
    ]
    summaries = run_on_ranks(
        rank_train.train_each_config, nprocs, cfgs, str(tmp_path / "runs"), timeout_s=3000
    )[0]
    return {a: summaries[i :: len(algorithms)] for i, a in enumerate(algorithms)}
