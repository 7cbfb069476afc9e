"""One rank's layer-wise inference, and the launching process's work before and after it.

Before, in the launching process: `plan_inference` loads the checkpoint, checks
it against the config and chooses the output and work directories, before any
dataset is prepared; `fit_dataset` checks the prepared dataset against the model;
`prepare_work_dir` then finds the layers an interrupted run already computed.
Each rank (`infer_on_rank`) computes the layers still missing and writes its
shard. After (`finish_inference`): the manifest, the rename that makes the
output visible, and the summary.

The work directory `<output>.partial/` holds, per rank r:

    identity.json          what the layers were computed from (a run resumes only onto its own)
    h<i>.rank<r>.npy       layer i-1's output for r's own vertices, written atomically
    ids.rank<r>.npy        a link run's predict: the source's ids of those rows, which its
                           pairs name (a heterogeneous graph's: of every type)
    rows.rank<r>.npy       scratch: the own rows of the layer being computed, transformed
    halo.rank<r>.npy       scratch: the halo rows of the layer being computed
    progress.npy           the ranks' progress, for rank 0's bars
    out/                   the shards, renamed to the output directory when all are written
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnrun.comm import Communicator
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.hetero import HeteroSchema
from gnnrun.errors import GnnrunError
from gnnrun.infer.display import InferenceDisplay, ProgressBoard, create_board
from gnnrun.infer.graph import SPLITS, OwnedGraph
from gnnrun.infer.halo import HaloPlan
from gnnrun.infer.link import pair_ends, read_candidates, score_candidates
from gnnrun.infer.output import (
    FORMAT_VERSION,
    MANIFEST,
    parquet_available,
    refuse_occupied,
    write_shard,
)
from gnnrun.io import (
    atomic_file,
    atomic_rows,
    mapped_rows,
    read_json,
    write_json,
    write_json_atomic,
)
from gnnrun.memory import PeakMemory, anonymous_mb
from gnnrun.models import GNN, build_model, layer_widths
from gnnrun.models.hetero import typed_input
from gnnrun.ops.precision import autocast, widened
from gnnrun.ops.rows import read_only_tensor, take_rows
from gnnrun.partition.book import open_partition
from gnnrun.resources import install_command
from gnnrun.tasks import load_for_task, task_of
from gnnrun.torch_support import compute_device
from gnnrun.train.checkpoint import BEST_CHECKPOINT, CHECKPOINT, PREDICT_FIX, load_checkpoint
from gnnrun.train.resume import REFUSED, compare_settings, settings_of

# Tests set it to "LAYER:RANK": that rank kills itself once its output of LAYER (1-based)
# is written, as a crash between two layers would.
KILL_AFTER_LAYER_ENV = "GNNRUN_FAULT_KILL_AFTER_LAYER"
IDENTITY = "identity.json"
SHARDS = "out"


@dataclass
class InferencePlan:
    """What the launching process decided, the same for every rank."""

    kind: str  # predict | embed
    task: str  # task.name the run trained (gnnrun.tasks)
    scores_pairs: bool  # a link run's predict: scores predict.candidates from the embeddings
    layers: int  # layers to compute: all of them to predict, up to the chosen one to embed
    start_layer: int  # layers an interrupted run already computed
    run_dir: str
    checkpoint: str  # the checkpoint file
    epoch: int  # the checkpoint's epoch
    output_dir: str
    work_dir: str
    in_dim: int
    num_classes: int
    chunk_vertices: int
    parquet: bool
    node_type: int | None = None  # a heterogeneous graph's: the type whose rows are written
    node_type_name: str | None = None  # ... and its name


def layer_file(work_dir: Path, layer: int, rank: int) -> Path:
    """Layer `layer - 1`'s output on `rank` (`layer` counts the layers computed)."""
    return Path(work_dir) / f"h{layer}.rank{rank}.npy"


def ids_file(work_dir: Path, rank: int) -> Path:
    """The source's ids of the rows of `rank`'s layer files (a link run's predict)."""
    return Path(work_dir) / f"ids.rank{rank}.npy"


# ------------------------------------------------------------ before the ranks


