"""`pipeline` on real ranks: exactly `minibatch`'s training whatever its capacities, bounded
stages that run ahead across epochs, and failures that end the run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from gnnrun.algorithms.checks import check_runnable
from gnnrun.algorithms.pipeline.pipeline import (
    sample_workers_for,
    stage_nice_for,
    stage_threads_for,
)
from gnnrun.errors import GnnrunError
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import pipeline_checks  # noqa: E402

COMMON = (
    "dataset=synthetic-tiny",
    "model=sage",
    "algorithm.batch_size=20",
    "algorithm.fanouts=[5,5]",
)
# The options around the layers, batch normalisation's statistics per minibatch included.
AROUND = ("model.residual=true", "model.norm=batch", "model.jk=cat")
# The stage threads' priority as set; the others' the default, the trainer's.
NICE = {"four": ("algorithm.stage_nice=19",)}
CAPACITIES = {
    "synchronous": "{sample: 0, fetch: 0, device: 0}",
    "one": "{sample: 1, fetch: 1, device: 1}",
    "four": "{sample: 4, fetch: 4, device: 4}",
    "mixed": "{sample: 3, fetch: 0, device: 1}",
}


@pytest.mark.parametrize(
    "nprocs", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)  # 1 and 4 ranks: make test-slow
def test_pipeline_trains_exactly_as_minibatch_whatever_its_capacities(configure, nprocs):
    minibatch = configure(*COMMON, *AROUND, "algorithm=minibatch", f"cluster.nprocs={nprocs}")
    pipelines = {
        name: configure(
            *COMMON,
            *AROUND,
            "algorithm=pipeline",
            f"cluster.nprocs={nprocs}",
            f"algorithm.capacity={c}",
            *NICE.get(name, ()),
        )
        for name, c in CAPACITIES.items()
    }
    # Remote requests as all-to-alls, in lock-step with the other ranks: byte for byte
    # minibatch's traffic on every rank.
    pipelines["collective"] = configure(
        *COMMON,
        *AROUND,
        "algorithm=pipeline",
        f"cluster.nprocs={nprocs}",
        f"algorithm.capacity={CAPACITIES['four']}",
        "algorithm.remote_requests=collective",
    )
    results = run_on_ranks(
        pipeline_checks.pipeline_equals_minibatch, nprocs, minibatch, pipelines, 2
    )
    for rank, result in enumerate(results):
        assert result["steps"] >= 4, "the test needs several steps per epoch"
        for name, run in result["results"].items():
            assert run["difference"] is None, f"rank {rank}, capacities {name}: {run['difference']}"
            capacity = CAPACITIES.get(name, CAPACITIES["four"])
            fetch = int(capacity.split("fetch: ")[1][0])
            sample = int(capacity.split("sample: ")[1][0])
            # A stage thread runs at the priority set, else the rank's default (the lowest
            # for a rank alone on its machine; unchanged, 0, otherwise); a stage run inline,
            # in the trainer's thread, at the trainer's: the one the ranks started with,
            # this process's (not 0 where the tests run under `nice`).
            trainer = os.nice(0)
            default = 19 if nprocs == 1 else 0
            nice = int(NICE.get(name, (f"={default}",))[0].split("=")[1]) or trainer
            assert run["sample_nice"] == ([nice] if sample else [trainer]), (
                name,
                run["sample_nice"],
            )
            # One host copy per byte: every input row was gathered into a hand-over buffer,
            # and the device stage read that buffer itself; buffers are reused, at most one
            # per minibatch between the fetch stage and the device stage. A CPU rank alone
            # gathers the rows in order into each minibatch's own tensor, without them.
            handover = run["handover"]
            if nprocs == 1:
                assert handover is None and run["x_in_its_buffer"] == [False], name
                assert run["feature_bytes"] > 0, name
            else:
                assert run["x_in_its_buffer"] == [True], name
                assert run["pinned"] == [False], name  # (page-locked on a GPU rank only)
                assert handover["bytes_handed"] == run["feature_bytes"], (name, handover)
                assert handover["most_lent"] <= (fetch + 2 if fetch else 1), (name, handover)
                # Every buffer made is in use or was replaced by a larger one: none leaks.
                assert handover["buffers"] - handover["grown"] <= handover["most_lent"], handover
            if name == "collective":
                assert run["bytes"] == result["minibatch_bytes"], f"rank {rank}: bytes differ"
                continue
            # Served: a rank books the requests it sends and the replies it receives, so
            # the feature rows summed over the ranks are the rows the all-to-alls sent
            # (whose count also has the row counts every rank sends each rank per step).
            for epoch, (served, reference) in enumerate(
                zip(run["bytes"], result["minibatch_bytes"], strict=True)
            ):
                assert served["allreduce"] == reference["allreduce"], (rank, name, epoch)
                rows = sum(r["results"][name]["bytes"][epoch].get("features", 0) for r in results)
                sent = sum(r["minibatch_bytes"][epoch].get("features", 0) for r in results)
                if nprocs == 1:  # a rank alone asks no one: no row, no row count
                    assert sent == rows == 0, (name, epoch, sent, rows)
                else:
                    assert sent - rows == result["steps"] // 2 * nprocs * nprocs * 8
                    assert rows > 0
            for epoch in run["pipeline"]:
                for stage, figures in epoch.items():
                    capacity = int(CAPACITIES[name].split(f"{stage}: ")[1][0])
                    assert figures["max_held"] <= capacity, (rank, name, stage, figures)


@pytest.mark.parametrize(
    ("task", "nprocs"),
    [
        ("node", 1),
        ("node", 2),
        pytest.param("link", 1, marks=pytest.mark.slow),
        pytest.param("link", 2, marks=pytest.mark.slow),
    ],
)  # link: make test-slow
def test_sample_workers_build_minibatch_s_minibatches_in_order(configure, task, nprocs):
    """Three minibatches sampled at once by the sample stage's workers (on two ranks, each
    worker's requests to the other rank in flight beside the others'): the same blocks,
    features and targets as minibatch, step by step, and the same losses to float32
    rounding. (Bit for bit in most runs; in about 1 run of 10 under load the losses
    differed in the 7th digit, with the same minibatches: the trainer's sums, while three
    sampling threads run beside it. Not explained yet.) Each minibatch carries its own
    workers' requests: the bytes per epoch are those of one worker's."""
    common = (*COMMON, f"task={task}", f"cluster.nprocs={nprocs}")
    minibatch = configure(*common, "algorithm=minibatch")
    capacity = "algorithm.capacity={sample: 4, fetch: 2, device: 1}"
    pipelines = {
        "workers": configure(*common, "algorithm=pipeline", "algorithm.sample_workers=3", capacity),
        "one": configure(*common, "algorithm=pipeline", "algorithm.sample_workers=1", capacity),
    }
    results = run_on_ranks(
        pipeline_checks.pipeline_equals_minibatch, nprocs, minibatch, pipelines, 2
    )
    for rank, result in enumerate(results):
        run, one = result["results"]["workers"], result["results"]["one"]
        assert result["steps"] >= 6, "the test needs more steps than workers"
        assert run["same_inputs"], f"rank {rank}: the workers' minibatches differ from minibatch's"
        assert run["losses"] == pytest.approx(result["minibatch_losses"], rel=1e-6), run[
            "difference"
        ]
        assert run["sample_workers"] == 3 and one["sample_workers"] == 1
        assert run["sample_threads"] == [f"pipeline-sample-{w}" for w in range(3)]
        assert all(epoch["sample"]["max_held"] <= 4 for epoch in run["pipeline"])
        assert run["bytes"] == one["bytes"], f"rank {rank}: bytes per epoch differ"
        assert nprocs == 1 or run["bytes"][0].get("sample_requests", 0) > 0


def test_sample_workers_by_device_and_requests():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert sample_workers_for(cpu, 8, 1, collective=False) == 1
    assert sample_workers_for(gpu, 8, 8, collective=False) == 4
    assert sample_workers_for(gpu, 8, 2, collective=False) == 1
    assert sample_workers_for(gpu, 8, 8, collective=True) == 1  # all-to-alls, in lock-step
    assert sample_workers_for(gpu, 0, 8, collective=False) == 1  # sampled by the next stage


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("cluster.nprocs=2", "algorithm.remote_requests=collective"),
            "with algorithm.remote_requests=collective",
        ),
        (
            ("cluster.nprocs=1", "algorithm.capacity={sample: 0, fetch: 1, device: 1}"),
            "algorithm.capacity.sample above 0",
        ),
        (("algorithm.sample_workers=-1",), "give a count of worker threads"),
    ],
)
def test_sample_workers_where_they_cannot_work_are_refused(configure, overrides, message):
    with pytest.raises(GnnrunError, match=message):
        check_runnable(
            configure(*COMMON, "algorithm=pipeline", "algorithm.sample_workers=2", *overrides)
        )


@pytest.mark.slow  # make test-slow
def test_slow_stages_show_where_the_time_goes(configure):
    """A slow sampler makes the trainer wait, not compute longer; a slow trainer fills every
    buffer to its capacity and has the next epoch's first minibatch ready before it ends."""
    capacity = "{sample: 2, fetch: 2, device: 2}"
    cfg = configure(
        *COMMON, "algorithm=pipeline", "cluster.nprocs=2", f"algorithm.capacity={capacity}"
    )
    delay = 0.05
    results = run_on_ranks(pipeline_checks.slow_stages, 2, cfg, 3, delay)
    for result in results:
        assert result["difference"] is None, result["difference"]
        steps = result["steps"]

        def total(run, key, result=result):  # after the first epoch, whose start fills it
            return sum(epoch[key] for epoch in result[run][1:])

        added = 2 * steps * delay
        waited = total("slow_sampling", "pipeline_wait") - total("plain", "pipeline_wait")
        computed = sum(total("slow_sampling", k) - total("plain", k) for k in ("fwd", "bwd"))
        assert waited > 0.7 * added, (waited, added)
        assert computed < 0.3 * added, (computed, added)
        # Slow compute: the stages run ahead until every buffer is full, then block.
        first = result["slow_compute_stages"][0]
        assert all(first[stage]["max_held"] == 2 for stage in ("sample", "fetch", "device"))
        assert first["sample"]["blocked_s"] > 0
        assert all(epoch["ready"] >= 1 for epoch in result["slow_compute"][:-1])
        assert result["slow_compute"][-1]["ready"] == 0  # no epoch after the last


