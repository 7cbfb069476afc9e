"""The prepared dataset: `meta.json` plus plain `.npy` arrays, memory-mapped on load.

Graph convention, used everywhere in gnnrun: the CSR is over *in*-edges. Row `v`
(`indices[indptr[v]:indptr[v+1]]`) lists the sources `u` of the edges `u -> v`,
which is exactly what aggregation into `v` reads. Undirected graphs store both
directions. Self-loops and duplicate edges are removed when a dataset is
prepared; models that want self-loops (GCN) add them themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnrun.data.hetero import HeteroSchema, Relation, edge_problems, typed_csr
from gnnrun.errors import GnnrunError
from gnnrun.io import (
    atomic_directory,
    check_files,
    combined_digest,
    load_recorded_array,
    mark_verified,
    read_manifest,
    save_array,
    write_json,
)

FORMAT_VERSION = 1
ARRAY_NAMES = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")
# input_ids: written only when the dataset was renumbered (gnnrun.data.reorder);
# link_*: a link-prediction copy's edges (gnnrun.data.edge_split).
OPTIONAL_ARRAY_NAMES = ("input_ids", "link_train", "link_val", "link_test")
LINK_SPLITS = ("link_train", "link_val", "link_test")
TASKS = ("multiclass", "binary", "multilabel")
# meta.json's fields that `load` reads besides the file records, and their JSON types.
META_FIELDS: dict[str, type] = {
    "name": str,
    "num_classes": int,
    "directed": bool,
    "task": str,
    "info": dict,
    "checksum": str,
}


def task_for(num_classes: int) -> str:
    """Two classes are a binary task (reported with ROC-AUC), more are multiclass."""
    return "binary" if num_classes == 2 else "multiclass"


def too_many_classes(label: np.ndarray, num_classes: int) -> str | None:
    """Why `num_classes` = max(label) + 1 cannot be right (None when it is plausible): more
    classes than labelled vertices means sparse class ids, and the model's output layer
    (and every per-class buffer) would be that wide. For sources that take the class
    count from the labels (custom, heterophilous); others have it from their metadata."""
    labelled = label[label >= 0]
    if num_classes <= max(labelled.size, 2):
        return None
    distinct = int(np.unique(labelled).size)
    top = int(labelled.max()) if labelled.size else -1
    return (
        f"labels run up to {top} for {labelled.size} labelled vertices ({distinct} distinct "
        f"values), which would make {num_classes} classes: renumber them 0..C-1 and keep -1 "
        "for unlabelled vertices, e.g. label[label >= 0] = "
        "numpy.unique(label[label >= 0], return_inverse=True)[1]"
    )


@dataclass
class GraphDataset:
    """A node-classification graph: in-CSR, features, labels and the split.

    `label` is int64 with -1 for unlabelled vertices; a multi-label dataset's
    (task "multilabel") is an N x C matrix of 0 / 1, -1 where a label is unknown,
    `num_classes` = C (gnnrun.tasks.multilabel). Split arrays hold sorted
    global vertex ids. `input_ids[v]` is the id vertex v has in the source when
    the dataset was renumbered (`dataset.reorder`); None when the ids are the
    source's. Arrays may be in memory or memory-mapped from disk.
    """

    name: str
    indptr: np.ndarray
    indices: np.ndarray
    feat: np.ndarray
    label: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int
    directed: bool = False
    task: str = "multiclass"
    info: dict[str, Any] = field(default_factory=dict)  # source, generator settings, notes
    checksum: str | None = None  # set once written or loaded
    path: Path | None = None
    input_ids: np.ndarray | None = None
    # A heterogeneous graph (gnnrun.data.hetero): its types, each edge's relation, and
    # the features of each type (None for a featureless one); `feat` then has no columns.
    hetero: HeteroSchema | None = None
    edge_type: np.ndarray | None = None
    typed_feat: list[np.ndarray | None] | None = None
    # Link prediction (gnnrun.data.edge_split): the (source, destination) pairs [2, E] of
    # the training, validation and test edges; the CSR then holds the training edges only.
    link_train: np.ndarray | None = None
    link_val: np.ndarray | None = None
    link_test: np.ndarray | None = None

    @classmethod
    def heterogeneous(
        cls,
        name: str,
        schema: HeteroSchema,
        edges: dict[Relation, tuple[np.ndarray, np.ndarray]],
        typed_feat: dict[str, np.ndarray],
        label: np.ndarray,
        splits: tuple[np.ndarray, np.ndarray, np.ndarray],
        num_classes: int,
        info: dict[str, Any],
    ) -> GraphDataset:
        """A heterogeneous dataset from its typed parts, all in ids within their types
        (gnnrun.data.hetero): each relation's (source, destination) edges, each featured
        type's features by type name, and the target type's labels and train / val / test."""
        indptr, indices, edge_type = typed_csr(schema, edges)
        n = int(schema.offsets[-1])
        full_label = np.full(n, -1, dtype=np.int64)
        full_label[schema.to_homogeneous(schema.target, np.arange(label.size))] = label
        train_idx, val_idx, test_idx = (schema.to_homogeneous(schema.target, s) for s in splits)
        return cls(
            name=name,
            indptr=indptr,
            indices=indices,
            feat=np.zeros((n, 0), dtype=np.float32),
            label=full_label,
            train_idx=train_idx,
            val_idx=val_idx,
            test_idx=test_idx,
            num_classes=num_classes,
            directed=True,  # each relation is directed; a reverse is a relation of its own
            task=task_for(num_classes),
            info=info,
            hetero=schema,
            edge_type=edge_type,
            typed_feat=[
                np.ascontiguousarray(typed_feat[t], dtype=np.float32) if t in typed_feat else None
                for t in schema.node_types
            ],
        )

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Directed edges stored (an undirected edge counts twice)."""
        return int(self.indices.shape[0])

    @property
    def feat_dim(self) -> int:
        return int(self.feat.shape[1])

    def in_degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays the prepared format stores: the required ones, and the optional ones set."""
        names = ARRAY_NAMES + tuple(n for n in OPTIONAL_ARRAY_NAMES if getattr(self, n) is not None)
        arrays = {name: getattr(self, name) for name in names}
        if self.hetero is not None:
            arrays["edge_type"] = self.edge_type
            for t, feat in enumerate(self.typed_feat or []):
                if feat is not None:
                    arrays[typed_feat_name(t)] = feat
        return arrays

    def source_ids(self, ids: np.ndarray) -> np.ndarray:
        """The source's ids of the dataset's vertices `ids` (the same ids when not renumbered)."""
        ids = np.asarray(ids)
        return ids if self.input_ids is None else np.asarray(self.input_ids)[ids]

    def validate(self) -> None:
        """Check the structural invariants; raise GnnrunError naming the first broken one."""
        n = self.num_nodes
        problems = []
        if self.indptr[0] != 0 or self.indptr[-1] != self.indices.shape[0]:
            problems.append("indptr does not span indices")
        if n and np.any(np.diff(self.indptr) < 0):
            problems.append("indptr is not non-decreasing")
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= n):
            problems.append("indices has ids outside [0, num_nodes)")
        if self.feat.ndim != 2 or self.feat.shape[0] != n:
            problems.append(f"feat has shape {self.feat.shape}, expected ({n}, dim)")
        multilabel = self.task == "multilabel"
        if multilabel:
            if self.label.shape != (n, self.num_classes):
                problems.append(
                    f"label has shape {self.label.shape}, expected ({n}, {self.num_classes}) "
                    "(one column per label)"
                )
            elif self.label.size and (self.label.min() < -1 or self.label.max() > 1):
                problems.append("a multi-label dataset's labels are 0, 1 or -1 (unknown)")
        elif self.label.shape != (n,):
            problems.append(f"label has shape {self.label.shape}, expected ({n},)")
        elif self.label.size and self.label.max() >= self.num_classes:
            problems.append("label has values >= num_classes")
        # A vertex with no known label (every one unknown, for multi-label) is unlabelled.
        known = self.label >= 0
        labelled = known.any(axis=1) if multilabel and known.ndim == 2 else known
        for split in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(self, split)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                problems.append(f"{split} has ids outside [0, num_nodes)")
            elif idx.size and not np.all(labelled[idx]):
                problems.append(f"{split} contains unlabelled vertices")
        if self.task not in TASKS:
            problems.append(f"task {self.task!r} is not one of {TASKS}")
        if self.input_ids is not None and (
            self.input_ids.shape != (n,)
            or not np.array_equal(np.bincount(self.input_ids, minlength=n), np.ones(n, np.int64))
        ):
            problems.append("input_ids is not a permutation of [0, num_nodes)")
        for split in LINK_SPLITS:
            edges = getattr(self, split)
            if edges is None:
                continue
            if edges.ndim != 2 or edges.shape[0] != 2:
                problems.append(f"{split} has shape {edges.shape}, expected (2, edges)")
            elif edges.size and (edges.min() < 0 or edges.max() >= n):
                problems.append(f"{split} has ids outside [0, num_nodes)")
        if self.hetero is not None:
            problems += self._hetero_problems()
        if problems:
            raise GnnrunError(f"dataset {self.name!r} is invalid: " + "; ".join(problems))

    def _hetero_problems(self) -> list[str]:
        schema = self.hetero
        assert schema is not None
        problems = schema.problems()
        if problems:
            return problems
        if int(schema.offsets[-1]) != self.num_nodes:
            return [
                f"the types' {int(schema.offsets[-1])} vertices are not the {self.num_nodes} of the CSR"
            ]
        if self.edge_type is None:
            return ["edge_type is missing"]
        problems += edge_problems(schema, self.indptr, self.indices, np.asarray(self.edge_type))
        typed = self.typed_feat or [None] * schema.num_types
        for t, (name, count, dim) in enumerate(
            zip(schema.node_types, schema.type_counts, schema.feat_dims, strict=True)
        ):
            feat = typed[t] if t < len(typed) else None
            expected = (count, dim) if dim else None
            shape = None if feat is None else tuple(feat.shape)
            if shape != expected:
                problems.append(f"type {name!r} has features of shape {shape}, expected {expected}")
        if self.feat.shape[1] != 0:
            problems.append(
                "feat of a heterogeneous dataset has no columns (features are per type)"
            )
        labelled = np.flatnonzero(np.asarray(self.label) >= 0)
        if labelled.size and np.any(schema.type_of(labelled) != schema.target_type):
            problems.append(f"vertices outside the target type {schema.target!r} are labelled")
        return problems

    def statistics(self) -> dict[str, Any]:
        deg = self.in_degrees()
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "directed": self.directed,
            "feat_dim": self.feat_dim,
            "num_classes": self.num_classes,
            "task": self.task,
            "num_train": int(self.train_idx.size),
            "num_val": int(self.val_idx.size),
            "num_test": int(self.test_idx.size),
            "avg_degree": float(deg.mean()) if deg.size else 0.0,
            "max_degree": int(deg.max()) if deg.size else 0,
            "isolated_nodes": int(np.count_nonzero(deg == 0)),
            "vertex_order": self.info.get("reorder", {}).get("method", "source"),
            **{  # a link-prediction copy: its edge sets (pairs, on an undirected graph)
                f"{split}_edges": int(edges.shape[1])
                for split in LINK_SPLITS
                if (edges := getattr(self, split)) is not None
            },
            **({"heterogeneous": self._hetero_statistics()} if self.hetero is not None else {}),
        }

    def _hetero_statistics(self) -> dict[str, Any]:
        schema = self.hetero
        assert schema is not None and self.edge_type is not None
        edges = np.bincount(
            np.asarray(self.edge_type, dtype=np.int64), minlength=schema.num_relations
        )
        return {
            "target": schema.target,
            "node_types": {
                name: {"vertices": count, "feat_dim": dim}
                for name, count, dim in zip(
                    schema.node_types, schema.type_counts, schema.feat_dims, strict=True
                )
            },
            "relations": {
                f"{s} -{r}-> {d}": int(count)
                for (s, r, d), count in zip(schema.relations, edges, strict=True)
            },
        }

    def save(self, path: Path) -> str:
        """Write the prepared format atomically; return the dataset checksum."""
        self.validate()
        path = Path(path)
        with atomic_directory(path) as tmp:
            files = {name: save_array(tmp, name, array) for name, array in self.arrays().items()}
            # A source whose input files fix the prepared bytes may name the checksum
            # (gnnrun.data.chunked), so that parts made from those files match this copy.
            checksum = self.info.get("input_checksum") or combined_digest(files)
            write_json(tmp / "meta.json", self._meta(files, checksum))
            mark_verified(tmp, {f"{name}.npy": record for name, record in files.items()})
        self.checksum, self.path = checksum, path
        return checksum

    def _meta(self, files: dict[str, Any], checksum: str) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "feat_dim": self.feat_dim,
            "num_classes": self.num_classes,
            "directed": self.directed,
            "task": self.task,
            "info": self.info,
            **({"hetero": self.hetero.to_json()} if self.hetero is not None else {}),
            "files": files,
            "checksum": checksum,
        }

    @classmethod
    def load(cls, path: Path, mmap: bool = True, verify: bool = False) -> GraphDataset:
        """Open a prepared dataset, its files checked against meta.json (io.check_files);
        `verify` re-hashes every file even where it is known to be unchanged."""
        path = Path(path)
        meta = read_manifest(
            path,
            "meta.json",
            FORMAT_VERSION,
            "prepared dataset",
            "create it with `gnnrun data prepare dataset=NAME`",
            fields=META_FIELDS,
            damaged_fix=_prepare_again("NAME", path),
        )
        fix = _prepare_again(meta["name"], path)
        missing = [f"{n}.npy" for n in ARRAY_NAMES if n not in meta["files"]]
        if missing:
            problem = f"it lacks the record of {', '.join(missing)}"
        elif meta["task"] not in TASKS:
            problem = f"its task {meta['task']!r} is not one of {', '.join(TASKS)}"
        else:
            problem = None
        if problem:
            raise GnnrunError(f"{path / 'meta.json'} is damaged ({problem}): {fix}")
        names = ARRAY_NAMES + tuple(n for n in OPTIONAL_ARRAY_NAMES if n in meta["files"])
        hetero = HeteroSchema.from_json(meta["hetero"]) if "hetero" in meta else None
        if hetero is not None:
            names += ("edge_type",) + tuple(
                typed_feat_name(t) for t, dim in enumerate(hetero.feat_dims) if dim
            )
        absent = [n for n in names if n not in meta["files"]]
        if absent:
            raise GnnrunError(
                f"{path / 'meta.json'} is damaged (it lacks the record of "
                f"{', '.join(a + '.npy' for a in absent)}): {fix}"
            )
        records = {f"{n}.npy": meta["files"][n] for n in names}
        fields = {key: meta[key] for key in META_FIELDS}
        # Files trusted by size and mtime (big ones) may have been rewritten keeping both.
        trusted = [] if verify else check_files(path, records, fix)
        arrays = {
            name: load_recorded_array(
                path / f"{name}.npy", records[f"{name}.npy"], fix, mmap, verify
            )
            for name in names
        }
        if hetero is not None:
            arrays["typed_feat"] = [
                arrays.pop(typed_feat_name(t), None) for t in range(hetero.num_types)
            ]
        dataset = cls(path=path, hetero=hetero, **fields, **arrays)
        if trusted:  # ids out of range would reach the kernels (a traceback, or worse)
            try:
                dataset.validate()
            except GnnrunError as exc:
                problem = str(exc).split(": ", 1)[-1]
                raise GnnrunError(
                    f"{path} is damaged ({problem}: a file was rewritten with its size and "
                    f"modification time kept): {fix}"
                ) from None
        return dataset


def typed_feat_name(node_type: int) -> str:
    """The array of a heterogeneous dataset's (or part's) features of one vertex type."""
    return f"feat_t{node_type}"


def _prepare_again(name: str, path: Path) -> str:
    return (
        f"prepare it again with `gnnrun data prepare dataset={name} --force` "
        f"(the directory is {path})"
    )
