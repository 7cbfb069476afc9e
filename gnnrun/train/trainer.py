"""The loop every rank runs: epochs, evaluation, metrics files, checkpoints, NaN guard."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnrun.algorithms import ALGORITHMS, Algorithm
from gnnrun.attempt import RunStopped, current_attempt, stop_requested, stop_watched
from gnnrun.comm import Communicator
from gnnrun.errors import GnnrunError
from gnnrun.faults import inject_fault
from gnnrun.io import atomic_file
from gnnrun.memory import PeakMemory, allocator_in_use
from gnnrun.models import build_model
from gnnrun.ops import cpu_allocator
from gnnrun.ops.precision import autocast
from gnnrun.progress import print_warning
from gnnrun.tasks import TASKS, task_of
from gnnrun.timers import DeviceBusy, PhaseTimer
from gnnrun.train.checkpoint import (
    BEST_CHECKPOINT,
    CHECKPOINT,
    algorithm_checkpoint,
    save_checkpoint,
)
from gnnrun.train.display import TrainingDisplay
from gnnrun.train.optimizer import (
    build_optimizer,
    clip_gradients,
    learning_rate,
    plateaus_in,
    set_learning_rate,
    sparse_tables,
)
from gnnrun.train.resume import resume, settings_of


def initial_model(cfg, algorithm) -> torch.nn.Module:
    """The model `algorithm` trains, on its device, with the run's initial weights: the same
    on every rank (seeded by train.seed)."""
    torch.manual_seed(cfg.train.seed)
    return build_model(
        cfg.model,
        algorithm.in_dim,
        algorithm.num_classes,
        algorithm.schema,
        **algorithm.task.model_options(),
    ).to(algorithm.device)


def train(
    cfg, run_dir: Path, display: TrainingDisplay | None = None, tracker: Any = None
) -> dict[str, Any] | None:
    """Train on this rank; rank 0 returns the run summary (also written to summary.json).

    `display` (rank 0's terminal) is told when epochs start and end and when steps finish;
    `tracker` (gnnrun.tracking.tracker.Tracker: TensorBoard, MLflow, W&B) when the run starts, an
    epoch ends, a checkpoint is written and the run ends.
    """
    run_dir = Path(run_dir)
    timer = PhaseTimer()
    comm = Communicator(blocked=timer.communication)
    algorithm = ALGORITHMS.get(cfg.algorithm.name)(cfg, comm, timer)
    if display is not None:
        algorithm.on_step = display.step_done
    model = initial_model(cfg, algorithm)
    optimizer = build_optimizer(model, cfg.optimizer)

    checkpoint_dir = Path(cfg.train.checkpoint_dir)
    start_epoch, history = 0, []
    attempt = current_attempt()
    if cfg.train.resume or attempt.restarted:
        # A restarted or requeued run continues from its own last checkpoint only.
        own_run = None if cfg.train.resume else attempt.run_id
        # A run the user resumes in a directory that holds a run continues that run (a
        # restarted attempt's directory holds its own first attempts: own_run checks it).
        start_epoch, history = resume(
            cfg,
            restart_source(cfg, checkpoint_dir, run_dir, attempt),
            model,
            optimizer,
            algorithm,
            comm.rank,
            own_run,
            run_dir=run_dir if cfg.train.resume and not attempt.restarted else None,
        )

    memory = PeakMemory()
    metrics_file = run_dir / f"metrics.rank{comm.rank}.jsonl"
    _forget_epochs_from(metrics_file, start_epoch)  # an attempt's epochs after its checkpoint
    end_epoch = cfg.train.epochs
    if start_epoch >= end_epoch and comm.rank == 0:
        print_warning(
            f"the checkpoint is after epoch {start_epoch}, at or past train.epochs={end_epoch}: "
            "nothing is left to train; raise train.epochs to train on"
        )
    if cfg.train.stop_after:
        end_epoch = min(end_epoch, start_epoch + cfg.train.stop_after)
    if start_epoch < end_epoch and stopped_early(history, cfg) is not None:
        end_epoch = start_epoch  # every rank reads the same checkpoint's history
        if comm.rank == 0:
            print_warning(
                f"the checkpoint's run stopped early after epoch {start_epoch}: its last "
                f"train.patience={cfg.train.patience} evaluations did not better its best; "
                "raise train.patience (or set it to 0) to train on"
            )
    algorithm.plan(start_epoch, end_epoch)
    if tracker is not None:
        tracker.started(start_epoch, attempt.number, attempt.run_id, history)
    try:
        for epoch in range(start_epoch, end_epoch):
            # Reseeding per epoch makes dropout independent of where a run resumed.
            torch.manual_seed(cfg.train.seed * 1_000_003 + epoch * 101 + comm.rank)
            plateaus = plateaus_so_far(history, cfg, comm)
            lr = learning_rate(cfg.optimizer, epoch, cfg.train.epochs, plateaus)
            set_learning_rate(optimizer, lr)
            comm.bytes.reset()
            timer.reset()  # what ran before the epoch (set-up, the checkpoint) is not the epoch's
            if display is not None:
                display.epoch_started(epoch)
            memory.start_window()
            start = time.perf_counter()
            stats = train_epoch(algorithm, model, optimizer, epoch)
            epoch_seconds = time.perf_counter() - start
            train_growth_mb = memory.window_growth_mb()
            if not math.isfinite(stats["loss"]):
                raise GnnrunError(
                    f"rank {comm.rank}: training loss is {stats['loss']} at epoch {epoch + 1}; "
                    f"the run stopped before writing a bad checkpoint. Lower optimizer.lr (now {cfg.optimizer.lr}) "
                    "or check the features for NaN/inf"
                )
            record: dict[str, Any] = {
                "epoch": epoch,
                "rank": comm.rank,
                "epoch_s": epoch_seconds,
                "lr": lr,
                **stats,
                # Training traffic only: evaluation's goes to eval_bytes, so that
                # algorithms compare by what training costs them.
                "bytes": comm.bytes.reset(),
            }
            if train_growth_mb is not None:
                # The epoch's training steps at their peak, above what the process held before.
                record["train_rss_growth_mb"] = train_growth_mb
            if (epoch + 1) % cfg.train.eval_every == 0 or epoch + 1 == cfg.train.epochs:
                with timer.phase("eval"), autocast(cfg.train.precision, algorithm.device):
                    figures = algorithm.task.metrics(on_cpu(algorithm.evaluate(model)), comm)
                # NaN: an empty split (or AUC on one class) was not evaluated; left out.
                record.update({k: v for k, v in figures.items() if not math.isnan(v)})
                record["eval_bytes"] = comm.bytes.reset()
                if (
                    comm.rank == 0
                    and COLLAPSED in record
                    and not any(COLLAPSED in r for r in history)
                ):
                    print_warning(
                        f"the model's scores collapsed at epoch {epoch + 1}: every held-out pair "
                        "scores the same, so it ranks nothing (its MRR and AUC are those of "
                        "ties) and this evaluation is never the best. Its embeddings have "
                        "likely shrunk to zero: lower optimizer.weight_decay, model.dropout "
                        "and model.input_dropout, or widen model.hidden (docs/link-prediction.md)"
                    )
                nonfinite = [k for k in NONFINITE if k in record]
                if (
                    comm.rank == 0
                    and nonfinite
                    and not any(k in r for r in history for k in NONFINITE)
                ):
                    counts = ", ".join(f"{int(record[k]):,} {k.split('_')[0]}" for k in nonfinite)
                    print_warning(
                        f"the model's scores at epoch {epoch + 1} are not all finite ({counts} "
                        "held-out pair scores are NaN or infinite): that evaluation's MRR, "
                        "AUC and AP are left out of its record. Its embeddings have likely "
                        "overflowed: lower optimizer.lr (or train in train.precision=fp32)"
                    )
            record["time"] = timer.reset()
            record["peak_rss_mb"] = memory.run_peak_mb()
            with open(metrics_file, "a") as f:
                f.write(json.dumps(record) + "\n")
            if tracker is not None:
                tracker.epoch_done(record)  # queued: sent by the tracker's own thread
            # Not every epoch: an algorithm's state can be large, and taking it ends
            # the communication it overlaps (cdr's exchanges in flight).
            # A run asked to stop (a SLURM job near its end) stops here, checkpointed,
            # once every rank has heard it (signals reach the ranks at different steps).
            stop = stop_watched() and comm.max_int(int(stop_requested())) == 1
            # Early stopping: rank 0 keeps the history; every rank follows its decision.
            early = (
                cfg.train.patience > 0
                and "eval_bytes" in record
                and comm.max_int(
                    int(comm.rank == 0 and stopped_early([*history, record], cfg) is not None)
                )
                == 1
            )
            checkpoint = (
                (epoch + 1) % cfg.train.checkpoint_every == 0
                or epoch + 1 == end_epoch
                or stop
                or early
            )
            if checkpoint and (algorithm_state := algorithm.state_dict()) is not None:
                _save_algorithm_state(
                    checkpoint_dir, run_dir, comm.rank, epoch + 1, algorithm_state
                )
            if checkpoint and tracker is not None:
                tracker.checkpointed(epoch + 1)
            if comm.rank == 0:
                history.append(record)
                state = {
                    "model": model.state_dict(),
                    "epoch": epoch + 1,
                    "history": history,
                    "settings": settings_of(cfg),
                    "run_id": attempt.run_id,
                }
                if checkpoint:
                    save_checkpoint(
                        checkpoint_dir,
                        state | {"optimizer": optimizer.state_dict()},
                        run_dir=run_dir,  # its own copy: the shared file may be replaced later
                    )
                if cfg.train.keep_best and best_evaluation(history, cfg)[0] == epoch:
                    save_checkpoint(checkpoint_dir, state, BEST_CHECKPOINT, run_dir=run_dir)
                if display is not None:
                    display.epoch_done(record)
            if stop and epoch + 1 < end_epoch:
                raise RunStopped(epoch + 1)
            if early:
                break
    except BaseException:
        if tracker is not None:
            tracker.close()  # the trackers' runs are marked as stopped before their end
        raise
    finally:
        algorithm.close()
    if comm.rank != 0:
        if tracker is not None:
            tracker.finished(None)
        return None
    summary = summarize(history, cfg, comm.world_size) | {"restarts": attempt.number}
    with atomic_file(run_dir / "summary.json") as f:  # read by report and sweeps
        f.write(json.dumps(summary, indent=2) + "\n")
    if tracker is not None:
        tracker.finished(summary)
    return summary


def on_cpu(outputs: dict[str, tuple[torch.Tensor, torch.Tensor]]):
    """An evaluation's outputs on the CPU, where the metrics are computed (and sent over
    gloo, which takes CPU tensors only)."""
    return {split: (a.cpu(), b.cpu()) for split, (a, b) in outputs.items()}


def _forget_epochs_from(metrics_file: Path, epoch: int) -> None:
    """Drop the records of `epoch` and later from a rank's metrics file: an attempt that
    died after its last checkpoint left them, and the resumed run writes them again."""
    if not metrics_file.is_file():
        return
    lines = metrics_file.read_text().splitlines(keepends=True)
    kept = [line for line in lines if _epoch_of(line) < epoch]  # a cut last line goes too
    if len(kept) != len(lines):
        with atomic_file(metrics_file) as f:
            f.writelines(kept)


def _epoch_of(line: str) -> float:
    try:
        return json.loads(line)["epoch"]
    except (ValueError, KeyError, TypeError):
        return math.inf


# How Algorithm.gradient_reduction combines a step's gradients across ranks.
_REDUCE_GRADIENTS = {"mean": Communicator.all_reduce_mean, "sum": Communicator.all_reduce_sum_}


def train_epoch(
    algorithm: Algorithm, model: torch.nn.Module, optimizer: torch.optim.Optimizer, epoch: int
) -> dict[str, Any]:
    """One epoch of `algorithm`'s steps; every second of it is booked to a phase of its timer.

    A step: build the batch (mbc), zero the gradients and run the forward pass to
    the loss (fwd), backward (bwd), combine the gradients across ranks (ared),
    update (opt). What the algorithm does before the first step and after the
    last (its step plan, exchanges still in flight, the loss's all-reduce) is `sync`.
    """
    timer = algorithm.timer
    model.train()
    with timer.phase("sync"):
        steps = algorithm.begin_epoch(epoch)
    reduce = _REDUCE_GRADIENTS.get(algorithm.gradient_reduction)
    tables = sparse_tables(model)  # in model order: every rank combines them in the same order
    dense = [p for p in model.parameters() if all(p is not t for t in tables)]
    precision = algorithm.cfg.train.precision
    losses: list[float] = []
    clip_norm = algorithm.cfg.optimizer.clip_norm
    norms: list[torch.Tensor] = []  # each step's gradient norm before clipping
    busy = DeviceBusy(algorithm.device)  # the device's share of the epoch: is it kept fed?
    for step in range(steps):
        with timer.phase("mbc"):
            batch = algorithm.batch(step)
        busy.start()
        with timer.phase("fwd"), autocast(precision, algorithm.device):
            optimizer.zero_grad(set_to_none=False)
            loss = algorithm.loss(model, batch, step)
        if loss is not None:
            with timer.phase("bwd"):
                loss.backward()
            losses.append(float(loss.detach()))
        inject_fault(algorithm.comm.rank, epoch, step + 1)
        if reduce is not None:
            with timer.phase("ared"):
                for p in dense:
                    if p.grad is None:  # unused by this rank's steps so far (a relation's
                        p.grad = torch.zeros_like(p)  # weights): every rank sends every one
                reduce(algorithm.comm, [p.grad for p in dense])
                for table in tables:
                    table.grad = combine_sparse(algorithm.comm, table, algorithm.gradient_reduction)
        with timer.phase("opt"):
            if clip_norm:  # the combined gradients: every rank scales them alike
                norms.append(clip_gradients(dense + tables, clip_norm))
            optimizer.step()
        busy.stop()
        algorithm.on_step(step + 1, steps)
    with timer.phase("sync"):
        stats = algorithm.end_epoch(losses)
        if reduce is not None and algorithm.comm.world_size > 1:
            # Batch normalisation's running statistics, each rank's from its own
            # minibatches, averaged: every rank evaluates and checkpoints one model.
            running = [
                b for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var"))
            ]
            if running:
                algorithm.comm.all_reduce_mean(running, "allreduce")
    norm = torch.stack(norms).double().cpu().numpy() if norms else None
    clipped = (
        {"grad_norm": float(np.median(norm)), "clipped_steps": int((norm > clip_norm).sum())}
        if norm is not None
        else {}
    )
    return {**stats, "steps": steps, "device_busy_s": busy.take(), **clipped}


def combine_sparse(comm: Communicator, table: torch.nn.Parameter, reduction: str) -> torch.Tensor:
    """A sparse embedding gradient combined over the ranks: every rank's rows, summed where
    they meet (divided by the ranks for "mean"), so that every replica of the table takes
    the same update (a dense all-reduce would send the whole table every step)."""
    grad = table.grad
    if grad is None:
        grad = torch.sparse_coo_tensor(
            torch.zeros(1, 0, dtype=torch.int64, device=table.device),
            torch.zeros(0, table.shape[1], device=table.device),
            table.shape,
            check_invariants=True,
        )
    grad = grad.coalesce()
    if comm.world_size == 1:
        return grad
    # An all-gather of every rank's rows: an exchange that sends the same to each rank.
    rows = comm.exchange([grad.indices()[0]] * comm.world_size, "allreduce")
    values = comm.exchange([grad.values()] * comm.world_size, "allreduce")
    total = torch.sparse_coo_tensor(
        torch.cat(rows)[None], torch.cat(values), table.shape, check_invariants=True
    ).coalesce()
    return total / comm.world_size if reduction == "mean" else total


def restart_source(cfg, checkpoint_dir: Path, run_dir: Path, attempt) -> Path:
    """Where a run resumes from: a restarted or requeued attempt from its run directory's
    own copy when it has one (the shared train.checkpoint_dir may hold another run's file
    by then: a sweep's points share it), else train.checkpoint_dir. Not across hosts,
    whose run directories are their own: every rank must load the same checkpoint."""
    own = Path(run_dir) / CHECKPOINT
    if attempt.restarted and cfg.cluster.name != "hosts" and own.is_file():
        return Path(run_dir)
    return checkpoint_dir


def _save_algorithm_state(
    directory: Path, run_dir: Path, rank: int, epoch: int, state: Any
) -> None:
    """Each rank's own state, per checkpoint, beside the run's own copy of the model and
    in the shared directory (as the model's); the previous one is kept until the next is
    written, so that one still matches rank 0's checkpoint if the run dies in between."""
    name = algorithm_checkpoint(rank, epoch)
    save_checkpoint(directory, {"epoch": epoch, "state": state}, name, run_dir=run_dir)
    for folder in {Path(directory), Path(run_dir)}:
        saved = sorted(
            int(path.name.split(".epoch")[1].removesuffix(".pt"))
            for path in folder.glob(algorithm_checkpoint(rank, 0).replace("epoch0", "epoch*"))
        )
        for old in saved[:-2]:
            (folder / algorithm_checkpoint(rank, old)).unlink(missing_ok=True)


def is_metric(key: str) -> bool:
    """Whether a record's key is an evaluation figure the summary keeps (a figure of any
    task, gnnrun.tasks)."""
    figures = tuple(f"_{f}" for name in TASKS for f, _ in TASKS.get(name).figures)
    return key.endswith(figures) or "_hits@" in key


# The key of an evaluation whose validation scores collapsed (gnnrun.tasks.metrics).
COLLAPSED = "val_collapsed"
# The keys that count an evaluation's scores that were not finite (gnnrun.tasks.metrics).
NONFINITE = ("val_nonfinite", "test_nonfinite")


def summarize(history: list[dict[str, Any]], cfg, ranks: int) -> dict[str, Any]:
    """Final and best figures (best: of the task's validation figure), median epoch time
    and its split, bytes per epoch (rank 0). An evaluation whose scores collapsed is never
    the best."""
    task = task_of(cfg)
    metric = task.best_metric(history)
    best_epoch = best_evaluation(history, cfg)[0]
    best = next((r for r in history if r["epoch"] == best_epoch), {})
    last = next((r for r in reversed(history) if any(map(is_metric, r))), {})
    early = stopped_early(history, cfg)
    evaluated = {k.split("_")[0] for r in history for k in r if is_metric(k)}
    phases = (
        {k: float(np.median([r["time"].get(k, 0.0) for r in history])) for k in history[-1]["time"]}
        if history
        else {}
    )
    return {
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "algorithm": cfg.algorithm.name,
        "task": cfg.task.name,
        # What reports show of it: the figure that picked the best epoch, and the task's
        # figures with their names in tables (gnnrun.report reads no task module).
        "best_metric": metric,
        "figures": [list(f) for f in task.figures],
        "ranks": ranks,
        "epochs": len(history),
        "complete": len(history) == cfg.train.epochs or early is not None,
        **({"stopped_early": early} if early is not None else {}),
        "final": {k: v for k, v in last.items() if is_metric(k)},
        "best": {
            "epoch": best.get("epoch"),
            **{k: v for k, v in best.items() if is_metric(k)},
        },
        **(
            {"collapsed_epochs": collapsed}
            if (collapsed := [r["epoch"] for r in history if COLLAPSED in r])  # as best.epoch
            else {}
        ),
        # Splits without a figure: empty ones, or none evaluated yet.
        "not_evaluated": [s for s in ("val", "test") if s not in evaluated],
        "epoch_s_median": float(np.median([r["epoch_s"] for r in history])) if history else None,
        "time_median": phases,
        "bytes_per_epoch_rank0": float(np.median([sum(r["bytes"].values()) for r in history]))
        if history
        else 0,
        "peak_rss_mb_rank0": max((r["peak_rss_mb"] for r in history), default=None),
        # Epoch times depend on them (the allocator: 1.3-1.7x for full batch;
        # docs/performance.md).
        "threads_rank0": torch.get_num_threads(),
        "allocator_rank0": allocator_in_use(),
        "cpu_block_cache_rank0": cpu_allocator.describe(),
        **(
            {"split_fraction_rank0": history[-1]["split_fraction"]}
            if history and "split_fraction" in history[-1]
            else {}
        ),
        # hec: the cache hit rate per layer (input layer first) over all ranks, last epoch.
        **({"hit_rate": history[-1]["hit_rate"]} if history and "hit_rate" in history[-1] else {}),
        # cd0 / cdr: the share of DRPA's time in flight that rank 0 did not wait for.
        **(
            {"comm_hidden_rank0": float(np.median(hidden))}
            if (hidden := [r["comm_hidden"] for r in history if "comm_hidden" in r])
            else {}
        ),
        **(
            {"to_target": reached}
            if (reached := time_to_target(history, cfg.train.target, metric))
            else {}
        ),
    }


def validation_figures(history: list[dict[str, Any]], cfg) -> list[tuple[int, float | None]]:
    """(epoch, figure) of each evaluation in `history` (rank 0's records), the figure the
    task picks a run's best by; None where it betters nothing: scores that collapsed, or
    no figure (NaN, or no validation split)."""
    metric = task_of(cfg).best_metric(history)
    return [
        (r["epoch"], r[metric] if metric in r and COLLAPSED not in r else None)
        for r in history
        if "eval_bytes" in r or metric in r
    ]


def best_evaluation(history: list[dict[str, Any]], cfg) -> tuple[int | None, int]:
    """The epoch of the best validation figure in `history`, and how many evaluations came
    after it; a tie betters nothing: the first of equal figures is the best. (None,
    evaluations) when none has the figure."""
    best, best_epoch, since = -math.inf, None, 0
    for epoch, figure in validation_figures(history, cfg):
        if figure is not None and figure > best:
            best, best_epoch, since = figure, epoch, 0
        else:
            since += 1
    return best_epoch, since


def plateaus_so_far(history: list[dict[str, Any]], cfg, comm: Communicator) -> int:
    """optimizer.schedule=plateau: the plateaus of the validation figure after the warm-up,
    as rank 0's history counts them, on every rank (0 under another schedule)."""
    if cfg.optimizer.schedule != "plateau":
        return 0
    figures = [f for e, f in validation_figures(history, cfg) if e >= cfg.optimizer.warmup_epochs]
    mine = plateaus_in(figures, cfg.optimizer.plateau_patience) if comm.rank == 0 else 0
    return comm.max_int(mine)


def stopped_early(history: list[dict[str, Any]], cfg) -> dict[str, Any] | None:
    """Whether the run `history` records has ended by early stopping: its last
    train.patience evaluations did not better the best validation figure before them.
    None when it has not, or train.patience is 0, or every epoch has run, or no evaluation
    had a validation figure; else where and why."""
    patience = cfg.train.patience
    if not patience or not history or len(history) >= cfg.train.epochs:
        return None
    best_epoch, since = best_evaluation(history, cfg)
    if since < patience or best_epoch is None:  # (None: no split to validate on)
        return None
    return {"epoch": history[-1]["epoch"], "best_epoch": best_epoch, "patience": patience}


# Within this much (relative) of the target counts as reaching it.
TARGET_TOLERANCE = 0.01


def time_to_target(
    history: list[dict[str, Any]], target: float | None, metric: str = "val_acc"
) -> dict[str, Any] | None:
    """The first evaluation whose validation figure `metric` (the task's best: accuracy,
    MRR for link prediction) is within 1% of `target`, or of the run's best when there is
    none: how many epochs it took and the training seconds until then (evaluations
    excluded). None before any evaluation."""
    evaluated = [r for r in history if metric in r]
    if not evaluated:
        return None
    goal = target if target is not None else max(r[metric] for r in evaluated)
    reached = {"target": goal, "target_given": target is not None, "epochs": None, "seconds": None}
    elapsed = 0.0
    for record in history:
        elapsed += record["epoch_s"]
        if metric in record and record[metric] >= (1 - TARGET_TOLERANCE) * goal:
            return {**reached, "epochs": record["epoch"] + 1, "seconds": elapsed}
    return reached
