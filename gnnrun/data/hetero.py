"""Heterogeneous graphs: typed vertices and relations on one homogenised id space.

Vertex types occupy consecutive id ranges, in the order of `node_types` (as
DistDGLv2 stores them): type t holds the ids `offsets[t] .. offsets[t+1] - 1`,
and a vertex's id within its type is its id minus `offsets[t]`. Everything
that works on ids (the CSR, partitions, sampling keys) works unchanged on the
homogenised ids; `to_typed` and `to_homogeneous` are the maps both ways.

Relations are canonical edge types `(source type, name, destination type)`,
numbered in the order of `relations`. Every stored in-edge carries its relation
(`edge_type`, aligned with the CSR's `indices`), and each CSR row lists its
edges by relation, then by source: the in-neighbours of `v` by relation `r`
are one contiguous range, row `v * R + r` of `relation_indptr`, which is what
per-relation sampling reads. A graph with one type and one relation has the
bytes of the homogeneous one.

Features are per type (`feat_t{i}.npy`, rows in type order); a type without
features has none (models give its vertices a learnable embedding). Labels
and splits are on the `target` type; every other vertex is unlabelled (-1).
The homogeneous `feat` array of such a dataset has no columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnrun.data.graph import check_edge_keys, index_dtype, sorted_unique

Relation = tuple[str, str, str]  # (source type, name, destination type)


@dataclass
class HeteroSchema:
    """The types of a heterogeneous dataset: what meta.json records under `hetero`."""

    node_types: list[str]
    type_counts: list[int]  # vertices of each type
    feat_dims: list[int]  # feature width of each type; 0: featureless
    relations: list[Relation]
    target: str  # the labelled type

    @property
    def num_types(self) -> int:
        return len(self.node_types)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def offsets(self) -> np.ndarray:
        """[T + 1]: type t's vertices are the ids offsets[t] .. offsets[t+1] - 1."""
        return np.concatenate([[0], np.cumsum(self.type_counts, dtype=np.int64)])

    @property
    def target_type(self) -> int:
        return self.node_types.index(self.target)

    def type_index(self, name: str) -> int:
        return self.node_types.index(name)

    def relation_names(self) -> list[str]:
        return [name for _, name, _ in self.relations]

    def relation_types(self) -> tuple[np.ndarray, np.ndarray]:
        """(source type, destination type) of every relation, as type indices."""
        src = np.array([self.type_index(s) for s, _, _ in self.relations], dtype=np.int64)
        dst = np.array([self.type_index(d) for _, _, d in self.relations], dtype=np.int64)
        return src, dst

    def type_of(self, ids: np.ndarray) -> np.ndarray:
        """The type index of homogenised ids."""
        return np.searchsorted(self.offsets, np.asarray(ids), side="right") - 1

    def to_typed(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(type index, id within the type) of homogenised ids."""
        types = self.type_of(ids)
        return types, np.asarray(ids) - self.offsets[types]

    def to_homogeneous(self, node_type: str | int, typed_ids: np.ndarray) -> np.ndarray:
        """Homogenised ids of vertices `typed_ids` of one type."""
        t = node_type if isinstance(node_type, int) else self.type_index(node_type)
        return np.asarray(typed_ids, dtype=np.int64) + self.offsets[t]

    def problems(self) -> list[str]:
        """What makes the schema inconsistent (empty: nothing)."""
        found = []
        if not self.node_types:
            found.append("no vertex types")
        if len(set(self.node_types)) != len(self.node_types):
            found.append(f"repeated vertex type names {self.node_types}")
        if not (len(self.type_counts) == len(self.feat_dims) == len(self.node_types)):
            found.append("type_counts and feat_dims need one entry per vertex type")
        if any(c < 0 for c in self.type_counts) or any(d < 0 for d in self.feat_dims):
            found.append("negative vertex counts or feature widths")
        if self.target not in self.node_types:
            found.append(f"target type {self.target!r} is not a vertex type")
        if not self.relations:
            found.append("no relations")
        known = set(self.node_types)
        for relation in self.relations:
            if len(relation) != 3 or not {relation[0], relation[2]} <= known:
                found.append(f"relation {tuple(relation)} joins unknown vertex types")
        if len(set(map(tuple, self.relations))) != len(self.relations):
            found.append("repeated relations")
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "node_types": list(self.node_types),
            "type_counts": [int(c) for c in self.type_counts],
            "feat_dims": [int(d) for d in self.feat_dims],
            "relations": [list(r) for r in self.relations],
            "target": self.target,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HeteroSchema:
        return cls(
            node_types=list(data["node_types"]),
            type_counts=[int(c) for c in data["type_counts"]],
            feat_dims=[int(d) for d in data["feat_dims"]],
            relations=[tuple(r) for r in data["relations"]],
            target=str(data["target"]),
        )


def reverse(relation: Relation) -> Relation:
    """`destination -rev_<name>-> source`, the relation's edges turned around (and the
    reverse of `rev_<name>` is `<name>`), as DGL's examples name reverse relations."""
    source, name, destination = relation
    turned = name[len("rev_") :] if name.startswith("rev_") else f"rev_{name}"
    return destination, turned, source