def plan_inference(cfg, kind: str, run_dir: Path) -> InferencePlan:
    """Check the checkpoint against the config and choose the output and work directories:
    what needs no dataset, so that a wrong setting is refused before one is prepared."""
    directory = Path(cfg.train.checkpoint_dir)
    best = cfg.predict.checkpoint == "best"
    path = directory / (BEST_CHECKPOINT if best else CHECKPOINT)
    state = load_checkpoint(directory, path.name, fix=PREDICT_FIX)
    if state is None and best:
        raise GnnrunError(
            f"predict.checkpoint=best: no {path}: the run in {run_dir} kept no best model "
            "(train it with train.keep_best=true; a run without a validation figure keeps "
            "none), or predict from its last checkpoint (predict.checkpoint=last)"
        )
    if state is None:
        raise GnnrunError(
            f"no checkpoint at {path}: the run in {run_dir} saved none there "
            "(it checkpoints every train.checkpoint_every epochs and at its end); if it was "
            "moved, give its directory with train.checkpoint_dir=..."
        )
    _check_settings(cfg, state, path)
    _check_written_by(run_dir, state, path)
    task = task_of(cfg)
    task.check_inference(kind, cfg.predict.candidates, run_dir)
    scores_pairs = kind == "predict" and task.scores_pairs
    if scores_pairs:  # its layout; its ids once the dataset is known
        read_candidates(cfg.predict.candidates, ends=None)
    encoder = task.encoder_state(state["model"])
    try:
        in_dim, num_classes = GNN.dims_of(encoder, cfg.model.layers)
    except (KeyError, AttributeError, IndexError):
        raise GnnrunError(
            f"{path} holds no {cfg.model.layers}-layer model.name="
            f"{cfg.model.name} model: was it written by another run?"
        ) from None
    layers = cfg.model.layers
    if kind == "embed":
        chosen = cfg.embed.layer
        if not -layers <= chosen < layers:
            raise GnnrunError(
                f"embed.layer={chosen}: the model has {layers} layers, choose one of "
                f"{-layers}..{layers - 1} (-1: the output layer, -2: the last hidden one)"
            )
        layers = chosen % layers + 1
    output = Path(cfg.predict.output_dir or default_output_dir(run_dir, kind, cfg, layers))
    refuse_occupied(output)
    parquet = str(cfg.predict.parquet).lower()
    if parquet == "true" and not parquet_available():
        raise GnnrunError(
            f"predict.parquet=true needs pyarrow, which is not installed: "
            f"{install_command('parquet')} (or set predict.parquet=auto to write .npy shards only)"
        )
    return InferencePlan(
        kind=kind,
        task=cfg.task.name,
        scores_pairs=scores_pairs,
        layers=layers,
        start_layer=0,
        run_dir=str(run_dir),
        checkpoint=str(path),
        epoch=int(state["epoch"]),
        output_dir=str(output),
        work_dir=str(output.with_name(output.name + ".partial")),
        in_dim=in_dim,
        num_classes=num_classes,
        chunk_vertices=cfg.predict.chunk_vertices,
        parquet=parquet == "true" or (parquet == "auto" and parquet_available()),
    )


def fit_dataset(cfg, plan: InferencePlan, dataset: GraphDataset) -> None:
    """Check the prepared dataset against the planned model (its features, its vertex
    types, the candidate pairs' ids) and choose the vertex type whose rows are written."""
    if plan.scores_pairs:  # read again at the end
        read_candidates(cfg.predict.candidates, pair_ends(dataset, cfg.task.relation), warn=True)
    # A heterogeneous model's encoder takes each type's features (its weights' shapes are
    # checked as they load); a homogeneous one takes the dataset's rows.
    if dataset.hetero is None and dataset.feat_dim != plan.in_dim:
        raise GnnrunError(
            f"the model in {plan.checkpoint} takes {plan.in_dim} input features, but dataset "
            f"{dataset.name!r} has {dataset.feat_dim}: run it on a dataset with the features "
            "it was trained on"
        )
    load_trained_model(  # or refuses
        cfg, Path(plan.checkpoint), plan.in_dim, plan.num_classes, dataset.hetero
    )
    plan.node_type_name = written_type(cfg, plan, dataset)
    if plan.node_type_name is not None:
        plan.node_type = dataset.hetero.type_index(plan.node_type_name)


