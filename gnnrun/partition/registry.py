"""`partitioner=NAME` -> the function assigning parts, and the kind of partition it makes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import II, MISSING

from gnnrun.config import check
from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError
from gnnrun.registry import Registry


@dataclass
class PartitionerConfig:
    name: str = MISSING  # key in gnnrun.partition.PARTITIONERS
    num_parts: int = II("cluster.nprocs")  # one part per rank unless told otherwise
    seed: int = 0
    output_dir: str = (
        "${paths.data_root}/partitions/${task.graph}/${partitioner.name}-${partitioner.num_parts}"
    )
    # Peak resident memory each rank may use when partitioning chunked input on the ranks
    # (gnnrun.partition.distributed), in GiB; null: no limit. Not part of the content.
    memory_gb: float | None = None

    def validate(self) -> None:
        check(self.num_parts >= 1, "partitioner.num_parts must be at least 1")
        check(
            self.memory_gb is None or self.memory_gb > 0,
            "partitioner.memory_gb must be positive (GiB per rank), or null for no limit",
        )


@dataclass
class Assignment:
    # edge_cut: a part per vertex; vertex_cut: a part per CSR edge; block1d: each
    # vertex's position in the renumbered order
    parts: np.ndarray
    info: dict[str, Any] = field(
        default_factory=dict
    )  # partitioner-specific figures for the manifest
    # edge_cut parts shared by several trainers (DistDGLv2's machines): `parts` has
    # num_parts / trainers_per_part parts, and trainer[v] (0 .. trainers_per_part - 1) says
    # which of its part's trainers takes vertex v when it is a seed.
    trainers_per_part: int = 1
    trainer: np.ndarray | None = None


@dataclass(frozen=True)
class Partitioner:
    kind: str  # "edge_cut", "vertex_cut" or "block1d": what `assign`'s parts index
    assign: Callable[[GraphDataset, Any], Assignment]


PARTITIONERS: Registry[Partitioner] = Registry(
    "partitioner", group="partitioner", base_schema=PartitionerConfig
)


def register_partitioner(name: str, kind: str, schema: type | None = None) -> Callable:
    """Register `assign` under `name` as a partitioner of `kind` (a key of BUILDERS), with
    its config schema (PartitionerConfig unless it has settings of its own)."""

    def add(assign: Callable[[GraphDataset, Any], Assignment]) -> Callable:
        PARTITIONERS.register(name, schema)(Partitioner(kind, assign))
        return assign

    return add


def check_partition_kind(
    cfg: PartitionerConfig, kind: str, user: str, default: str = "the algorithm's own"
) -> None:
    """Refuse a partitioner that makes another kind of partition than `user` ("algorithm=cd0
    trains", "gnnrun predict runs") runs on; leaving partitioner= out takes `default`."""
    made = PARTITIONERS.get(cfg.name).kind
    if made != kind:
        choices = ", ".join(n for n in PARTITIONERS.names() if PARTITIONERS.get(n).kind == kind)
        raise GnnrunError(
            f"partitioner={cfg.name} makes {made} partitions but {user} on {kind} partitions: "
            f"choose partitioner= one of {choices}, or leave partitioner= out to take {default}"
        )
