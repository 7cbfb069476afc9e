"""The partition directory: its manifest, its per-part folders, and the checked loader.

Layout (all arrays are plain .npy, memory-mappable):

    manifest.json            method, kind, parts, dataset checksum, per-part figures,
                             every file's shape/dtype/bytes/sha256, format version
    .verified.json           files whose sha256 was checked, by size and mtime (gnnrun.io)
    node_owner.npy           [N] part that owns each original vertex (edge cut) or
                             holds its root clone (vertex cut)
    node_local.npy           [N] the vertex's partition-local id (VID_p) in that part
    part-000/ ...            one folder per part

Edge-cut part (`kind = "edge_cut"`): local ids 0..num_solid-1 are the part's own
(solid) vertices in increasing original id, then the halo vertices (in-neighbours
owned elsewhere), also in increasing original id.

    nodes.npy       [num_solid + num_halo] original id (VID_o) of every local vertex
    indptr.npy      [num_solid + 1] in-CSR over the solid vertices
    indices.npy     local ids of the in-neighbours (solid or halo)
    halo_owner.npy  [num_halo] owning part of each halo vertex
    feat.npy, label.npy              rows of the solid vertices
    train_idx/val_idx/test_idx.npy   local ids of the part's solid split vertices
    edge_type.npy   (heterogeneous graphs) the relation of each CSR edge
    feat_t{i}.npy   (heterogeneous graphs) the features of vertex type i's solid
                    vertices, which come type after type in local order

Vertex-cut part (`kind = "vertex_cut"`): every edge lives in exactly one part;
a vertex has a clone in every part holding one of its edges (or, if it has no
edges, in one part). One clone of each vertex is its root.

    nodes.npy        [num_local] original id of every local clone, increasing
    indptr.npy       [num_local + 1] in-CSR of the part's own edges
    indices.npy      local ids of the sources
    root_part.npy    [num_local] part holding the root clone of each local vertex
    clone_links.npy  [K, 3] (my local id, other part, other local id): a root has one
                     row per leaf, a leaf one row for its root; rows sorted by
                     (other part, original id), so both sides list a pair in the
                     same order and can exchange without sending ids
    feat.npy, label.npy              rows of every local clone (split vertices carry
                                     the original features)
    train_idx/val_idx/test_idx.npy   local ids of split vertices whose root is here

Row-block part (`kind = "block1d"`, gnnrun/partition/block1d.py): the vertices are
renumbered (a seeded random permutation) and the renumbered rows cut into P
blocks whose sizes differ by at most one (`summary.block_bounds`); part i holds
block i's rows of GCN's normalised adjacency matrix D^-1/2 (A + I) D^-1/2, split
by column into P tiles. A vertex's local id is its row in the block.

    nodes.npy        [rows] original id of every row
    tile_indptr.npy  [P * rows + 1] CSR of the stacked tiles: row j * rows + r holds
                     row r's entries in column tile j
    tile_indices.npy columns within block j, increasing in each row
    tile_values.npy  float32 values
    tile_t_*.npy     the same for the transposed matrix, only where it differs
                     (a directed graph: `summary.symmetric` is false), in every part
    feat.npy, label.npy              rows of the block
    train_idx/val_idx/test_idx.npy   local ids of the block's split vertices
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.errors import GnnrunError
from gnnrun.io import (
    check_files,
    check_recorded_file,
    load_recorded_array,
    read_manifest,
    shape_problem,
)

FORMAT_VERSION = 1
KINDS = ("edge_cut", "vertex_cut", "block1d")
COMMON_ARRAYS = ("nodes", "indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")
# manifest.json's fields that the loader reads besides the file records, and their JSON types.
MANIFEST_FIELDS: dict[str, type] = {
    "kind": str,
    "method": str,
    "num_parts": int,
    "config": dict,
    "dataset": dict,
    "parts": list,
}
KIND_ARRAYS = {
    "edge_cut": COMMON_ARRAYS + ("halo_owner",),
    "vertex_cut": COMMON_ARRAYS + ("root_part", "clone_links"),
    "block1d": ("nodes", "tile_indptr", "tile_indices", "tile_values", "feat", "label")
    + ("train_idx", "val_idx", "test_idx"),
}
# Arrays a kind's parts hold only in some partitions: all of them in every part, or none.
OPTIONAL_ARRAYS = {
    "block1d": ("tile_t_indptr", "tile_t_indices", "tile_t_values"),
    "edge_cut": ("trainer",),  # parts shared by several trainers: each vertex's trainer
}


# The partitioner a message about a partition of the wrong kind suggests.
PARTITIONER_OF_KIND = {"edge_cut": "metis", "vertex_cut": "libra", "block1d": "block1d"}


def part_dir_name(part: int) -> str:
    return f"part-{part:03d}"


@dataclass
class Part:
    """One rank's share of a partition, memory-mapped."""

    part_id: int
    num_parts: int
    kind: str
    arrays: dict[str, np.ndarray]
    manifest: dict[str, Any]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    @property
    def num_local(self) -> int:
        return int(self.arrays["nodes"].shape[0])

    @property
    def num_solid(self) -> int:
        """Edge cut: the owned vertices (the CSR's rows). Vertex cut: every local clone."""
        return int(self.arrays["indptr"].shape[0] - 1)


