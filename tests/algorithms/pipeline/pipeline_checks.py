"""What the pipeline tests run on each real rank (imported by name there)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import torch

from gnnrun.algorithms.minibatch.minibatch import tensors_in
from gnnrun.threads import this_thread_nice
from gnnrun.train.trainer import train_epoch

# rank_checks lies in the folder above, which the ranks do not have on their path.
sys.path.insert(0, str(Path(__file__).parents[1]))
from rank_checks import algorithm_and_model  # noqa: E402


def trajectory(cfg, epochs: int, hooks=None, compute_delay_s: float = 0.0) -> dict:
    """Train `epochs` epochs of cfg's algorithm; every minibatch the trainer took, the
    losses, the epochs' figures and the final parameters. `hooks` slow or break the
    pipeline's stages; `compute_delay_s` slows each training step's compute."""
    _, algorithm, model, optimizer = algorithm_and_model(cfg)
    if hooks:
        algorithm.stage_hooks = dict(hooks)
    algorithm.plan(0, epochs)
    batches, step_losses, parameters_before = [], [], []
    take_loss = algorithm.loss

    def recorded_loss(model, batch, step):
        batches.append(
            (
                [(b.indptr, b.indices, b.src_ids) for b in batch.blocks],
                batch.x,
                batch.targets,
            )
        )
        parameters_before.append(flat_parameters(model))
        if compute_delay_s:
            time.sleep(compute_delay_s)
        loss = take_loss(model, batch, step)
        step_losses.append(float(loss.detach()))
        return loss

    algorithm.loss = recorded_loss
    epochs_out = []
    try:
        for epoch in range(epochs):
            algorithm.timer.reset()
            algorithm.comm.bytes.reset()
            stats = train_epoch(algorithm, model, optimizer, epoch)
            stats["time"] = algorithm.timer.reset()
            stats["bytes"] = algorithm.comm.bytes.reset()
            epochs_out.append(stats)
    finally:
        algorithm.close()
    return {
        "batches": batches,
        "epochs": epochs_out,
        "step_losses": step_losses,
        # The parameters each step started from, then the final ones.
        "parameters": [*parameters_before, flat_parameters(model)],
    }


def flat_parameters(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def training_difference(reference: dict, other: dict) -> str | None:
    """None when two trajectories train bit for bit alike; else where they first part and
    how (so that a failure says which of sampling, forward or update differed)."""
    steps = len(reference["batches"])
    if len(other["batches"]) != steps:
        return f"{len(other['batches'])} steps against {steps}"
    for step in range(steps):
        if not same_batch(reference["batches"][step], other["batches"][step]):
            return f"step {step}: the minibatches differ"
        before = reference["parameters"][step], other["parameters"][step]
        if not torch.equal(*before):
            return f"step {step}: {_parameters_apart(*before)}, with the same minibatches so far"
        loss = reference["step_losses"][step], other["step_losses"][step]
        if loss[0] != loss[1]:
            return (
                f"step {step}: the same minibatch and parameters, losses {loss[0]!r} and "
                f"{loss[1]!r} (the forward pass)"
            )
    final = reference["parameters"][steps], other["parameters"][steps]
    if not torch.equal(*final):
        return f"after the last step: {_parameters_apart(*final)}"
    return None


def _parameters_apart(a: torch.Tensor, b: torch.Tensor) -> str:
    apart = a != b
    return (
        f"{int(apart.sum())} of {a.numel()} parameters differ, by up to "
        f"{float((a - b).abs().max()):.3g} (the backward pass, all-reduce or optimizer step "
        "before it)"
    )


def same_inputs(reference: dict, other: dict) -> bool:
    """Bit-identical minibatches: blocks, input features and targets, step by step."""
    return len(reference["batches"]) == len(other["batches"]) and all(
        same_batch(a, b) for a, b in zip(reference["batches"], other["batches"], strict=True)
    )


def same_batch(a: tuple, b: tuple) -> bool:
    (blocks_a, x_a, y_a), (blocks_b, x_b, y_b) = a, b
    for block_a, block_b in zip(blocks_a, blocks_b, strict=True):
        if not all(torch.equal(s, t) for s, t in zip(block_a, block_b, strict=True)):
            return False
    # Targets: labels, or a link step's pairs (EdgeTargets).
    targets_a, targets_b = list(tensors_in(y_a)), list(tensors_in(y_b))
    if not torch.equal(x_a, x_b) or len(targets_a) != len(targets_b):
        return False
    return all(torch.equal(s, t) for s, t in zip(targets_a, targets_b, strict=True))


def pipeline_equals_minibatch(
    rank: int, world: int, minibatch, pipelines: dict, epochs: int
) -> dict:
    """For each pipeline config (by name): whether it trained exactly as `minibatch`, its
    stages' figures per epoch, and the bytes of both."""
    reference = trajectory(minibatch, epochs)
    out = {
        "steps": len(reference["batches"]),
        "minibatch_losses": [e["loss"] for e in reference["epochs"]],
        "minibatch_bytes": [e["bytes"] for e in reference["epochs"]],
        "threads": torch.get_num_threads(),  # the rank's compute threads
        "results": {},
    }
    for name, cfg in pipelines.items():
        seen = {
            "sample_nice": set(),
            "sample_threads": set(),
            "x_in_its_buffer": set(),
            "pinned": set(),
        }

        def sampling(item, seen=seen):
            seen["sample_nice"].add(this_thread_nice())
            seen["sample_threads"].add(threading.current_thread().name)

        def copying(item, seen=seen):
            # The rows the device stage reads are the buffer the fetch stage gathered into.
            lease = item.lease
            seen["pinned"].add(lease is not None and lease.storage.is_pinned())
            seen["x_in_its_buffer"].add(
                lease is not None
                and item.x.untyped_storage().data_ptr() == lease.storage.data_ptr()
            )

        run = trajectory(cfg, epochs, hooks={"sample": sampling, "device": copying})
        out["results"][name] = {
            **{key: sorted(values) for key, values in seen.items()},
            "handover": run["epochs"][-1].get("handover"),
            "feature_bytes": sum(e.get("feature_bytes", 0) for e in run["epochs"]),
            "difference": training_difference(reference, run),
            "same_inputs": same_inputs(reference, run),
            "losses": [e["loss"] for e in run["epochs"]],
            "bytes": [e["bytes"] for e in run["epochs"]],
            "pipeline": [e.get("pipeline", {}) for e in run["epochs"]],
            "sample_workers": run["epochs"][-1].get("sample_workers"),
        }
    return out


