"""A heterogeneous gnnrun dataset as the .npz that scripts/dgl_rgcn.py reads.

gnnrun stores a heterogeneous graph on one homogenised id space (gnnrun.data.hetero:
type t holds the ids `offsets[t] .. offsets[t+1] - 1`, one in-CSR whose edges each
carry their relation). DGL builds a heterograph from one edge list per canonical
relation in ids within their types, which is what this file writes:

- `node_types`: str [T], the target type first (the others in gnnrun's order);
  `target`: str scalar; `num_nodes`: int64 [T], in the order of `node_types`;
- `relations`: str [R, 3], (source type, name, destination type) in gnnrun's order;
- `src_{r}`, `dst_{r}`: int64, relation r's edges (message flows src -> dst) in ids
  within their types, in the CSR's order (by destination, then source);
- `feat`: float32 [target vertices, F] (F = 0 for a featureless target);
  `label`: int64 [target vertices]; `train_idx`, `val_idx`, `test_idx`: int64 ids
  within the target type; `num_classes`: int64 scalar (the dataset's, which the
  worker otherwise takes as the largest label + 1).

The edges are gnnrun's after its loading (self loops dropped, an edge repeated
within one relation kept once, reverse relations already listed), so both sides
train on the same edges. Only the target type's features travel: a dataset whose
other types have features is refused, since the DGL side gives each of them a
learned embedding. Imports numpy only; `dataset` is a gnnrun GraphDataset.

    write_hetero_npz(generate(SyntheticHeteroConfig(num_papers=2000)), "graph.npz")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_hetero_npz(dataset, path: str | Path) -> None:
    """Write heterogeneous `dataset` (a gnnrun GraphDataset) to `path` (module docstring)."""
    schema = dataset.hetero
    if schema is None:
        raise ValueError(f"dataset {dataset.name!r} is not heterogeneous (no `hetero` schema)")
    target = schema.target_type
    typed_feat = dataset.typed_feat or [None] * schema.num_types
    featured = [
        schema.node_types[t]
        for t, feat in enumerate(typed_feat)
        if t != target and feat is not None and np.asarray(feat).shape[-1] > 0
    ]
    if featured:
        raise ValueError(
            f"types {featured} have features, but the .npz carries only the target type's "
            f"({schema.target!r}): the DGL side would give them embeddings instead"
        )
    offsets = schema.offsets
    order = [target] + [t for t in range(schema.num_types) if t != target]
    lo, hi = int(offsets[target]), int(offsets[target + 1])

    indptr = np.asarray(dataset.indptr, dtype=np.int64)
    indices = np.asarray(dataset.indices, dtype=np.int64)
    edge_type = np.asarray(dataset.edge_type, dtype=np.int64)
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    rel_src, rel_dst = schema.relation_types()
    edges = {}
    for r in range(schema.num_relations):
        mine = edge_type == r
        edges[f"src_{r}"] = indices[mine] - offsets[rel_src[r]]
        edges[f"dst_{r}"] = dst[mine] - offsets[rel_dst[r]]

    feat = typed_feat[target]
    feat = (
        np.zeros((hi - lo, 0), dtype=np.float32)
        if feat is None
        else np.ascontiguousarray(feat, dtype=np.float32)
    )

    def within_target(ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < lo or ids.max() >= hi):
            raise ValueError(f"split ids outside the target type {schema.target!r}")
        return ids - lo

    np.savez(
        path,
        node_types=np.array([schema.node_types[t] for t in order]),
        target=np.array(schema.target),
        num_nodes=np.array([schema.type_counts[t] for t in order], dtype=np.int64),
        relations=np.array([list(r) for r in schema.relations]).reshape(-1, 3),
        feat=feat,
        label=np.asarray(dataset.label[lo:hi], dtype=np.int64),
        train_idx=within_target(dataset.train_idx),
        val_idx=within_target(dataset.val_idx),
        test_idx=within_target(dataset.test_idx),
        num_classes=np.array(dataset.num_classes, dtype=np.int64),
        **edges,
    )
