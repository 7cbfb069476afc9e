"""Partitioning: one registry of partitioners, one writer, one checked loader.

A partitioner maps (dataset, config) to an Assignment of parts: a part per
vertex (an edge-cut partitioner), a part per CSR edge (a vertex-cut one), or a
new position per vertex (block1d's row blocks of a renumbered matrix). Its
kind is declared where it is registered, so that a run can refuse a partitioner
of the wrong kind before it spends any time partitioning. `partition_dataset`
turns an Assignment into the on-disk format of `gnnrun.partition.book`,
written atomically.
"""

from gnnrun.partition.registry import (
    PARTITIONERS,
    Assignment,
    Partitioner,
    check_partition_kind,
    register_partitioner,
)
from gnnrun.partition.write import (
    ensure_partition,
    find_partition,
    partition_dataset,
    partitioner_identity,
)

# Importing a partitioner's module registers it.
from gnnrun.partition import block1d, libra, metis, multilevel, random  # noqa: E402, F401  isort: skip

__all__ = [
    "PARTITIONERS",
    "Assignment",
    "Partitioner",
    "check_partition_kind",
    "ensure_partition",
    "find_partition",
    "partition_dataset",
    "partitioner_identity",
    "register_partitioner",
]