@pytest.mark.slow  # 9 s, and timed: it wants a machine that is not loaded
def test_a_stalled_rank_does_not_stall_the_others_sampling(configure):
    """Served requests: rank 0 builds its minibatches while rank 1's sampler is held up,
    since rank 1's server threads answer for it; with all-to-alls it builds none until
    rank 1 catches up."""
    common = (*COMMON, "algorithm=pipeline", "cluster.nprocs=2")
    capacity = "algorithm.capacity={sample: 3, fetch: 3, device: 1}"
    configs = {
        mode: configure(*common, capacity, f"algorithm.remote_requests={mode}")
        for mode in ("served", "collective")
    }
    built = run_on_ranks(pipeline_checks.built_while_a_rank_stalls, 2, configs, 3.0)[0]
    assert built["served"] >= 4, built  # every step of the epoch, or its buffers' worth
    assert built["collective"] == 0, built


def test_trainers_sharing_a_machine_part_train_as_on_parts_of_their_own(configure):
    """partitioner=two_level's machines layout (DistDGLv2): two trainers load their
    machine's one part and take the seeds the second level assigned them: the same
    seeds as on a part each, so the same blocks, losses and weights; and every vertex
    of their machine is local, so no feature row crosses between them."""
    common = (*COMMON, "cluster.nprocs=2", "partitioner=two_level")
    own_parts = configure(*common, "algorithm=minibatch", "partitioner.layout=trainers")
    shared = {
        name: configure(*common, f"algorithm={name}", "partitioner.layout=machines")
        for name in ("minibatch", "pipeline")
    }
    for rank, result in enumerate(
        run_on_ranks(pipeline_checks.pipeline_equals_minibatch, 2, own_parts, shared, 2)
    ):
        assert result["steps"] >= 4
        assert any(epoch["features"] for epoch in result["minibatch_bytes"])
        for name, run in result["results"].items():
            assert run["difference"] is None, f"rank {rank}, {name}: {run['difference']}"
            # (minibatch's all-to-alls still send each rank a row count per step: 8 bytes)
            rows = [
                epoch.get("features", 0) - result["steps"] // 2 * 2 * 8 for epoch in run["bytes"]
            ]
            assert max(rows) <= 0, (name, run["bytes"])


