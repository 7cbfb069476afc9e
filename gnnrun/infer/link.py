"""`gnnrun predict` of a task=link run: scores of given vertex pairs.

The ranks compute every vertex's embedding layer-wise over the message-passing
graph (gnnrun.infer.run), exactly as for a node prediction, and write them as
the shards' `embedding` column (on a heterogeneous graph, those of the target
relation's source type). The launching process then reads the pairs of
`predict.candidates` (a `.npy` of [2, P] or [P, 2] vertex ids, in the ids the
shards and the source use: on a heterogeneous graph a source's id within the
relation's source type and a destination's within its destination type),
gathers both ends' embeddings from the ranks' last layer files and scores each
pair with the run's scorer (gnnrun.models.link): `scores.npy` [P] holds the
logits (sigmoid of them: the probability a BCE-trained model gives the edge)
and `candidates.npy` the pairs, as [2, P], beside the shards.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from gnnrun.data.dataset import GraphDataset
from gnnrun.data.edge_split import negative_range, target_relation
from gnnrun.errors import GnnrunError
from gnnrun.models.link import score_pairs


class PairEnd(NamedTuple):
    """The vertices one end of a candidate pair names: ids 0..count-1, which are the
    graph's `first` .. `first + count - 1`; `node_type` on a heterogeneous graph."""

    first: int
    count: int
    node_type: str | None


def pair_ends(dataset: GraphDataset, relation_name: str | None) -> tuple[PairEnd, PairEnd]:
    """A pair's source and destination ends: every vertex, or on a heterogeneous graph
    the types of the relation the run trained on (`task.relation`)."""
    relation = target_relation(dataset, relation_name)
    if relation is None:
        return PairEnd(0, dataset.num_nodes, None), PairEnd(0, dataset.num_nodes, None)
    source, _, destination = dataset.hetero.relations[relation]
    return (
        PairEnd(*negative_range(dataset, relation, "source"), source),
        PairEnd(*negative_range(dataset, relation, "destination"), destination),
    )


def read_candidates(
    path: str | Path, ends: tuple[PairEnd, PairEnd] | None, warn: bool = False
) -> np.ndarray:
    """The [2, P] int64 pairs in `path`, each end's ids checked against `ends` (None, before
    the dataset is known: the file's layout, and no negative id); the error names the file,
    what is wrong and the layout wanted. `warn`: say how a (2, 2) array, which could be
    either layout, is read."""
    path = Path(path)
    wanted = "a .npy of vertex pairs, shape (2, P) or (P, 2), integer ids"
    if not path.is_file():
        raise GnnrunError(f"predict.candidates: {path} does not exist; give {wanted}")
    with open(path, "rb") as f:  # numpy's own message for a text file speaks of pickles
        if f.read(6) != b"\x93NUMPY":
            raise GnnrunError(
                f"predict.candidates: {path} is not a .npy file (numpy.save writes one); "
                f"give {wanted}"
            )
    try:
        pairs = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise GnnrunError(
            f"predict.candidates: cannot read {path} ({exc}); give {wanted}"
        ) from None
    if pairs.ndim != 2 or 2 not in pairs.shape:
        raise GnnrunError(f"predict.candidates: {path} has shape {pairs.shape}; give {wanted}")
    if not np.issubdtype(pairs.dtype, np.integer):
        raise GnnrunError(f"predict.candidates: {path} holds {pairs.dtype}; give {wanted}")
    if pairs.size == 0:
        raise GnnrunError(f"predict.candidates: {path} holds no pairs; give {wanted}")
    if warn and pairs.shape == (2, 2):
        from gnnrun.progress import print_warning

        print_warning(
            f"predict.candidates: {path} has shape (2, 2), read as (2, P): pairs "
            f"{tuple(pairs[:, 0].tolist())} and {tuple(pairs[:, 1].tolist())}; if each row is a "
            "pair, save its transpose"
        )
    pairs = np.ascontiguousarray(pairs if pairs.shape[0] == 2 else pairs.T, dtype=np.int64)
    bad = pairs < 0
    if ends is not None:
        bad |= pairs >= np.array([[ends[0].count], [ends[1].count]])
    if bad.any():
        column = int(np.flatnonzero(bad.any(axis=0))[0])
        end = int(bad[0, column] == 0)  # the first end out of range
        raise GnnrunError(
            f"predict.candidates: pair {column} of {path}, {pairs[:, column].tolist()}, names "
            + _outside(end, ends)
        )
    return pairs


def _outside(end: int, ends: tuple[PairEnd, PairEnd] | None) -> str:
    if ends is None:
        return "a negative id: the ids are the dataset's"
    count, node_type = ends[end].count, ends[end].node_type
    if node_type is None:
        return f"a vertex outside [0, {count}): the ids are the dataset's, 0..{count - 1}"
    which = ("source", "destination")[end]
    return (
        f"a {which} outside [0, {count}): a pair's ids are its source's within type "
        f"{ends[0].node_type} and its destination's within type {ends[1].node_type} "
        "(the run's task.relation)"
    )


def score_candidates(
    embeddings: list[tuple[Path, Path]],
    pairs: np.ndarray,
    ends: tuple[PairEnd, PairEnd],
    num_nodes: int,
    scorer: torch.nn.Module,
    out: Path,
) -> dict[str, dict]:
    """Score `pairs` (ids of `ends`) from every rank's (vertex ids, embedding rows) files,
    and write `scores.npy` and `candidates.npy` into `out`; return their file records."""
    table: np.ndarray | None = None
    for nodes_path, rows_path in embeddings:
        rows = np.load(rows_path, mmap_mode="r")
        if table is None:
            table = np.zeros((num_nodes, rows.shape[1]), dtype=np.float32)
        table[np.load(nodes_path)] = rows
    assert table is not None
    vectors = torch.from_numpy(table)
    u = torch.from_numpy(pairs[0] + ends[0].first)
    v = torch.from_numpy(pairs[1] + ends[1].first)
    with torch.no_grad():
        scores = score_pairs(scorer, vectors, u, v).numpy()
    records = {}
    for name, array in (("scores", scores), ("candidates", pairs)):
        np.save(out / f"{name}.npy", array)
        records[f"{name}.npy"] = {"shape": list(array.shape), "dtype": str(array.dtype)}
    return records
