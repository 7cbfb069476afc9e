"""Writing a partition (atomically, one writer at a time) and finding one that fits a run.

`partition_dataset` turns a partitioner's Assignment into the on-disk format of
`gnnrun.partition.book`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError
from gnnrun.io import atomic_directory, mark_verified, save_array, write_json, writer_lock
from gnnrun.partition.block1d import Block1DBuilder
from gnnrun.partition.book import FORMAT_VERSION, PartitionBook, open_partition, part_dir_name
from gnnrun.partition.edge_cut import EdgeCutBuilder
from gnnrun.partition.registry import PARTITIONERS, PartitionerConfig
from gnnrun.partition.vertex_cut import VertexCutBuilder

BUILDERS = {"edge_cut": EdgeCutBuilder, "vertex_cut": VertexCutBuilder, "block1d": Block1DBuilder}


# Settings that say where a partition goes and how it is made, not what it holds.
NOT_CONTENT = frozenset({"output_dir", "memory_gb"})


def partitioner_identity(cfg: PartitionerConfig) -> dict[str, Any]:
    """The config fields that determine a partition's content (not where it is written)."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_CONTENT}


def partition_dataset(
    dataset: GraphDataset, cfg: PartitionerConfig, path: Path | None = None
) -> PartitionBook:
    """Partition `dataset` as `cfg` says and write it atomically to `path` (default cfg.output_dir);
    a concurrent writer of the same partition is waited for."""
    path = Path(path or cfg.output_dir)
    with writer_lock(path):
        return _write_partition(dataset, cfg, path)


def _write_partition(dataset: GraphDataset, cfg: PartitionerConfig, path: Path) -> PartitionBook:
    from gnnrun.progress import stage, track

    if cfg.num_parts > dataset.num_nodes:
        raise GnnrunError(
            f"partitioner.num_parts={cfg.num_parts} exceeds the {dataset.num_nodes} vertices of "
            f"{dataset.name}: choose at most {dataset.num_nodes} parts"
        )
    partitioner = PARTITIONERS.get(cfg.name)
    if dataset.hetero is not None and partitioner.kind != "edge_cut":
        edge_cut = ", ".join(
            n for n in PARTITIONERS.names() if PARTITIONERS.get(n).kind == "edge_cut"
        )
        raise GnnrunError(
            f"partitioner={cfg.name} makes {partitioner.kind} partitions, which do not carry "
            f"vertex types; {dataset.name} is heterogeneous: choose partitioner= one of {edge_cut}"
        )
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with stage(
        f"{cfg.name}: assigning {dataset.num_nodes:,} vertices / {dataset.num_edges:,} edges to {cfg.num_parts} parts"
    ):
        assignment = partitioner.assign(dataset, cfg)
    timings["assign_s"] = time.perf_counter() - start

    start = time.perf_counter()
    num_parts = cfg.num_parts // assignment.trainers_per_part
    extra = () if assignment.trainer is None else (assignment.trainer,)
    builder = BUILDERS[partitioner.kind](dataset, assignment.parts, num_parts, *extra)
    files: dict[str, Any] = {}
    figures: list[dict[str, Any]] = []
    with atomic_directory(path) as tmp:
        files["node_owner.npy"] = save_array(tmp, "node_owner", builder.node_owner)
        files["node_local.npy"] = save_array(tmp, "node_local", builder.node_local)
        for part, arrays, part_figures in track(builder.parts(), "writing parts", total=num_parts):
            folder = tmp / part_dir_name(part)
            folder.mkdir()
            for name, array in arrays.items():
                files[f"{part_dir_name(part)}/{name}.npy"] = save_array(folder, name, array)
            figures.append(part_figures)
        timings["build_write_s"] = time.perf_counter() - start
        manifest = {
            "format_version": FORMAT_VERSION,
            "kind": partitioner.kind,
            "method": cfg.name,
            "num_parts": num_parts,
            "trainers_per_part": assignment.trainers_per_part,
            "config": partitioner_identity(cfg),
            "dataset": {
                "name": dataset.name,
                "checksum": dataset.checksum,
                "num_nodes": dataset.num_nodes,
                "num_edges": dataset.num_edges,
            },
            "parts": figures,
            "summary": builder.summary(figures) | assignment.info,
            "timings": timings,
            "files": files,
        }
        write_json(tmp / "manifest.json", manifest)
        mark_verified(tmp, files)
    return open_partition(path)


def find_partition(dataset: GraphDataset, cfg: PartitionerConfig) -> PartitionBook | None:
    """The partition at cfg.output_dir if it was made from this dataset with this config;
    None when there is none or it does not fit (`ensure_partition` says why, then
    partitions again; `_reusable` gives the reason)."""
    return _reusable(dataset, cfg)[0]


def ensure_partition(dataset: GraphDataset, cfg: PartitionerConfig) -> PartitionBook:
    """The partition at cfg.output_dir, made first when there is none that fits (saying
    why an existing one does not). Concurrent runs wait for each other's partitioning."""
    with writer_lock(Path(cfg.output_dir)):
        book, reason = _reusable(dataset, cfg)
        if book is not None:
            return book
        if reason is not None:
            from gnnrun.progress import print_warning

            print_warning(reason)
        return _write_partition(dataset, cfg, Path(cfg.output_dir))


_AGAIN = "partitioning again"


def _reusable(
    dataset: GraphDataset, cfg: PartitionerConfig
) -> tuple[PartitionBook | None, str | None]:
    """(the partition at cfg.output_dir if it fits, else why not; None: there is none)."""
    path = Path(cfg.output_dir)
    if not path.exists():
        return None, None
    try:
        book = open_partition(path, dataset_checksum=dataset.checksum, fix=_AGAIN)
    except GnnrunError as exc:
        return None, str(exc)
    if book.manifest["config"] != partitioner_identity(cfg):
        return None, f"{path} was made with other partitioner settings: {_AGAIN}"
    return book, None