def add_reverses(
    relations: list[Relation], edges: dict[Relation, tuple[np.ndarray, np.ndarray]]
) -> list[Relation]:
    """`relations`, then the reverse of each whose reverse is not among them, whose edges
    (each relation's turned around) go into `edges`: so that messages flow both ways. A
    relation from a type to itself gets its reverse as another relation."""
    given = set(relations)
    added = [reverse(r) for r in relations if reverse(r) not in given]
    for relation in relations:
        if reverse(relation) in added:
            src, dst = edges[relation]
            edges[reverse(relation)] = (dst, src)
    return list(relations) + added


def relation_dtype(num_relations: int) -> np.dtype:
    """The narrowest dtype of a per-edge relation id: one byte per edge for up to 127."""
    return np.dtype(np.int8) if num_relations <= 127 else np.dtype(np.int32)


def typed_csr(
    schema: HeteroSchema, edges: Mapping[Relation, tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The in-CSR of the homogenised graph and each edge's relation, rows listed by
    (relation, source). `edges[relation]` holds (source, destination) ids within their
    types. Self-loops are dropped, and an edge repeated within one relation is kept
    once (the same pair in two relations is two edges)."""
    n = int(schema.offsets[-1])
    num_relations = schema.num_relations
    check_edge_keys(n * num_relations, n)
    keys = []
    for r, relation in enumerate(schema.relations):
        src, dst = edges.get(tuple(relation), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        src = schema.to_homogeneous(relation[0], src)
        dst = schema.to_homogeneous(relation[2], dst)
        keep = src != dst
        keys.append((dst[keep] * num_relations + r) * n + src[keep])
    key = sorted_unique(np.concatenate(keys)) if keys else np.zeros(0, np.int64)
    row = key // n
    indices = (key - row * n).astype(index_dtype(n))
    dst = row // num_relations
    edge_type = (row - dst * num_relations).astype(relation_dtype(num_relations))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, indices, edge_type


def relation_indptr(indptr: np.ndarray, edge_type: np.ndarray, num_relations: int) -> np.ndarray:
    """The CSR over rows `v * R + r` (relation r's in-edges of v) that shares `indices`
    with the in-CSR `indptr` whose rows list their edges by relation: [N * R + 1]."""
    n = indptr.shape[0] - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    counts = np.bincount(dst * num_relations + edge_type, minlength=n * num_relations)
    out = np.zeros(n * num_relations + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def edge_problems(
    schema: HeteroSchema, indptr: np.ndarray, indices: np.ndarray, edge_type: np.ndarray
) -> list[str]:
    """What breaks the typed-CSR invariants: every edge joins the types of its relation,
    and rows list their edges by relation."""
    found = []
    if edge_type.shape != indices.shape:
        return [f"edge_type has shape {edge_type.shape}, expected {indices.shape}"]
    if edge_type.size and (edge_type.min() < 0 or edge_type.max() >= schema.num_relations):
        return [f"edge_type has values outside [0, {schema.num_relations})"]
    rel_src, rel_dst = schema.relation_types()
    relation = edge_type.astype(np.int64)
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    if np.any(schema.type_of(indices) != rel_src[relation]) or np.any(
        schema.type_of(dst) != rel_dst[relation]
    ):
        found.append("some edges do not join the vertex types of their relation")
    row_starts = np.zeros(indices.size, dtype=bool)
    row_starts[indptr[:-1][np.diff(indptr) > 0]] = True
    if np.any((np.diff(relation) < 0) & ~row_starts[1:]):
        found.append("CSR rows do not list their edges by relation")
    return found
