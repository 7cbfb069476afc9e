"""Your own heterogeneous graph, from one `.npz` or a directory of `.npy` files
(`dataset=custom`, which reads the file; the arrays' reading: gnnrun.data.custom_files).

Heterogeneous graphs (gnnrun.data.hetero) in the style of DGL's heterograph
and PyG's HeteroData. A file or directory holding any of `node_types`,
`target`, `edge_index__*`, `feat__*` or `num_nodes__*` is read as one, and
then must not hold the homogeneous graph or `feat` keys. Type and relation
names are plain names: a letter, then letters, digits and single underscores,
not ending in one (so `__` only ever separates the parts of an array name).
Ids are within their type: each type's vertices are 0..count-1.

- `edge_index__<src>__<relation>__<dst>`: 2 x E int, one array per canonical
  relation (source type, name, destination type); row 0 the source ids (of
  type `src`), row 1 the destination ids (of type `dst`). At least one;
- `target`: str scalar, the labelled type;
- `label`: int, one per vertex of the target type, class ids 0..C-1, -1 for
  unlabelled vertices (every vertex of another type is unlabelled);
- `node_types` (optional): 1-d str array of every type name, in the order of
  the id ranges; without it, the types the array names mention, sorted;
- `num_nodes__<type>` (optional): int scalar, the type's vertex count; without
  it the count comes from `feat__<type>` or `label` (target), else from the
  largest id in the type's edges plus one. All that are given must agree;
- `feat__<type>` (optional): count x F real, the type's features; a type without
  one is featureless (models learn an embedding per vertex);
- a split (optional) of the target type: `train_idx`, `val_idx`, `test_idx`
  (ids within the target type) or `train_mask`, `val_mask`, `test_mask` (one
  bool per target vertex), all three of one kind, disjoint, labelled vertices
  only; without one, a seeded stratified split of the labelled target vertices
  (`dataset.split`, `dataset.seed`).

Relations are numbered in sorted (source, name, destination) order. With
`dataset.to_undirected` (the default) every given relation whose reverse is not
given gets it, after the given ones: the reverse of `(s, r, d)` is
`(d, rev_r, s)` (and that of `(s, rev_r, d)` is `(d, r, s)`), also for a
relation from a type to itself, whose reverse is another relation as in DGL's
examples. With `dataset.to_undirected=false` only the given relations are
kept. Within a relation, self-loops and repeated edges are dropped.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from gnnrun.data.custom_files import SPLIT_IDX, SPLIT_MASK, int_array, split_from_file
from gnnrun.data.dataset import GraphDataset, too_many_classes
from gnnrun.data.graph import stratified_split
from gnnrun.data.hetero import HeteroSchema, Relation, add_reverses
from gnnrun.errors import GnnrunError

EDGE_PREFIX = "edge_index__"
FEAT_PREFIX = "feat__"
COUNT_PREFIX = "num_nodes__"
HETERO_PREFIXES = (EDGE_PREFIX, FEAT_PREFIX, COUNT_PREFIX)
HETERO_KEYS = ("node_types", "target")
HOMOGENEOUS_KEYS = ("edge_index", "edges", "indptr", "indices", "feat", "num_nodes")
SHARED_KEYS = ("label", *SPLIT_IDX, *SPLIT_MASK)
# A type or relation name: `__` never occurs in one, so it can separate an array name's parts.
PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*")
HETERO_EXPECTED = (
    "edge_index__<src>__<relation>__<dst> (2 x E, ids within their types) per relation, "
    "target (the labelled type's name), label (one per target vertex, -1 = unlabelled); "
    "optional node_types, num_nodes__<type>, feat__<type> (count x F), and a split of the "
    "target type (train/val/test_idx or train/val/test_mask)"
)


def is_heterogeneous(arrays: dict[str, np.ndarray]) -> bool:
    return any(_hetero_key(key) for key in arrays)


def _hetero_key(key: str) -> bool:
    return key in HETERO_KEYS or key.startswith(HETERO_PREFIXES)


def _hetero_fail(path: Path, problem: str) -> GnnrunError:
    return GnnrunError(
        f"custom dataset {path}: {problem}; a heterogeneous graph holds {HETERO_EXPECTED}"
    )


def _listed(keys: list[str], most: int = 6) -> str:
    return ", ".join(keys[:most]) + (f", ... ({len(keys)} in all)" if len(keys) > most else "")


def _check_keys(path: Path, arrays: dict[str, np.ndarray]) -> None:
    hetero = sorted(k for k in arrays if _hetero_key(k))
    homogeneous = sorted(k for k in arrays if k in HOMOGENEOUS_KEYS)
    if homogeneous:
        raise _hetero_fail(
            path,
            f"it mixes homogeneous keys ({_listed(homogeneous)}) with heterogeneous ones "
            f"({_listed(hetero)}); keep one layout: a heterogeneous graph names each relation's "
            "edges edge_index__<src>__<relation>__<dst> and each type's features feat__<type>, "
            "a homogeneous one has none of node_types, target, edge_index__*, feat__*, "
            "num_nodes__*",
        )
    unknown = sorted(k for k in arrays if not _hetero_key(k) and k not in SHARED_KEYS)
    if unknown:
        single = [k for k in unknown if k.startswith(tuple(p[:-1] for p in HETERO_PREFIXES))]
        hint = (
            f" ({single[0]}: the parts of an array name are joined by two underscores, "
            "as in feat__paper)"
            if single
            else ""
        )
        raise _hetero_fail(path, f"unknown arrays {_listed(unknown)}{hint}; rename or remove them")


def _plain_name(path: Path, name: str, where: str) -> str:
    if not PLAIN_NAME.fullmatch(name):
        cleaned = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
        example = f" such as {cleaned!r}" if PLAIN_NAME.fullmatch(cleaned) else ""
        raise _hetero_fail(
            path,
            f"{where} {name!r} is not a plain name: use a letter, then letters, digits and "
            f"single underscores, not ending in one{example}",
        )
    return name


def _strings(path: Path, arrays: dict[str, np.ndarray], key: str, example: str) -> list[str]:
    value = arrays[key]
    if value.dtype.kind not in "US":
        raise _hetero_fail(
            path, f"{key} has dtype {value.dtype}, expected strings, e.g. {key}={example}"
        )
    return [v.decode() if isinstance(v, bytes) else str(v) for v in value.reshape(-1).tolist()]


def _relation_arrays(path: Path, arrays: dict[str, np.ndarray]) -> dict[Relation, np.ndarray]:
    """The given relations, each with its 2 x E int64 ids (within their types)."""
    given: dict[Relation, np.ndarray] = {}
    for key in sorted(arrays):
        if not key.startswith(EDGE_PREFIX):
            continue
        parts = key[len(EDGE_PREFIX) :].split("__")
        if "___" in key:
            raise _hetero_fail(
                path,
                f"{key} has three underscores in a row: the names joined by __ must not start "
                "or end with _",
            )
        if len(parts) != 3:
            raise _hetero_fail(
                path,
                f"{key} is not named edge_index__<source type>__<relation>__<destination type> "
                "(three plain names joined by __)",
            )
        for part, what in zip(parts, ("source type", "relation", "destination type"), strict=True):
            _plain_name(path, part, f"{key}: its {what}")
        edge_index = int_array(path, arrays, key, _hetero_fail)
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise _hetero_fail(
                path,
                f"{key} has shape {edge_index.shape}, expected (2, E): row 0 the sources, "
                "row 1 the destinations",
            )
        given[(parts[0], parts[1], parts[2])] = edge_index
    if not given:
        raise _hetero_fail(
            path,
            "it holds no relation; give each relation's edges as "
            "edge_index__<src>__<relation>__<dst>",
        )
    return given


def _node_types(
    path: Path, arrays: dict[str, np.ndarray], given: dict[Relation, np.ndarray], target: str
) -> list[str]:
    """The vertex types in id-range order, every type an array name mentions among them."""
    mentions = [(f"{EDGE_PREFIX}{s}__{r}__{d}", t) for s, r, d in sorted(given) for t in (s, d)] + [
        (key, _plain_name(path, key[len(prefix) :], f"{key}: its vertex type"))
        for key in sorted(arrays)
        for prefix in (FEAT_PREFIX, COUNT_PREFIX)
        if key.startswith(prefix)
    ]
    mentions.append(("target", target))
    if "node_types" not in arrays:
        return sorted({t for _, t in mentions})
    if arrays["node_types"].ndim != 1 or arrays["node_types"].size == 0:
        raise _hetero_fail(
            path,
            f"node_types has shape {arrays['node_types'].shape}, expected a 1-d list of the "
            "type names, e.g. node_types=numpy.array(['paper', 'author'])",
        )
    node_types = _strings(path, arrays, "node_types", "numpy.array(['paper', 'author'])")
    for name in node_types:
        _plain_name(path, name, "node_types: the type")
    repeated = sorted({t for t in node_types if node_types.count(t) > 1})
    if repeated:
        raise _hetero_fail(path, f"node_types repeats {', '.join(repeated)}; list each type once")
    for key, name in mentions:
        if name not in node_types:
            raise _hetero_fail(
                path,
                f"{key} names the vertex type {name!r}, which node_types ({', '.join(node_types)}) "
                "lacks: add it to node_types or correct the name",
            )
    return node_types


def _target(path: Path, arrays: dict[str, np.ndarray]) -> str:
    if "target" not in arrays:
        raise _hetero_fail(
            path,
            "target is missing: save the name of the labelled vertex type as target, "
            "e.g. target=numpy.array('paper')",
        )
    names = _strings(path, arrays, "target", "numpy.array('paper')")
    if len(names) != 1:
        raise _hetero_fail(
            path, f"target holds {len(names)} names, expected one: the labelled vertex type"
        )
    return _plain_name(path, names[0], "target: the type")


def _type_features(
    path: Path, arrays: dict[str, np.ndarray], node_types: list[str]
) -> dict[str, np.ndarray]:
    feats = {}
    for t in node_types:
        key = FEAT_PREFIX + t
        if key not in arrays:
            continue
        feat = arrays[key]
        if feat.ndim != 2:
            raise _hetero_fail(path, f"{key} has shape {feat.shape}, expected (vertices of {t}, F)")
        if not (np.issubdtype(feat.dtype, np.number) or feat.dtype == np.bool_) or np.iscomplexobj(
            feat
        ):
            raise _hetero_fail(path, f"{key} has dtype {feat.dtype}, expected a real number type")
        if feat.shape[1] == 0:
            raise _hetero_fail(
                path,
                f"{key} has no columns; leave it out to make {t!r} featureless (models learn an "
                "embedding per vertex)",
            )
        feats[t] = feat
    return feats


def _type_counts(
    path: Path,
    arrays: dict[str, np.ndarray],
    node_types: list[str],
    target: str,
    given: dict[Relation, np.ndarray],
    feats: dict[str, np.ndarray],
    label: np.ndarray,
) -> dict[str, tuple[int, str]]:
    """(vertex count, the array it comes from) of each type."""
    counts: dict[str, tuple[int, str]] = {}
    for t in node_types:
        key = COUNT_PREFIX + t
        if key in arrays:
            value = arrays[key]
            if (
                value.size != 1
                or not np.issubdtype(value.dtype, np.integer)
                or int(value.reshape(-1)[0]) < 0
            ):
                raise _hetero_fail(
                    path,
                    f"{key} is {value.tolist()} ({value.dtype}), expected one integer >= 0: "
                    f"the number of {t} vertices",
                )
            counts[t] = (int(value.reshape(-1)[0]), key)
        if t in feats:
            rows = int(feats[t].shape[0])
            if t in counts and counts[t][0] != rows:
                raise _hetero_fail(
                    path,
                    f"{FEAT_PREFIX}{t} has {rows} rows but {key} is {counts[t][0]}; give one "
                    f"feature row per {t} vertex",
                )
            counts.setdefault(t, (rows, FEAT_PREFIX + t))
    if target not in counts:
        counts[target] = (int(label.shape[0]), "label")
    for t in node_types:
        if t in counts:
            continue
        ends = [
            ids[row] for (s, _, d), ids in given.items() for row, u in ((0, s), (1, d)) if u == t
        ]
        top = max((int(e.max()) for e in ends if e.size), default=None)
        if top is None:
            raise _hetero_fail(
                path,
                f"the number of {t} vertices is unknown (no {COUNT_PREFIX}{t}, "
                f"{FEAT_PREFIX}{t} or edges): give {COUNT_PREFIX}{t}",
            )
        counts[t] = (top + 1, f"its largest id in the edges; give {COUNT_PREFIX}{t} if it has more")
    return counts


def _check_label(
    path: Path, label: np.ndarray, target: str, counts: dict[str, tuple[int, str]]
) -> None:
    n, source = counts[target]
    if label.shape[0] != n:
        others = [t for t, (c, _) in counts.items() if t != target and c == label.shape[0]]
        hint = (
            f" ({label.shape[0]} is the number of {' and '.join(others)} vertices: is target right?)"
            if others
            else ""
        )
        if source.startswith(FEAT_PREFIX):  # either may be the wrong one
            problem = (
                f"label has {label.shape[0]} entries but {source} has {n} rows: both hold one "
                f"row per {target} vertex (label its class, -1 for unlabelled){hint}"
            )
        else:
            problem = (
                f"label has {label.shape[0]} entries but the target type {target!r} has {n} "
                f"vertices (from {source}): label holds one class per {target} vertex, -1 for "
                f"unlabelled{hint}"
            )
        raise _hetero_fail(path, problem)
    if label.size and label.min() < -1:
        raise _hetero_fail(
            path, f"label has values below -1 (min {label.min()}); use -1 for unlabelled vertices"
        )
    if not np.any(label >= 0):
        raise _hetero_fail(path, "no vertex has a label (all are -1)")
    if problem := too_many_classes(label, int(label.max()) + 1):
        raise GnnrunError(f"custom dataset {path}: {problem}")


def _check_edge_ids(
    path: Path, given: dict[Relation, np.ndarray], counts: dict[str, tuple[int, str]]
) -> None:
    for (s, r, d), edge_index in given.items():
        for row, (t, end) in enumerate(((s, "source"), (d, "destination"))):
            ids = edge_index[row]
            n, source = counts[t]
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise _hetero_fail(
                    path,
                    f"{EDGE_PREFIX}{s}__{r}__{d} has {end} ids (row {row}) outside [0, {n}) "
                    f"(min {ids.min()}, max {ids.max()}): ids count from 0 within their type, "
                    f"and {t} has {n} vertices (from {source})",
                )


def load_heterogeneous(cfg, path: Path, arrays: dict[str, np.ndarray]) -> GraphDataset:
    """The heterogeneous graph of `arrays`, read from `path`, as the custom dataset's config
    `cfg` (gnnrun.data.custom) says: its name, `to_undirected`, `split` and `seed`."""
    _check_keys(path, arrays)
    given = _relation_arrays(path, arrays)
    target = _target(path, arrays)
    node_types = _node_types(path, arrays, given, target)
    if "label" not in arrays:
        raise _hetero_fail(
            path,
            f"label is missing: give one class per {target} vertex (the target type), "
            "-1 for unlabelled",
        )
    label = int_array(path, arrays, "label", _hetero_fail)
    if label.ndim != 1:
        raise _hetero_fail(path, f"label has shape {label.shape}, expected one class per {target}")
    feats = _type_features(path, arrays, node_types)
    counts = _type_counts(path, arrays, node_types, target, given, feats, label)
    _check_label(path, label, target, counts)
    _check_edge_ids(path, given, counts)

    relations = sorted(given)
    edges = {relation: (ids[0], ids[1]) for relation, ids in given.items()}
    if cfg.to_undirected:
        relations = add_reverses(relations, edges)
    schema = HeteroSchema(
        node_types=node_types,
        type_counts=[counts[t][0] for t in node_types],
        feat_dims=[int(feats[t].shape[1]) if t in feats else 0 for t in node_types],
        relations=relations,
        target=target,
    )
    if problems := schema.problems():  # the checks above should leave none
        raise _hetero_fail(path, "; ".join(problems))

    n_target = counts[target][0]
    split = split_from_file(
        path, arrays, n_target, label, _hetero_fail, ids=f"ids within the target type {target!r}"
    )
    from_file = split is not None
    if split is None:
        fractions = (cfg.split.train, cfg.split.val, cfg.split.test)
        split = stratified_split(label, fractions, cfg.seed)
    info = {"source": "custom", "graph_encoding": "heterogeneous", "split_from_file": from_file}
    num_classes = int(label.max()) + 1
    return GraphDataset.heterogeneous(
        cfg.name, schema, edges, feats, label, split, num_classes, info
    )
