"""Edge cut by a seeded uniform vertex assignment: the baseline METIS is measured against."""

from __future__ import annotations

import numpy as np

from gnnrun.data.dataset import GraphDataset
from gnnrun.partition.registry import Assignment, PartitionerConfig, register_partitioner


@register_partitioner("random", "edge_cut")
def random_partition(dataset: GraphDataset, cfg: PartitionerConfig) -> Assignment:
    rng = np.random.default_rng(cfg.seed)
    # A shuffled round-robin: uniformly random, and part sizes differ by at most one.
    parts = rng.permutation(np.arange(dataset.num_nodes) % cfg.num_parts).astype(np.int32)
    return Assignment(parts)
