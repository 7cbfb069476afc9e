"""`gnnrun predict` of a task=link run: scores of given vertex pairs.

The ranks compute every vertex's embedding layer-wise over the message-passing
graph (gnnrun.infer.run), exactly as for a node prediction, and write them as
the shards' `embedding` column. The launching process then reads the pairs of
`predict.candidates` (a `.npy` of [2, P] or [P, 2] vertex ids, in the ids the
shards and the source use), gathers both ends' embeddings from the shards and
scores each pair with the run's scorer (gnnrun.models.link): `scores.npy` [P]
holds the logits (sigmoid of them: the probability a BCE-trained model gives
the edge) and `candidates.npy` the pairs, as [2, P], beside the shards.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnrun.errors import GnnrunError
from gnnrun.infer.output import shard_file

SCORE_CHUNK = 1 << 16  # pairs scored at once


def read_candidates(path: str | Path, num_nodes: int | None, warn: bool = False) -> np.ndarray:
    """The [2, P] int64 pairs in `path`, every id checked to be a vertex (of `num_nodes`;
    None, before the dataset is known: the file's layout only); the error names the file,
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
    if warn and pairs.shape == (2, 2):
        from gnnrun.progress import print_warning

        print_warning(
            f"predict.candidates: {path} has shape (2, 2), read as (2, P): pairs "
            f"{tuple(pairs[:, 0].tolist())} and {tuple(pairs[:, 1].tolist())}; if each row is a "
            "pair, save its transpose"
        )
    pairs = np.ascontiguousarray(pairs if pairs.shape[0] == 2 else pairs.T, dtype=np.int64)
    bad = pairs < 0 if num_nodes is None else (pairs < 0) | (pairs >= num_nodes)
    if bad.any():
        column = int(np.flatnonzero(bad.any(axis=0))[0])
        where = "a negative id" if num_nodes is None else f"a vertex outside [0, {num_nodes})"
        ids = "" if num_nodes is None else f", 0..{num_nodes - 1}"
        raise GnnrunError(
            f"predict.candidates: pair {column} of {path}, {pairs[:, column].tolist()}, names "
            f"{where}: the ids are the dataset's{ids}"
        )
    return pairs


def score_candidates(
    shards: Path, ranks: int, pairs: np.ndarray, num_nodes: int, scorer: torch.nn.Module
) -> dict[str, dict]:
    """Score `pairs` from the embeddings in the shards of `ranks` ranks under `shards`, and
    write `scores.npy` and `candidates.npy` there; return their file records."""
    table: np.ndarray | None = None
    for rank in range(ranks):
        ids = np.load(shards / shard_file("ids", rank))
        rows = np.load(shards / shard_file("embedding", rank), mmap_mode="r")
        if table is None:
            table = np.zeros((num_nodes, rows.shape[1]), dtype=np.float32)
        table[ids] = rows
    assert table is not None
    embeddings = torch.from_numpy(table)
    scores = np.empty(pairs.shape[1], dtype=np.float32)
    with torch.no_grad():
        for a in range(0, pairs.shape[1], SCORE_CHUNK):
            u = torch.from_numpy(pairs[0, a : a + SCORE_CHUNK])
            v = torch.from_numpy(pairs[1, a : a + SCORE_CHUNK])
            scores[a : a + SCORE_CHUNK] = scorer(embeddings[u], embeddings[v]).numpy()
    records = {}
    for name, array in (("scores", scores), ("candidates", pairs)):
        np.save(shards / f"{name}.npy", array)
        records[f"{name}.npy"] = {"shape": list(array.shape), "dtype": str(array.dtype)}
    return records
