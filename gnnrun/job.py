"""What `gnnrun data`, `partition`, `train`, `predict` and `embed` do with their composed config.

The command line (`gnnrun.cli`) parses, checks and composes; these functions are
the jobs Hydra runs, locally or, for `train` with cluster=slurm, pickled into
each SLURM task. `train` prepares the dataset and the partition before any rank
starts (rank 0 does it under SLURM while the others wait), then launches the ranks.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

from omegaconf import DictConfig

from gnnrun.errors import GnnrunError
from gnnrun.progress import console, out, print_table, print_warning


def _prepared(config, force: bool = False, hosts_prepare: bool = False):
    """The dataset the task trains on, prepared: chunked input is prepared on the job's
    ranks (gnnrun.data.prepare_ranks), none of them holding the graph, under cluster=local,
    and under cluster=hosts / slurm where `hosts_prepare` (`gnnrun data prepare` and `info`,
    which every host runs); any other in this process. None on a host that only started
    ranks (node 0 writes the copy)."""
    from gnnrun.tasks import prepare_for_task, task_of

    if (
        config.dataset.source == "chunked"
        and task_of(config).trains_vertices  # (a link task's copy is made in one process)
        and (config.cluster.name == "local" or hosts_prepare)
    ):
        from gnnrun.data.chunked_ranks import rank_table
        from gnnrun.data.prepare_ranks import check_preparable, prepare_chunked
        from gnnrun.launch.elastic import leads, run_rank_job

        if not leads(config.cluster):
            check_preparable(config)
            if run_rank_job(config, "prepare", None)[0] is None:  # node 0 found a current copy
                _only_ranks_here(config, "the prepared dataset", current=True)
            else:
                _only_ranks_here(config, "the prepared dataset")
            return None
        dataset, distributed = prepare_chunked(config, _every_rank(config, "prepare"), force=force)
        if distributed is not None:  # made now
            title = f"ranks preparing {dataset.name}"
            print_table(rank_table(distributed, title=title, written="files"))
        elif config.cluster.name != "local":  # current already: the other hosts' ranks leave
            run_rank_job(config, "prepare", None)
        return dataset
    return prepare_for_task(config.dataset, config.task, force=force)


def _every_rank(config, job: str):
    """`run_ranks(tmp_dir)` for gnnrun.data.prepare_ranks and gnnrun.partition.distributed:
    `job` on this host's ranks (and, under cluster=hosts / slurm, the other hosts' ranks
    with them, given `tmp_dir` by rank 0); every rank's result, in rank order."""
    from gnnrun.launch.elastic import run_rank_job

    return lambda tmp_dir: run_rank_job(config, job, tmp_dir)[0]  # each rank has them all


def _only_ranks_here(config, what: str, current: bool = False) -> None:
    """What a host (SLURM task) that only started ranks says when they are done."""
    import os

    if config.cluster.name == "slurm":
        here, lead = f"task {os.environ.get('SLURM_PROCID')}", "task 0"
        wrote = "its rank wrote its share"
    else:
        here, lead = f"node {config.cluster.node_rank}", "node 0"
        wrote = "its ranks wrote their share"
    out.print(
        f"{here}: {lead} found {what} current, nothing to write"
        if current
        else f"{here}: {wrote} of {what}; {lead} wrote the rest and printed the summary",
        markup=False,
        soft_wrap=True,
    )


def _check_rendezvous(config) -> None:
    from gnnrun.launch.elastic import check_rendezvous

    check_rendezvous(config.cluster)


def data_info(cfg: DictConfig, force: bool) -> None:
    from gnnrun.config import to_objects
    from gnnrun.report.tables import dataset_table

    config = to_objects(cfg)
    _check_rendezvous(config)
    dataset = _prepared(config, force=force, hosts_prepare=True)
    if dataset is None:  # another host's: its ranks did their share, and said so
        return
    print_table(dataset_table(dataset))