def written_type(cfg, plan: InferencePlan, dataset: GraphDataset) -> str | None:
    """The vertex type whose rows a heterogeneous graph's inference writes: the labelled
    one (`predict`'s; a link run's: its relation's source type), or `embed.node_type`'s;
    None for a homogeneous graph."""
    chosen, schema = cfg.embed.node_type if plan.kind == "embed" else None, dataset.hetero
    if chosen is None and schema is not None and plan.scores_pairs:
        return pair_ends(dataset, cfg.task.relation)[0].node_type
    if chosen is None:
        return None if schema is None else schema.target
    if schema is None:
        raise GnnrunError(
            f"embed.node_type={chosen} is set but {dataset.name} is homogeneous (one vertex "
            "type): leave embed.node_type out"
        )
    if chosen not in schema.node_types:
        raise GnnrunError(
            f"embed.node_type={chosen} is not a vertex type of {dataset.name}: choose one of "
            f"{', '.join(schema.node_types)}"
        )
    return chosen


def default_output_dir(run_dir: Path, kind: str, cfg, layers: int) -> Path:
    """`<run>/predict/<dataset>`, `<run>/embed/<dataset>-layer<i>`, and with
    `embed.node_type`: `<run>/embed/<dataset>-<type>-layer<i>`; from the best model
    (predict.checkpoint=best), with `-best` after it."""
    best = "-best" if cfg.predict.checkpoint == "best" else ""
    if kind == "predict":
        return Path(run_dir) / kind / f"{cfg.dataset.name}{best}"
    chosen = cfg.embed.node_type
    name = cfg.dataset.name if chosen is None else f"{cfg.dataset.name}-{chosen}"
    return Path(run_dir) / kind / f"{name}-layer{layers - 1}{best}"


def _check_settings(cfg, state: dict[str, Any], path: Path) -> None:
    """The model's settings must be the checkpoint's (another dataset may be given)."""
    saved = state.get("settings", {})
    trained_task = saved.get("task.name", "node")
    if trained_task != cfg.task.name:
        raise GnnrunError(
            f"the model in {path} was trained with task={trained_task}, not "
            f"task={cfg.task.name}: leave task= as the run had it"
        )
    changes = compare_settings(saved, settings_of(cfg)).refused
    changed = {
        key: values
        for key, values in changes.items()
        if key.startswith("model.") and key in REFUSED and key in saved
    }
    if changed:
        given = ", ".join(f"{k}={new}" for k, (_, new) in changed.items())
        trained = ", ".join(f"{k}={old}" for k, (old, _) in changed.items())
        raise GnnrunError(
            f"the model in {path} was trained with {trained}, not {given}: "
            "leave the model's settings as the run had them"
        )