def test_a_failing_sampler_ends_the_run_naming_its_rank(configure):
    cfg = configure(*COMMON, "algorithm=pipeline", "cluster.nprocs=2")
    with pytest.raises(GnnrunError, match=r"rank 1 failed: .*sampler broke on rank 1"):
        run_on_ranks(pipeline_checks.failing_sampler, 2, cfg, 1, timeout_s=60)


def test_a_feature_cache_trains_exactly_and_moves_fewer_bytes(configure):
    """algorithm.gpu_cache_rows (here on CPU ranks, where the cache is in memory): the same
    training as minibatch, input rows gathered and fetched from other ranks only for
    the vertices the cache does not hold, and a hit rate that says so."""
    common = (*COMMON, "cluster.nprocs=2")
    minibatch = configure(*common, "algorithm=minibatch")
    plain = configure(*common, "algorithm=pipeline")
    cached = configure(*common, "algorithm=pipeline", "algorithm.gpu_cache_rows=400")
    for rank, result in enumerate(
        run_on_ranks(pipeline_checks.feature_cache, 2, minibatch, plain, cached, 2)
    ):
        assert result["difference"] is None, f"rank {rank}, with the cache: {result['difference']}"
        (without, with_cache), (fetched, fetched_cached) = (
            result["feature_bytes"],
            result["feature_requests"],
        )
        hit_rates = [epoch["hit_rate"] for epoch in result["cache"]]
        assert all(epoch["rows"] == 400 for epoch in result["cache"])
        assert min(hit_rates) > 0.1, hit_rates
        # Every row the cache holds is one fewer gathered (and, on a GPU, copied).
        for epoch, stats in enumerate(result["cache"]):
            row_bytes = without[epoch] / stats["lookups"]
            assert with_cache[epoch] == pytest.approx(without[epoch] - stats["hits"] * row_bytes)
        assert sum(fetched_cached) < sum(fetched), (fetched, fetched_cached)