def data_prepare(cfg: DictConfig, force: bool) -> None:
    from gnnrun.config import to_objects

    config = to_objects(cfg)
    _check_rendezvous(config)
    dataset = _prepared(config, force=force, hosts_prepare=True)
    if dataset is None:  # another host's: its ranks did their share, and said so
        return
    out.print(
        f"prepared {dataset.name} at {dataset.path} (checksum {dataset.checksum[:12]})",
        markup=False,
        soft_wrap=True,
    )


def data_chunk(cfg: DictConfig, output: str, **sizes: int) -> None:
    from gnnrun.config import to_objects
    from gnnrun.data import build_dataset
    from gnnrun.data.chunked import write_chunks

    config = to_objects(cfg)
    metadata = write_chunks(Path(output), config.dataset, build_dataset, **sizes)
    out.print(
        f"wrote {config.dataset.name} as chunked files: {metadata} (train on it with "
        f"dataset=chunked dataset.name={config.dataset.name} dataset.path={metadata})",
        markup=False,
        soft_wrap=True,
    )


def partition(cfg: DictConfig) -> None:
    from gnnrun.config import to_objects
    from gnnrun.partition import partition_dataset
    from gnnrun.report.tables import partition_table
    from gnnrun.tasks import task_of

    config = to_objects(cfg)
    _check_rendezvous(config)
    if config.dataset.source == "chunked" and task_of(config).trains_vertices:
        from gnnrun.partition import distributed

        if distributed.supports(config.partitioner.name):
            return _partition_on_ranks(config)
        print_warning(
            f"partitioner={config.partitioner.name} runs in one process on the whole graph; "
            f"partitioner={' or '.join(distributed.DISTRIBUTED_PARTITIONERS)} runs on the "
            "ranks, each holding its share"
        )
    dataset = _prepared(config)
    book = partition_dataset(dataset, config.partitioner)
    print_table(partition_table(book, vertex_splits=task_of(config).trains_vertices))
    out.print(f"written to {book.path}", markup=False, soft_wrap=True)


def _partition_on_ranks(config) -> None:
    """`gnnrun partition` of chunked input: each rank reads its share and writes its parts."""
    from gnnrun.data.chunked_ranks import rank_table
    from gnnrun.launch.elastic import leads, run_rank_job
    from gnnrun.partition.distributed import check_distributable, partition_chunked
    from gnnrun.report.tables import partition_table

    if not leads(config.cluster):  # another host: its ranks join node 0's
        check_distributable(config)
        run_rank_job(config, "partition", None)
        return _only_ranks_here(config, "the partition")
    book = partition_chunked(config, _every_rank(config, "partition"))
    print_table(partition_table(book))
    print_table(rank_table(book.manifest["distributed"]))
    out.print(f"written to {book.path}", markup=False, soft_wrap=True)