def slow_stages(rank: int, world: int, cfg, epochs: int, delay_s: float) -> dict:
    """The pipeline as it is, with a slow sampling stage, and with a slow compute step."""

    def slow(item):
        time.sleep(delay_s)

    def phases(run):
        return [
            {k: e["time"][k] for k in ("pipeline_wait", "fwd", "bwd")}
            | {"ready": e["next_epoch_ready"]}
            for e in run["epochs"]
        ]

    plain = trajectory(cfg, epochs)
    slow_sampling = trajectory(cfg, epochs, hooks={"sample": slow})
    slow_compute = trajectory(cfg, epochs, compute_delay_s=delay_s)
    return {
        "steps": len(plain["batches"]) // epochs,
        "plain": phases(plain),
        "slow_sampling": phases(slow_sampling),
        "slow_compute": phases(slow_compute),
        "slow_compute_stages": [e["pipeline"] for e in slow_compute["epochs"]],
        "difference": training_difference(plain, slow_sampling)
        or training_difference(plain, slow_compute),
    }


def failing_sampler(rank: int, world: int, cfg, failing_rank: int) -> None:
    """The sampling thread of `failing_rank` fails at its third minibatch."""

    def fail(item):
        if rank == failing_rank and item.step == 2:
            raise RuntimeError(f"sampler broke on rank {rank}")

    trajectory(cfg, 2, hooks={"sample": fail})


def feature_cache(rank: int, world: int, minibatch, plain, cached, epochs: int) -> dict:
    """`pipeline` with a feature cache against `minibatch` and against no cache: whether it
    trained exactly as `minibatch`, and the feature bytes and cache figures of both."""
    reference = trajectory(minibatch, epochs)
    without = trajectory(plain, epochs)
    with_cache = trajectory(cached, epochs)
    return {
        "difference": training_difference(reference, with_cache),
        "feature_bytes": [
            [e["feature_bytes"] for e in run["epochs"]] for run in (without, with_cache)
        ],
        "feature_requests": [
            [e["bytes"].get("features", 0) for e in run["epochs"]] for run in (without, with_cache)
        ],
        "cache": [e["feature_cache"] for e in with_cache["epochs"]],
    }


def built_while_a_rank_stalls(rank: int, world: int, configs: dict, stall_s: float) -> dict:
    """For each config (by name): how many minibatches this rank's sampling stage had
    built `stall_s` / 2 seconds after rank 1's sampler stalled for `stall_s` on its first one
    (a rank held up by its own work); then one epoch trains to the end."""
    built = {}
    for name, cfg in configs.items():
        _, algorithm, model, optimizer = algorithm_and_model(cfg)

        def stall(item):
            if rank == 1 and item.step == 0 and item.epoch == 0:
                time.sleep(stall_s)

        algorithm.stage_hooks = {"sample": stall}
        algorithm.plan(0, 1)
        time.sleep(stall_s / 2)
        built[name] = algorithm.pipeline.take_stats()["sample"]["items"]
        try:
            train_epoch(algorithm, model, optimizer, 0)
        finally:
            algorithm.close()
    return built