@dataclass
class PartitionBook:
    """The manifest and the global maps of a written partition."""

    path: Path
    manifest: dict[str, Any]

    @property
    def num_parts(self) -> int:
        return int(self.manifest["num_parts"])

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def trainers_per_part(self) -> int:
        """Ranks that share each part (a machine's trainers, `partitioner=two_level`)."""
        return int(self.manifest.get("trainers_per_part", 1))

    @property
    def num_ranks(self) -> int:
        return self.num_parts * self.trainers_per_part

    def part_of_rank(self, rank: int) -> int:
        """Ranks r * T .. r * T + T - 1 share part r."""
        return rank // self.trainers_per_part

    @property
    def dataset_checksum(self) -> str:
        return self.manifest["dataset"]["checksum"]

    def node_owner(self) -> np.ndarray:
        return _load_record(self.path, "node_owner.npy", self.manifest["files"]["node_owner.npy"])

    def node_local(self) -> np.ndarray:
        return _load_record(self.path, "node_local.npy", self.manifest["files"]["node_local.npy"])

    def load_part(self, part: int) -> Part:
        if not 0 <= part < self.num_parts:
            raise GnnrunError(f"part {part} does not exist: {self.path} has {self.num_parts} parts")
        prefix = f"{part_dir_name(part)}/"
        arrays = {
            rel[len(prefix) :].removesuffix(".npy"): _load_record(self.path, rel, record)
            for rel, record in self.manifest["files"].items()
            if rel.startswith(prefix)
        }
        return Part(part, self.num_parts, self.kind, arrays, self.manifest)

    def verify(self) -> None:
        """Re-hash every file against the manifest (slow on big partitions; sizes are always checked)."""
        for rel, record in self.manifest["files"].items():
            check_recorded_file(self.path / rel, record, _REDO.format(path=self.path), verify=True)


_REDO = "the partition at {path} is corrupt; run `gnnrun partition` again to rewrite it"