def train(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from gnnrun.algorithms import (
        ALGORITHMS,
        check_dataset,
        check_runnable,
        check_training_vertices,
        idle_gpus,
    )
    from gnnrun.attempt import current_attempt
    from gnnrun.config import to_objects
    from gnnrun.io import check_folder_path
    from gnnrun.launch import forkserver, sweep
    from gnnrun.launch.elastic import run_ranks
    from gnnrun.launch.rank import own_process_threads
    from gnnrun.launch.slurm import run_slurm_rank
    from gnnrun.partition import ensure_partition
    from gnnrun.partition.book import open_partition
    from gnnrun.report.tables import summary_table
    from gnnrun.tracking import check_installed, make_tracker
    from gnnrun.train.display import TrainingDisplay
    from gnnrun.train.trainer import train

    hydra = HydraConfig.get()
    run_dir = Path(hydra.runtime.output_dir)
    in_sweep = hydra.mode == RunMode.MULTIRUN
    overrides = list(hydra.overrides.task)
    try:
        config = to_objects(cfg)
    except GnnrunError as exc:
        if not in_sweep:
            raise
        raise GnnrunError(f"sweep point {hydra.job.num} ({' '.join(overrides)}): {exc}") from None
    if in_sweep and sweep.finished_point(run_dir, overrides):
        console.print(
            sweep.skip_message(hydra.job.num, overrides, run_dir), soft_wrap=True, markup=False
        )
        return
    record_paths(config, run_dir)
    _check_rendezvous(config)
    algorithm = ALGORITHMS.get(config.algorithm.name)
    kind = algorithm.partition_kind
    slurm = config.cluster.name == "slurm"
    hosts = config.cluster.name == "hosts"
    check_runnable(config)  # also before anything is submitted or started
    if (
        kind is None
        and config.cluster.nprocs > 1
        and any(o.startswith("cluster.nprocs=") for o in overrides)
    ):
        print_warning(
            f"algorithm={config.algorithm.name} trains in one process: cluster.nprocs="
            f"{config.cluster.nprocs} is not used (algorithm=minibatch or cd0 train on ranks)"
        )
    idle = idle_gpus(config.cluster, overrides)
    if idle:
        print_warning(idle)
    check_installed(config.logger)
    check_folder_path(Path(config.train.checkpoint_dir), "train.checkpoint_dir")

    def prepare() -> None:
        """Dataset, partition, run directory: before any rank trains (rank 0's job under SLURM)."""
        check_runnable(config)
        dataset = _prepared(config)
        check_dataset(config, dataset)
        book = None
        if kind is not None:
            ensure_partition(dataset, config.partitioner)
            book = open_partition(
                Path(config.partitioner.output_dir),
                dataset_checksum=dataset.checksum,
                world_size=config.cluster.nprocs,
                kind=kind,
                shared_parts=algorithm.shares_parts,
            )
        check_training_vertices(config, dataset, book)
        if in_sweep:
            # A requeued SLURM job continues its own point: its files stay.
            keep = config.train.resume or current_attempt().restarted
            moved = sweep.begin_point(run_dir, overrides, keep_partial=keep)
            if moved is not None:
                console.print(
                    f"point {hydra.job.num}: the earlier attempt's files moved to {moved}",
                    markup=False,
                )

    if slurm:  # this process is one SLURM task, hence one rank
        summary = run_slurm_rank(config, run_dir, prepare)
        if summary is None:  # not rank 0
            return
    elif kind is None:  # one process on the whole dataset: this one
        with own_process_threads(config.cluster):
            prepare()
            tracker = make_tracker(config, run_dir, 0, 1)
            with TrainingDisplay(config) as display:
                summary = train(config, run_dir, display, tracker)
    elif hosts and config.cluster.node_rank != 0:  # node 0 prepares; this host's ranks wait
        check_runnable(config)
        run_ranks(config, run_dir)
        out.print(
            f"node {config.cluster.node_rank}: its ranks finished; node 0 printed the summary "
            f"and wrote it to its run directory. This host's metrics: {run_dir}",
            markup=False,
            soft_wrap=True,
        )
        return
    else:
        forkserver.start_ahead()
        prepare()
        summary = run_ranks(config, run_dir)
    print_table(summary_table(summary))
    out.print(f"run directory: {run_dir}", markup=False, soft_wrap=True)


# The run's data and raw roots as it resolved them (absolute): Hydra's config.yaml keeps
# `${oc.env:GNNRUN_DATA_ROOT,data}`, which another directory or environment resolves to
# another place. `gnnrun predict run=DIR` reads them (gnnrun.cli.inference_overrides).
PATHS_RECORD = Path(".hydra") / "paths.yaml"


def record_paths(config, run_dir: Path) -> None:
    import yaml

    from gnnrun.io import atomic_file

    paths = {
        "data_root": str(Path(config.paths.data_root).absolute()),
        "raw_root": str(Path(config.paths.raw_root).absolute()),
    }
    if not (run_dir / ".hydra").is_dir():  # Hydra writes it first; a test calling train() may not
        return
    with atomic_file(run_dir / PATHS_RECORD) as f:
        yaml.safe_dump(paths, f)


def infer(cfg: DictConfig, kind: str, run_dir: Path) -> None:
    """`gnnrun predict` / `gnnrun embed` with their composed config."""
    from gnnrun.config import to_objects
    from gnnrun.report.tables import inference_table

    summary = run_inference(to_objects(cfg), kind, run_dir)
    if summary is None:  # another host's: its ranks did their share, and said so
        return
    print_table(inference_table(summary))
    out.print(f"written to {summary['output_dir']}", markup=False, soft_wrap=True)


def run_inference(config, kind: str, run_dir: Path) -> dict | None:
    """Layer-wise inference (gnnrun.infer) on the ranks of config.cluster from the checkpoint
    of the run in `run_dir`; returns the summary that the output's manifest holds too (None
    on a host or SLURM task that only ran ranks: node 0's, task 0's, writes the output)."""
    from gnnrun.algorithms.checks import check_gpu_ranks
    from gnnrun.infer.run import finish_inference, infer_on_rank, plan_inference
    from gnnrun.launch import forkserver
    from gnnrun.launch.elastic import leads, run_rank_job
    from gnnrun.launch.slurm import run_slurm_inference

    check_gpu_ranks(config.cluster)
    lead = leads(config.cluster)
    with contextlib.ExitStack() as held:
        if config.cluster.name == "slurm":  # this task is a rank: task 0 prepares in it
            prepare = functools.partial(_prepare_inference, config, kind, run_dir, held)
            plan, figures = run_slurm_inference(config, kind, prepare if lead else None)
        elif not lead:  # another host: its ranks join node 0's, which prepared everything
            _check_rendezvous(config)
            # Node 0's refusals of the checkpoint, the settings and the output, here too:
            # this host would otherwise wait for node 0's ranks until cluster.join_timeout_s.
            plan_inference(config, kind, run_dir)
            run_rank_job(config, "infer", None)
        else:
            _check_rendezvous(config)
            if config.cluster.nprocs > 1:
                forkserver.start_ahead()
            plan = _prepare_inference(config, kind, run_dir, held)
            if config.cluster.name == "local" and config.cluster.nprocs == 1:
                figures = [infer_on_rank(config, plan)]
            else:
                figures = run_rank_job(config, "infer", plan)[0]  # each rank has them all
        if not lead:
            _only_ranks_here(config, "the predictions" if kind == "predict" else "the embeddings")
            return None
        return finish_inference(config, plan, figures)


def _prepare_inference(config, kind: str, run_dir: Path, held: contextlib.ExitStack):
    """What the leading process does before the ranks infer: check the checkpoint, the
    settings and the output directory before the dataset is prepared, the dataset and
    predict.candidates before partitioning; then take the output's lock (held until
    `held` closes: a second command on the same output waits) and make the work
    directory. Returns the plan."""
    from gnnrun.infer.output import refuse_occupied
    from gnnrun.infer.run import fit_dataset, plan_inference, prepare_work_dir
    from gnnrun.io import writer_lock
    from gnnrun.partition import check_partition_kind, ensure_partition
    from gnnrun.partition.book import open_partition
    from gnnrun.tasks import prepare_for_task

    plan = plan_inference(config, kind, run_dir)
    dataset = prepare_for_task(config.dataset, config.task)
    fit_dataset(config, plan, dataset)
    if config.cluster.nprocs > 1:
        check_partition_kind(
            config.partitioner,
            "edge_cut",
            f"gnnrun {kind} runs",
            "the run's (METIS where that is not an edge cut)",
        )
        ensure_partition(dataset, config.partitioner)
        open_partition(
            Path(config.partitioner.output_dir),
            dataset_checksum=dataset.checksum,
            world_size=config.cluster.nprocs,
            kind="edge_cut",
        )
    held.enter_context(writer_lock(Path(plan.output_dir)))
    refuse_occupied(Path(plan.output_dir))
    prepare_work_dir(config, plan, dataset)
    return plan