def test_stage_threads_by_device():
    """On a CPU rank the compute keeps the cores; on a GPU rank the stages get them."""
    assert stage_threads_for(torch.device("cpu"), 16) == 1
    assert stage_threads_for(torch.device("cuda"), 16) == 8
    assert stage_threads_for(torch.device("cuda"), 1) == 1


def test_stage_priority_by_device_and_ranks_on_the_machine():
    """A CPU rank alone on its machine puts its stages at the lowest priority, beside other
    ranks at the trainer's; a value set is kept on a CPU rank; a GPU rank's are the trainer's."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert stage_nice_for(cpu, None, 1) == 19
    assert stage_nice_for(cpu, None, 2) == 0
    assert stage_nice_for(cpu, 0, 1) == 0
    assert stage_nice_for(cpu, 7, 4) == 7
    assert stage_nice_for(gpu, None, 1) == 0
    assert stage_nice_for(gpu, 19, 1) == 0


def test_a_rank_alone_on_its_machine_runs_its_stages_at_the_lowest_priority(tmp_path, monkeypatch):
    """End to end, through the launcher: the default setting (null) resolved by the rank,
    and the priority it chose in its metrics."""
    from gnnrun.cli import main

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    args = [*COMMON, "algorithm=pipeline", "cluster.nprocs=1", "train.epochs=1"]
    assert main(["train", *args, f"hydra.run.dir={run_dir}"]) == 0
    line = (run_dir / "metrics.rank0.jsonl").read_text().splitlines()[0]
    assert json.loads(line)["stage_nice"] == 19
