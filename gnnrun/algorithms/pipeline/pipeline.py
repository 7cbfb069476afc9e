"""DistDGLv2's asynchronous minibatch pipeline: `minibatch`'s exact training, with every
minibatch built ahead of the trainer by threads, in bounded stages.

Stages (run by gnnrun.algorithms.pipeline.stages, which explains capacities,
blocking and failures):

    sample  the step's seeds (and their labels, or a link step's negatives),
            sampled hop by hop (a remote vertex by its owner) and compacted
            into blocks; by several workers at once (`algorithm.sample_workers`),
            handed on in order
    fetch   the input vertices' features (local rows, remote rows pulled from
            their owners), in one buffer reused from minibatch to minibatch
            (gnnrun.algorithms.pipeline.handover; page-locked on a GPU rank)
    device  the copy to the compute device (nothing to copy on a CPU rank): on a
            GPU rank, from pinned host memory on a CUDA stream of its own, the
            input rows then put in order on the GPU, so that the copy of the next
            minibatch overlaps the trainer's kernels; the trainer's stream waits
            for the copy's event before it uses the minibatch

and the trainer, which takes finished minibatches and runs forward, backward,
the gradient all-reduce and the optimizer step. On a CPU rank alone on its
machine the stage threads run at the lowest CPU priority (`stage_nice_for`;
`algorithm.stage_nice` sets it). `algorithm.capacity` bounds how
many finished minibatches wait after each stage (0 runs a stage inline in the
next one's thread; all 0 is `minibatch`'s synchronous loop).

Only immutable data is read ahead: graph structure, input features and
labels; nothing that depends on the model's parameters. The schedule spans all
the epochs the run trains (`plan`), so the next epoch's first minibatches are
built while this epoch's last steps train and evaluation runs.

Remote requests (`algorithm.remote_requests`): "served", the default, sends a
stage's sampling and feature requests to the owners' server threads
(gnnrun.comm.requests), which answer whatever their own rank is doing, so a rank
that is slow (its trainer, its sampler) holds up no other rank's stages; the
input rows land in the fetch stage's buffer, this rank's gathered into it and the
others' received into it, and the device stage puts them in the blocks' order on
the device (one copy per byte on the host, as DistDGLv2).
"collective" sends them as all-to-alls over a process group per stage
(`Communicator.private_channel`, never queued behind the trainer's gradient
all-reduce), which pair every rank's step with every other rank's.

Same minibatches as `minibatch`: the seeds of (epoch, step) come from the
same permutation and sampling is keyed by `step_key`, so the blocks, features,
losses and model updates are bit for bit those of `minibatch`, whatever the
capacities. Each minibatch carries the bytes its stages sent (served: the requests
sent and the replies received); the trainer adds them to the epoch that trains
it, whenever it was built.

Figures per epoch (beside `minibatch`'s): `pipeline_wait`, a finer phase inside
`mbc`, is the trainer's wait for a finished minibatch (the pipeline's bubble);
`pipeline` gives each stage's busy, blocked (its buffer full) and starved (its
input empty) seconds, items, and the most and mean minibatches its buffer held;
`next_epoch_ready` counts the next epoch's minibatches already finished when
this epoch ended.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from gnnrun.algorithms.base import open_own_part
from gnnrun.algorithms.minibatch.minibatch import (
    DistributedMinibatch,
    Minibatch,
    SampledConfig,
    step_key,
    tensors_in,
)
from gnnrun.algorithms.minibatch.sources import PartitionGraphSource, sample_minibatch
from gnnrun.algorithms.pipeline.feature_cache import FeatureCache
from gnnrun.algorithms.pipeline.handover import HandOverBuffers, Lease
from gnnrun.algorithms.pipeline.stages import Stage, StagePipeline
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.config import check
from gnnrun.errors import GnnrunError, did_you_mean
from gnnrun.ops.block import Block
from gnnrun.tasks.link import EdgeTargets
from gnnrun.threads import LOWEST, lower_this_thread_priority

STAGES = ("sample", "fetch", "device")
REMOTE_REQUESTS = ("served", "collective")


@dataclass
class PipelineConfig(SampledConfig):
    name: str = "pipeline"
    # Finished minibatches that may wait after each stage (DistDGLv2 keeps many cheap
    # sampled ones, fewer with their features, one on the device: 25, 5, 1); 0: inline.
    capacity: dict[str, int] = field(default_factory=lambda: {"sample": 8, "fetch": 4, "device": 1})
    # Intra-op threads of each stage (sampling kernels, feature gathers; the sample
    # stage's are split between its workers); the trainer keeps the rank's compute
    # threads. 0: `stage_threads_for` the rank's device.
    stage_threads: int = 0
    # Minibatches sampled at once, each by a worker thread of the sample stage
    # (DistDGLv2's pool of samplers; with several ranks, each worker's requests to the
    # others in flight beside the others'). 0: `sample_workers_for` the rank's device.
    sample_workers: int = 0
    # The stage threads' nice value on a CPU rank: 0, the trainer's priority; up to 19,
    # the lowest (the trainer's compute threads first: a stage thread that takes a core
    # from one of them mid parallel region holds up all of them at its end). None:
    # `stage_nice_for` the rank's device and the ranks on its machine.
    stage_nice: int | None = None
    # Input-feature rows of the most-connected vertices kept on the rank's device (the
    # GPU; gnnrun.algorithms.pipeline.feature_cache); 0: none.
    gpu_cache_rows: int = 0
    # How a rank asks the owners of remote vertices: "served", their server threads
    # answer whenever asked (DistDGLv2's sampler servers; no rank waits for another's
    # loop); "collective", all-to-alls that pair every rank's step with every other's.
    remote_requests: str = "served"

    def validate(self) -> None:
        super().validate()
        check(
            self.mode == "minibatch",
            "algorithm=pipeline trains minibatches: leave algorithm.mode out",
        )
        for name, value in self.capacity.items():
            check(
                name in STAGES,
                f"algorithm.capacity has no stage {name!r}{did_you_mean(name, STAGES)}; its stages "
                f"are {', '.join(STAGES)}",
            )
            check(
                value >= 0,
                f"algorithm.capacity.{name} is {value}: give a count of minibatches, 0 or more "
                "(0 runs the stage inline)",
            )
        check(
            self.stage_threads >= 0,
            f"algorithm.stage_threads is {self.stage_threads}: give a thread count, or 0 to "
            "let the rank's device decide",
        )
        check(
            self.sample_workers >= 0,
            f"algorithm.sample_workers is {self.sample_workers}: give a count of worker "
            "threads, or 0 to let the rank's device decide",
        )
        check(
            self.stage_nice is None or 0 <= self.stage_nice <= 19,
            f"algorithm.stage_nice is {self.stage_nice}: give a nice value from 0 (the "
            "trainer's priority) to 19 (the lowest), or null to let the rank decide",
        )
        check(
            self.remote_requests in REMOTE_REQUESTS,
            f"algorithm.remote_requests={self.remote_requests!r}"
            f"{did_you_mean(self.remote_requests, REMOTE_REQUESTS)}: give one of "
            + ", ".join(REMOTE_REQUESTS),
        )
        check(
            self.gpu_cache_rows >= 0,
            f"algorithm.gpu_cache_rows is {self.gpu_cache_rows}: give a count of rows, 0 or more",
        )


@dataclass
class _Item:
    """A minibatch on its way through the stages."""

    epoch: int
    step: int
    items: torch.Tensor  # the step's training vertices, or edges under task=link
    blocks: list[Block] = field(default_factory=list)
    x: torch.Tensor | None = None  # with a feature cache: the rows it did not hold
    rows_at: torch.Tensor | None = None  # x's rows come in the order x[rows_at] (served)
    cache_slots: torch.Tensor | None = None  # with a feature cache: each input's slot or -1
    copied: Any = None  # on a GPU rank, the event after the copy to the GPU
    lease: Lease | None = None  # the buffer x is in, until the device stage has read it
    targets: torch.Tensor | EdgeTargets | None = None
    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # bytes, by purpose


@ALGORITHMS.register("pipeline", PipelineConfig)
class PipelinedMinibatch(DistributedMinibatch):
    """`minibatch` with its minibatches built ahead by an asynchronous, bounded pipeline."""

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        workers, ranks = cfg.algorithm.sample_workers, cfg.cluster.nprocs
        if workers > 1 and ranks > 1 and cfg.algorithm.remote_requests == "collective":
            raise GnnrunError(
                f"algorithm.sample_workers={workers} with algorithm.remote_requests=collective: "
                "all-to-alls pair every rank's minibatch with every other rank's, one at a "
                "time; use algorithm.remote_requests=served, or leave algorithm.sample_workers out"
            )
        if workers > 1 and cfg.algorithm.capacity.get("sample", 0) == 0:
            raise GnnrunError(
                f"algorithm.sample_workers={workers} needs a sample stage of its own: "
                "algorithm.capacity.sample above 0"
            )

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        self.capacity = {name: int(cfg.algorithm.capacity.get(name, 0)) for name in STAGES}
        self.sample_workers = 1  # worker threads of the sample stage, once `plan` has set it
        self.pipeline: StagePipeline | None = None
        self.stage_nice = 0  # the stage threads' nice value, once `plan` has set it
        self.end = 0
        # Tests slow a stage down or make it fail: stage name -> called with each item first.
        self.stage_hooks: dict[str, Callable[[_Item], None]] = {}
        self._finished: dict[int, int] = defaultdict(int)  # epoch -> minibatches done by `device`
        # Per epoch: bytes of the input rows gathered, and inputs found in the feature cache.
        self._feature_bytes: dict[int, int] = defaultdict(int)
        self._cache_hits: dict[int, int] = defaultdict(int)
        self._inputs: dict[int, int] = defaultdict(int)
        self._finished_lock = threading.Lock()
        self.feature_cache: FeatureCache | None = None
        self.served: PartitionGraphSource | None = None  # the stages' source, when served
        self.handover: HandOverBuffers | None = None  # the fetch stage's buffers
        if cfg.algorithm.gpu_cache_rows and self.schema is not None:
            raise GnnrunError(
                "algorithm.gpu_cache_rows caches one feature table, and a heterogeneous "
                "graph has one per vertex type: leave algorithm.gpu_cache_rows=0"
            )

    # ------------------------------------------------------------------ the trainer's side

    def plan(self, start_epoch: int, end_epoch: int) -> None:
        self.close()
        steps = self.training_steps()
        rows = self.cfg.algorithm.gpu_cache_rows
        if rows and self.feature_cache is None:  # every rank fetches the same rows, once
            dataset = open_own_part(self.cfg, self.comm, self.partition_kind)[0]
            ids = FeatureCache.most_connected(dataset.indptr, rows)
            features = self.source.features(ids).to(self.device)
            self.feature_cache = FeatureCache(ids, features, dataset.num_nodes)
        copy_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        if self.cfg.algorithm.remote_requests == "served" and self.comm.distributed:
            self.served = sample_source = fetch_source = self.source.served()
            # Each stage thread's own requests (sample workers ask at once).
            take_sample_bytes = self.served.sampling.take_bytes
            take_fetch_bytes = self.served.fetching.take_bytes
        else:
            sample_comm, fetch_comm = self.comm.private_channel(), self.comm.private_channel()
            sample_source = self.source.talking_over(sample_comm)
            fetch_source = self.source.talking_over(fetch_comm)
            take_sample_bytes, take_fetch_bytes = sample_comm.bytes.reset, fetch_comm.bytes.reset
        # The input rows of a minibatch, each byte copied once into a reused buffer (pinned
        # on a GPU rank), put in order on the device.
        # A CPU rank of a one-rank run gathers them in order straight into the minibatch's own
        # tensor instead: the trainer reads it while the next is gathered, so a reused buffer
        # would cost a second copy.
        buffers = None
        in_order_on_cpu = copy_stream is None and self.source.whole_graph
        if self.schema is None and not in_order_on_cpu:
            buffers = self.handover = HandOverBuffers(pin=copy_stream is not None)
        compute_threads = torch.get_num_threads()
        threads = self.cfg.algorithm.stage_threads or stage_threads_for(
            self.device, compute_threads
        )
        nice = self.stage_nice = stage_nice_for(
            self.device, self.cfg.algorithm.stage_nice, self.comm.ranks_on_this_machine
        )
        workers = self.sample_workers = self.cfg.algorithm.sample_workers or sample_workers_for(
            self.device,
            self.capacity["sample"],
            threads,
            collective=self.comm.distributed and self.served is None,
        )

        def starting(threads: int) -> Callable[[], None]:
            def start_stage() -> None:
                if nice:
                    lower_this_thread_priority(nice)
                torch.set_num_threads(threads)

            return start_stage

        def sample(item: _Item) -> _Item:
            self._hook("sample", item)
            key = step_key(self.cfg.train.seed, item.epoch, item.step)
            seeds, exclude, item.targets = self.step_targets(item.items, key)
            item.blocks = sample_minibatch(sample_source, seeds, self.fanouts, key, exclude)
            _add(item.sent, take_sample_bytes())
            return item

        def fetch(item: _Item) -> _Item:
            self._hook("fetch", item)
            needed = item.blocks[0].src_ids
            inputs = needed.numel()
            if self.feature_cache is not None:
                item.cache_slots, needed = self.feature_cache.lookup(needed)
            if buffers is not None:
                lease = None

                def into(rows, row_shape, dtype):
                    nonlocal lease
                    lease = buffers.take(rows, row_shape, dtype)
                    return lease.rows

                item.x, item.rows_at = fetch_source.gather_rows(needed, into=into)
                item.lease = lease
            else:  # in order (a heterogeneous graph: a table per vertex type, each in order)
                item.x = fetch_source.features(needed)
            gathered = sum(t.numel() * t.element_size() for t in tensors_in(item.x))
            with self._finished_lock:  # what a GPU rank copies of the input rows
                self._feature_bytes[item.epoch] += gathered
                self._cache_hits[item.epoch] += inputs - needed.numel()
                self._inputs[item.epoch] += inputs
            _add(item.sent, take_fetch_bytes())
            return item

        def to_device(item: _Item) -> _Item:
            self._hook("device", item)
            with torch.cuda.stream(copy_stream) if copy_stream else contextlib.nullcontext():
                moved = Minibatch(item.blocks, item.x, item.targets).to(self.device, True)
                item.blocks, item.x, item.targets = moved.blocks, moved.x, moved.targets
                if item.rows_at is not None:  # the buffer's rows, in the blocks' order
                    item.x = item.x[item.rows_at.to(self.device, non_blocking=True)]
                if self.feature_cache is not None:
                    item.x = self.feature_cache.assemble(item.cache_slots, item.x)
            if copy_stream is not None:
                item.copied = torch.cuda.Event()
                item.copied.record(copy_stream)
            if item.lease is not None:  # read by now, or by the copy that `copied` ends
                assert buffers is not None
                buffers.give_back(item.lease, item.copied)
                item.lease = None
            with self._finished_lock:
                self._finished[item.epoch] += 1
            return item

        self.end = end_epoch
        self.pipeline = StagePipeline(
            self._schedule(start_epoch, end_epoch, steps),
            [
                Stage(
                    "sample",
                    self.capacity["sample"],
                    sample,
                    starting(max(1, threads // workers)),
                    workers,
                ),
                Stage("fetch", self.capacity["fetch"], fetch, starting(threads)),
                Stage("device", self.capacity["device"], to_device, starting(threads)),
            ],
        )
        # torch.set_num_threads in a stage's thread also changes process-wide settings
        # (measured: the trainer's steps then ran as if on one thread, 19.8 s of compute
        # per epoch instead of 11.2): the trainer sets its own again once they are set.
        torch.set_num_threads(compute_threads)

    def begin_epoch(self, epoch: int) -> int:
        if self.pipeline is None:
            self.plan(epoch, self.cfg.train.epochs)
        self.epoch, self.steps = epoch, self.training_steps()
        return self.steps

    def batch(self, step: int) -> Minibatch:
        assert self.pipeline is not None
        with self.timer.phase("pipeline_wait"):
            item = self.pipeline.take()
        if (item.epoch, item.step) != (self.epoch, step):
            raise RuntimeError(
                f"pipeline out of step: built epoch {item.epoch} step {item.step} for "
                f"epoch {self.epoch} step {step}"
            )
        for purpose, sent in item.sent.items():
            self.comm.bytes.add(purpose, sent)
        batch = Minibatch(item.blocks, item.x, item.targets)
        if item.copied is not None:
            # The trainer's kernels start once the copy has landed; its tensors, made on the
            # copy stream, are not reused there before the trainer's stream is done with them.
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(item.copied)
            for tensor in tensors_in(batch):
                tensor.record_stream(stream)
        return batch

    def end_epoch(self, losses: list[float]) -> dict[str, Any]:
        stats = super().end_epoch(losses)
        assert self.pipeline is not None
        stats["pipeline"] = self.pipeline.take_stats()
        stats["stage_nice"] = self.stage_nice  # the stage threads' priority (nice value)
        stats["sample_workers"] = self.sample_workers
        with self._finished_lock:
            stats["next_epoch_ready"] = self._finished.get(self.epoch + 1, 0)
            self._finished.pop(self.epoch, None)
            # Input-feature bytes the stages gathered for this epoch's minibatches: what a
            # GPU rank copies to the GPU (without the rows a feature cache held).
            stats["feature_bytes"] = self._feature_bytes.pop(self.epoch, 0)
            hits, inputs = self._cache_hits.pop(self.epoch, 0), self._inputs.pop(self.epoch, 0)
        if self.handover is not None:  # since the pipeline started
            stats["handover"] = self.handover.take_stats()
        if self.feature_cache is not None:
            stats["feature_cache"] = {
                "rows": self.feature_cache.num_rows,
                "hits": hits,
                "lookups": inputs,
                "hit_rate": hits / inputs if inputs else 0.0,
            }
        if self.epoch + 1 >= self.end:
            self.close()
        return stats

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
        if self.served is not None:  # after the stages: they may still be asking
            # Closing waits for every rank to close. On the way out of an exception it waits
            # a second only: the other ranks are still training (they close when the launcher
            # stops them), so a longer wait only held the error up (a failing sampler's run
            # took 23 s to end with 10 s here, 5 s with 1 s).
            failing = sys.exc_info()[0] is not None
            self.served.close(timeout_s=1.0 if failing else 300.0)
            self.served = None

    # ------------------------------------------------------------------ the stages' side

    def _schedule(self, start: int, end: int, steps: int) -> Iterator[_Item]:
        """Every step of epochs [start, end), in training order (run by the first stage)."""
        for epoch in range(start, end):
            order = self.epoch_order(epoch, steps)
            for step in range(steps):
                yield _Item(epoch, step, self.step_items(order, step))

    def _hook(self, stage: str, item: _Item) -> None:
        hook = self.stage_hooks.get(stage)
        if hook is not None:
            hook(item)


def stage_threads_for(device: torch.device, compute_threads: int) -> int:
    """Each stage's intra-op threads by default. On a CPU rank, one: the compute threads
    keep the rank's cores, and the stages (at a lower priority) take what they leave. On a
    GPU rank the trainer's thread only launches kernels, so the CPU's threads go to the
    stages, split between sampling and the feature gather, which run at the same time (the
    device stage's work is the GPU's)."""
    if device.type == "cpu":
        return 1
    return max(1, compute_threads // 2)


def sample_workers_for(
    device: torch.device, capacity: int, stage_threads: int, collective: bool
) -> int:
    """The sample stage's workers by default: on a GPU rank, up to 4, two of the stage's
    threads each; one elsewhere. A GPU rank's trainer waits for the CPU's sampling (68% of
    its epoch on an H200 with one sampling worker, 50% with four), and several minibatches
    sampled at once used two cores better than one minibatch's sampling split between them
    (15.3 against 18.4 ms a synthetic-large minibatch). A CPU rank's compute threads hold
    its cores; ranks that exchange in lock-step (`collective`) sample one minibatch at a
    time (`PipelinedMinibatch.check_config`)."""
    if device.type == "cpu" or collective or capacity == 0:
        return 1
    return max(1, min(4, stage_threads // 2))


def stage_nice_for(device: torch.device, asked: int | None, ranks_on_machine: int) -> int:
    """The stage threads' nice value: `asked` on a CPU rank; by default (None) the lowest
    priority on a CPU rank alone on its machine, the trainer's everywhere else.

    A rank alone has no communication for its stages to hide: its compute threads
    already take every core, and a stage thread at the trainer's priority preempts one
    of them in mid parallel region, so that the others wait for it at the region's end.
    At the lowest priority the stages run in the compute threads' gaps instead
    (measured on 2 cores, one rank: 1.07x `minibatch` against 0.92-1.00x at the
    trainer's priority). Beside other ranks, the lowest priority starves a rank's stages
    behind the other ranks' compute threads, and its trainer waits for them (0.41-0.50x
    at 4 ranks); on a GPU rank the stages are the CPU's main work
    (benchmarks/2026-11-27-pipeline-cpu.md).
    """
    if device.type != "cpu":
        return 0
    if asked is not None:
        return asked
    return LOWEST if ranks_on_machine == 1 else 0


def _add(total: dict[str, int], sent: dict[str, int]) -> None:
    for purpose, count in sent.items():
        total[purpose] += count