def _check_written_by(run_dir: Path, state: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint that another run wrote since: runs with the same settings share a
    checkpoint directory by default. The run's epochs in its metrics file must be the
    checkpoint's (the same measured epoch times), its last epoch included: a run resumed
    from this one carries this one's epochs in its checkpoint's history."""
    metrics = Path(run_dir) / "metrics.rank0.jsonl"
    saved = {r["epoch"]: r.get("epoch_s") for r in state.get("history", []) if "epoch" in r}
    if not metrics.is_file() or not saved:
        return
    ran = {}
    for line in metrics.read_text().splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            record = json.loads(line)
            ran[record["epoch"]] = record.get("epoch_s")
    common = saved.keys() & ran.keys()
    last = max(saved)
    if not common or any(saved[e] != ran[e] for e in common) or last not in ran:
        raise GnnrunError(
            f"{path} was written by another run than the one in {run_dir} "
            "(runs with the same settings share train.checkpoint_dir, and a later one, or "
            "one resumed from it, replaced it): predict from that run's directory, or give "
            "this run's checkpoint with train.checkpoint_dir=..."
        )


def load_trained_model(
    cfg, path: Path, in_dim: int, num_classes: int, schema: HeteroSchema | None = None
) -> torch.nn.Module:
    """The checkpoint's model: a GNN, or for a task=link run the GNN and its scorer.
    `schema`: a heterogeneous dataset's types, which its input encoder maps."""
    state = load_checkpoint(path.parent, path.name, PREDICT_FIX)
    if state is None:
        raise GnnrunError(f"{path} is missing: it was there when the inference started")
    model = build_model(cfg.model, in_dim, num_classes, schema, **task_of(cfg).model_options())
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as exc:
        reason = str(exc).strip().split("\n")[0][:200]
        raise GnnrunError(
            f"{path} does not hold a model.name={cfg.model.name} model of these settings "
            f"({reason}): was it written by another run?"
        ) from None
    return model.eval()


def _identity(cfg, plan: InferencePlan, dataset: GraphDataset) -> dict[str, Any]:
    """What a finished layer was computed from: a resumed run must match it."""
    checkpoint = Path(plan.checkpoint).stat()
    return {
        "checkpoint": plan.checkpoint,
        "checkpoint_bytes": checkpoint.st_size,
        "checkpoint_mtime_ns": checkpoint.st_mtime_ns,
        "dataset": dataset.checksum,
        "ranks": cfg.cluster.nprocs,
        "partition": cfg.partitioner.output_dir if cfg.cluster.nprocs > 1 else None,
        "precision": cfg.train.precision,
        "kind": plan.kind,
    }


def prepare_work_dir(cfg, plan: InferencePlan, dataset: GraphDataset) -> None:
    """Create the work directory, or keep an interrupted run's, whose finished layers
    become `plan.start_layer`."""
    from gnnrun.progress import console

    identity, ranks = _identity(cfg, plan, dataset), cfg.cluster.nprocs
    work = Path(plan.work_dir)
    finished = 0
    if work.is_dir():
        saved = read_json(work / IDENTITY) if (work / IDENTITY).is_file() else None
        if saved == identity:
            while finished < plan.layers and all(
                layer_file(work, finished + 1, r).is_file() for r in range(ranks)
            ):
                finished += 1
        else:
            console.print(
                f"{work} holds layers of another inference (checkpoint, dataset or ranks "
                "differ): starting afresh",
                markup=False,
                soft_wrap=True,
            )
        if finished == 0:
            shutil.rmtree(work)
    if finished:
        where = f"layers 1-{finished} were computed by an interrupted run ({work})"
        then = f"resuming at layer {finished + 1}" if finished < plan.layers else "writing it"
        console.print(f"{then}: {where}", markup=False, soft_wrap=True)
    shutil.rmtree(work / SHARDS, ignore_errors=True)  # an earlier attempt's partial shards
    (work / SHARDS).mkdir(parents=True)
    write_json_atomic(work / IDENTITY, identity)
    create_board(work, ranks)
    plan.start_layer = finished


# ----------------------------------------------------------------- on each rank


def infer_on_rank(cfg, plan: InferencePlan) -> dict[str, Any]:
    """Compute the missing layers for this rank's own vertices, write its shard, and (for
    predict) the metrics over every rank. Returns this rank's figures."""
    comm = Communicator()
    dataset = load_for_task(cfg.dataset, cfg.task)
    rank = RankLayers(cfg, plan, dataset, comm)
    display = (
        InferenceDisplay(Path(plan.work_dir), comm.world_size, plan.layers)
        if comm.rank == 0
        else contextlib.nullcontext()
    )
    seconds: dict[str, float] = {}
    with display, torch.no_grad(), autocast(cfg.train.precision, rank.device):
        for layer in range(plan.start_layer, plan.layers):
            start = time.perf_counter()
            rank.compute(layer)
            comm.barrier()  # every rank has written the layer: an interruption leaves it whole
            seconds[str(layer + 1)] = time.perf_counter() - start
            if comm.rank == 0:
                display.layer_done(layer, seconds[str(layer + 1)], rank.graph.num_own)
            _maybe_fail(layer + 1, comm.rank)
    rank.remove_scratch()

    graph, work = rank.graph, Path(plan.work_dir)
    final = np.load(layer_file(work, plan.layers, comm.rank), mmap_mode="r")
    task = task_of(cfg)
    first, stop = rank.output_range()
    written = np.asarray(graph.nodes[first:stop])
    schema = dataset.hetero  # a heterogeneous graph's rows are named by their id in the type
    ids = (
        dataset.source_ids(written) if schema is None else written - schema.offsets[plan.node_type]
    )
    # A prediction per vertex; else embeddings (a pair-scoring task's predict writes the
    # embeddings its pairs are scored from).
    predicts_vertices = plan.kind == "predict" and not plan.scores_pairs
    if plan.scores_pairs:  # every own vertex's: both ends' types
        with atomic_file(ids_file(work, comm.rank), "wb") as f:
            np.save(f, dataset.source_ids(np.asarray(graph.nodes[: graph.num_own])))
    columns = (
        task.prediction_columns
        if predicts_vertices
        else (lambda rows: {"embedding": rows.astype(np.float32)})
    )
    start = time.perf_counter()
    arrays, tables = write_shard(
        work / SHARDS, comm.rank, ids, final[first:stop], columns, plan.chunk_vertices, plan.parquet
    )
    write_s = time.perf_counter() - start
    metrics = _metrics(graph, final, task, comm) if predicts_vertices else {}
    return {
        "rank": comm.rank,
        "rows": stop - first,
        "halo": graph.num_halo,
        "files": arrays,
        "parquet": tables,
        "layer_s": seconds,
        "write_s": write_s,
        "bytes_sent": comm.bytes.total(),
        "peak_rss_mb": rank.memory.run_peak_mb(),
        "peak_anonymous_mb": max(rank.anonymous_mb),
        "metrics": metrics,
    }


class RankLayers:
    """A rank's share of the graph, its halo plan and the model: computes one layer at a
    time for the rank's own vertices, from the previous layer's file to the next one's."""

    def __init__(self, cfg, plan: InferencePlan, dataset: GraphDataset, comm: Communicator):
        self.plan, self.rank, self.work = plan, comm.rank, Path(plan.work_dir)
        if comm.distributed:
            book = open_partition(
                Path(cfg.partitioner.output_dir),
                dataset_checksum=dataset.checksum,
                world_size=comm.world_size,
                kind="edge_cut",
            )
            self.graph = OwnedGraph.from_part(book.load_part(comm.rank), dataset.hetero)
            node_local = book.node_local()
        else:
            self.graph, node_local = OwnedGraph.from_dataset(dataset), None
        self.halo = HaloPlan(self.graph, node_local, comm, plan.chunk_vertices)
        trained = load_trained_model(
            cfg, Path(plan.checkpoint), plan.in_dim, plan.num_classes, dataset.hetero
        )
        # A heterogeneous graph: its types, and each type's feature rows (the encoder's input).
        self.schema, self.typed_feat = dataset.hetero, dataset.typed_feat
        # Rows stay in CPU memory (files); each chunk goes to the device and back.
        self.device = compute_device(cfg)
        self.model = task_of(cfg).encoder(trained).to(self.device)
        self.widths = layer_widths(cfg.model, plan.in_dim, plan.num_classes)
        self.in_degrees, self.out_degrees = _graph_degrees(self.graph, self.halo)
        self.board = ProgressBoard(self.work, comm.rank)
        self.memory, self.anonymous_mb = PeakMemory(), [anonymous_mb() or 0.0]

    def _scratch(self, name: str) -> Path:
        return self.work / f"{name}.rank{self.rank}.npy"

    def compute(self, layer: int) -> None:
        """Layer `layer` for every own vertex, chunk by chunk, into its file (atomically)."""
        graph, model = self.graph, self.model
        steps = graph.chunks(self.plan.chunk_vertices)
        encodes = layer == 0 and self.schema is not None
        progress = _Progress(
            self.board, layer, len(steps) * (1 + model.transforms(layer) + encodes)
        )
        if encodes:
            own_in = self._encoded(steps, progress)
        elif layer == 0:
            own_in = _rows(graph.feat)
        else:
            own_in = _rows(np.load(layer_file(self.work, layer, self.rank), "c"))
        if model.transforms(layer):
            own_rows = _transformed(
                model, layer, own_in, steps, self._scratch("rows"), progress, self.device
            )
        else:
            own_rows = own_in
        halo_rows = _scratch_rows(self._scratch("halo"), graph.num_halo, own_rows.shape[1])
        self.halo.pull(own_rows, halo_rows, "halo_rows")
        shape = (graph.num_own, self.widths[layer + 1])
        # Jumping knowledge: the last layer also reads the earlier layers' outputs (files).
        earlier = (
            [_rows(np.load(layer_file(self.work, k, self.rank), "r")) for k in range(1, layer + 1)]
            if model.jk != "none" and layer == len(model.layers) - 1
            else None
        )
        with atomic_rows(layer_file(self.work, layer + 1, self.rank), shape, np.float32) as append:
            for a, b in steps:
                block = graph.chunk_block(a, b, self.in_degrees, self.out_degrees)
                x = _gather(own_rows, halo_rows, block.src_ids, a, b)
                rows = model.propagate(
                    layer,
                    block.to(self.device),
                    x.to(self.device),
                    None if earlier is None else [e[a:b].to(self.device) for e in earlier],
                )
                append(rows.cpu().numpy())
                self.anonymous_mb.append(anonymous_mb() or 0.0)
                progress.step()

    def _encoded(self, steps: list[tuple[int, int]], progress: _Progress) -> torch.Tensor:
        """The own vertices' input rows of a heterogeneous graph: the model's encoder over
        their typed features and embedding rows, chunk by chunk, into a file-backed array."""
        encoder, nodes = self.model.encoder, torch.from_numpy(np.asarray(self.graph.nodes))
        rows = _scratch_rows(self._scratch("input"), self.graph.num_own, self.widths[0])

        def rows_of(node_type: int, typed_ids: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(take_rows(self.typed_feat[node_type], typed_ids.numpy()))

        for a, b in steps:
            typed = typed_input(self.schema, nodes[a:b], rows_of)
            rows[a:b] = widened(encoder(typed.to(self.device))).cpu()
            progress.step()
        return rows

    def output_range(self) -> tuple[int, int]:
        """[start, stop) of the own vertices whose rows are written: all of them, or on a
        heterogeneous graph those of one type (the labelled one, whose classes the model
        predicts, or `embed.node_type`'s)."""
        if self.schema is None:
            return 0, self.graph.num_own
        return self.graph.own_range_of_type(self.schema.offsets, self.plan.node_type)

    def remove_scratch(self) -> None:
        for name in ("input", "rows", "halo"):
            self._scratch(name).unlink(missing_ok=True)


def _graph_degrees(graph: OwnedGraph, halo: HaloPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """In-degrees of the own vertices and out-degrees of every local one, in the whole graph:
    a vertex's out-edges may be held by every part that has it in its halo."""
    partial = torch.from_numpy(graph.partial_out_degrees())
    own_out = partial[: graph.num_own].clone()
    halo.push_sum(partial[graph.num_own :], own_out, "degrees")
    halo_out = torch.zeros(graph.num_halo, dtype=torch.int64)
    halo.pull(own_out, halo_out, "degrees")
    in_degrees = np.diff(np.asarray(graph.indptr, dtype=np.int64))
    return torch.from_numpy(in_degrees), torch.cat([own_out, halo_out])


def _rows(array: np.ndarray) -> torch.Tensor:
    """A float32 tensor over `array`'s memory (a memory-mapped file's pages, not a copy);
    only read. An array of another dtype is converted, in memory."""
    if array.dtype != np.float32:
        return torch.from_numpy(np.asarray(array, dtype=np.float32))
    return read_only_tensor(array)


def _scratch_rows(path: Path, count: int, width: int) -> torch.Tensor:
    """A [count, width] float32 tensor backed by a file (not the heap), for rows a layer
    reads: the page cache holds them, and the kernel writes them out under pressure. Its
    blocks are reserved first, so that a full disk is an error naming it, not a SIGBUS."""
    if not count:
        return torch.zeros(0, width)
    rows = mapped_rows(path, (count, width), np.float32)
    return torch.from_numpy(rows)


def _transformed(
    model: GNN,
    layer: int,
    own_in: torch.Tensor,
    steps: list[tuple[int, int]],
    scratch: Path,
    progress: _Progress,
    device: torch.device,
) -> torch.Tensor:
    """Layer `layer`'s per-vertex step over the own rows, once per vertex (rather than once
    per chunk that reads the vertex), into a file-backed scratch array."""
    width = model.transform(layer, own_in[:0].to(device)).shape[1]
    rows = _scratch_rows(scratch, own_in.shape[0], width)
    for a, b in steps:
        rows[a:b] = model.transform(layer, own_in[a:b].to(device)).cpu()
        progress.step()
    return rows


class _Progress:
    """A layer's steps on this rank, told to the progress board."""

    def __init__(self, board: ProgressBoard, layer: int, total: int) -> None:
        self.board, self.layer, self.total, self.done = board, layer, total, 0
        board.update(layer, 0, total)

    def step(self) -> None:
        self.done += 1
        self.board.update(self.layer, self.done, self.total)


def _gather(
    own: torch.Tensor, halo: torch.Tensor, ids: torch.Tensor, start: int, stop: int
) -> torch.Tensor:
    """Rows `ids` of a chunk's block: the destinations [start, stop), then the other
    sources in increasing local id (own vertices, then the halo)."""
    n, dst = own.shape[0], stop - start
    others = ids[dst:]
    split = int(torch.searchsorted(others, n))
    x = torch.empty(ids.numel(), own.shape[1])
    x[:dst] = own[start:stop]
    torch.index_select(own, 0, others[:split], out=x[dst : dst + split])
    torch.index_select(halo, 0, others[split:] - n, out=x[dst + split :])
    return x


def _metrics(graph: OwnedGraph, logits: np.ndarray, task, comm: Communicator) -> dict[str, float]:
    """The task's figures (as training evaluates) on every labelled split, over all ranks."""
    outputs = {}
    for split in SPLITS:
        ids = np.asarray(graph.splits[split], dtype=np.int64)
        outputs[split] = (
            torch.from_numpy(np.asarray(logits[ids], dtype=np.float32)),
            torch.from_numpy(np.asarray(graph.label[ids], dtype=np.int64)),
        )
    result = task.metrics(outputs, comm)
    return {k: v for k, v in result.items() if not math.isnan(v)}


def _maybe_fail(layer: int, rank: int) -> None:
    if os.environ.get(KILL_AFTER_LAYER_ENV) == f"{layer}:{rank}":
        os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------ after the ranks


def finish_inference(cfg, plan: InferencePlan, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the manifest, move the shards into place, remove the work directory; return
    the summary (also in the manifest)."""
    work, output = Path(plan.work_dir), Path(plan.output_dir)
    vertices = sum(r["rows"] for r in ranks)
    scored = {}
    task = task_of(cfg)
    if plan.scores_pairs:
        dataset = load_for_task(cfg.dataset, cfg.task)
        ends = pair_ends(dataset, cfg.task.relation)
        pairs = read_candidates(cfg.predict.candidates, ends)
        model = load_trained_model(
            cfg, Path(plan.checkpoint), plan.in_dim, plan.num_classes, dataset.hetero
        )
        embeddings = [
            (ids_file(work, r), layer_file(work, plan.layers, r)) for r in range(len(ranks))
        ]
        scored = score_candidates(
            embeddings, pairs, ends, dataset.num_nodes, model.scorer, work / SHARDS
        )
    # Every layer this invocation computed and the shards' writing, on the slowest rank.
    seconds = max(sum(r["layer_s"].values()) + r["write_s"] for r in ranks)
    summary = {
        "kind": plan.kind,
        "output_dir": str(output),
        "run_dir": plan.run_dir,
        "checkpoint": plan.checkpoint,
        "epoch": plan.epoch,
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "layer": plan.layers - 1,
        "vertices": vertices,  # rows written: of node_type's vertices only, where set
        "node_type": plan.node_type_name,
        "ranks": len(ranks),
        "chunk_vertices": plan.chunk_vertices,
        "layers_reused": plan.start_layer,  # computed by an interrupted run
        "metrics": ranks[0]["metrics"],
        **({"candidates": int(scored["scores.npy"]["shape"][0])} if scored else {}),
        "seconds": seconds,
        "vertices_per_s": vertices / seconds if seconds > 0 else None,
        "per_rank": [
            {k: r[k] for k in ("rank", "rows", "halo", "layer_s", "write_s", "bytes_sent")}
            | {k: round(r[k], 1) for k in ("peak_rss_mb", "peak_anonymous_mb")}
            for r in ranks
        ],
    }
    manifest = {
        "format_version": FORMAT_VERSION,
        "columns": list(
            task.output_columns(plan.num_classes) if plan.kind == "predict" else ("embedding",)
        ),
        **({"pair_files": scored} if scored else {}),
        "shards": [r["rows"] for r in ranks],
        "files": {k: v for r in ranks for k, v in r["files"].items()},
        "parquet": {k: v for r in ranks for k, v in r["parquet"].items()},
        **summary,
    }
    write_json(work / SHARDS / MANIFEST, manifest)
    output.parent.mkdir(parents=True, exist_ok=True)
    refuse_occupied(output)
    if output.exists():  # an empty directory the user made for it
        output.rmdir()
    os.rename(work / SHARDS, output)
    shutil.rmtree(work, ignore_errors=True)
    return summary