def open_partition(
    path: Path,
    *,
    dataset_checksum: str | None = None,
    world_size: int | None = None,
    kind: str | None = None,
    shared_parts: bool = False,
    fix: str | None = None,
) -> PartitionBook:
    """Open a partition directory, refusing one that does not fit the run (`fix`, when
    given, replaces the advice to partition again of a damaged or stale one).

    Checks, each with a message that says how to fix it: the directory and its
    manifest exist (an interrupted write leaves neither), the format version,
    every listed file is present with the recorded size, the partition was made
    from this dataset, it has one part per rank (or per `trainers_per_part` ranks, where
    the algorithm reads `shared_parts`), and it is of the kind the algorithm needs.
    """
    path = Path(path)
    redo = fix or _REDO.format(path=path)
    manifest = read_manifest(
        path,
        "manifest.json",
        FORMAT_VERSION,
        "partition",
        "create it with `gnnrun partition dataset=... partitioner=... partitioner.num_parts=...`",
        fields=MANIFEST_FIELDS,
        damaged_fix=redo,
    )
    problem = _layout_problem(manifest)
    if problem:
        raise GnnrunError(f"{path / 'manifest.json'} is damaged ({problem}): {redo}")
    check_files(path, manifest["files"], redo)
    book = PartitionBook(path, manifest)
    if dataset_checksum is not None and book.dataset_checksum != dataset_checksum:
        raise GnnrunError(
            f"{path} was made from dataset {manifest['dataset']['name']!r} with checksum "
            f"{book.dataset_checksum[:12]}, but the dataset now has checksum {dataset_checksum[:12]}: "
            f"{fix or 'partition this dataset again with `gnnrun partition dataset=...`'}"
        )
    if world_size is not None and book.trainers_per_part > 1 and not shared_parts:
        raise GnnrunError(
            f"{path} has one part for every {book.trainers_per_part} trainers (a machine's), "
            "which only algorithm=minibatch and algorithm=pipeline share: partition with "
            "partitioner.layout=trainers, or choose one of those algorithms"
        )
    if world_size is not None and book.trainers_per_part > 1 and book.num_ranks != world_size:
        raise GnnrunError(
            f"{path} has {book.num_parts} parts for {book.trainers_per_part} trainers each, "
            f"but the run has {world_size} ranks: use cluster.nprocs={book.num_ranks}, or "
            f"partition again with partitioner.num_parts={world_size}"
        )
    if world_size is not None and book.trainers_per_part == 1 and book.num_parts != world_size:
        raise GnnrunError(
            f"{path} has {book.num_parts} parts but the run has {world_size} ranks: use "
            f"cluster.nprocs={book.num_parts}, or partition again with partitioner.num_parts={world_size}"
        )
    if kind is not None and book.kind != kind:
        raise GnnrunError(
            f"{path} is a partition of kind {book.kind} ({manifest['method']}) but this algorithm "
            f"needs kind {kind}: choose partitioner={PARTITIONER_OF_KIND[kind]}"
        )
    return book


def _layout_problem(manifest: dict[str, Any]) -> str | None:
    """Why the manifest does not describe a whole partition of its kind (None: it does)."""
    problem = shape_problem(manifest["dataset"], {"name": str, "checksum": str}, "its 'dataset'")
    if problem:
        return problem
    if manifest["kind"] not in KINDS:
        return f"its kind {manifest['kind']!r} is not one of {', '.join(KINDS)}"
    if manifest["num_parts"] < 1 or len(manifest["parts"]) != manifest["num_parts"]:
        return f"{len(manifest['parts'])} part entries for num_parts={manifest['num_parts']}"
    expected = ["node_owner.npy", "node_local.npy"] + [
        f"{part_dir_name(part)}/{name}.npy"
        for part in range(manifest["num_parts"])
        for name in KIND_ARRAYS[manifest["kind"]]
    ]
    optional = OPTIONAL_ARRAYS.get(manifest["kind"], ())
    if optional and f"{part_dir_name(0)}/{optional[0]}.npy" in manifest["files"]:
        expected += [
            f"{part_dir_name(part)}/{name}.npy"
            for part in range(manifest["num_parts"])
            for name in optional
        ]
    missing = [rel for rel in expected if rel not in manifest["files"]]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return f"it lacks the record of {', '.join(missing[:3])}{more}"
    return None


def _load_record(root: Path, rel: str, record: dict[str, Any]) -> np.ndarray:
    return load_recorded_array(root / rel, record, _REDO.format(path=root))
