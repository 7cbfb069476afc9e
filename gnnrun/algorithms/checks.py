"""What the launcher refuses (or announces) before any rank starts, per algorithm."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError, did_you_mean
from gnnrun.models import conv_widths
from gnnrun.models.hetero import TypedInputEncoder
from gnnrun.ops.precision import bf16_matmul_supported
from gnnrun.partition import check_partition_kind
from gnnrun.partition.book import PartitionBook
from gnnrun.tasks import task_of


def check_runnable(cfg) -> None:
    """Refuse, before anything is prepared, partitioned or queued, what cfg's algorithm cannot run."""
    algorithm = ALGORITHMS.get(cfg.algorithm.name)
    if algorithm.partition_kind is None:  # one process on the whole dataset
        if cfg.cluster.name == "slurm" and cfg.cluster.nprocs != 1:
            raise GnnrunError(
                f"algorithm={cfg.algorithm.name} runs one process: use cluster.nodes=1 "
                "cluster.tasks_per_node=1 with cluster=slurm"
            )
        if cfg.cluster.name == "hosts":
            raise GnnrunError(
                f"algorithm={cfg.algorithm.name} runs one process on one machine: use cluster=local"
            )
    if cfg.task.name not in algorithm.tasks:
        able = ", ".join(n for n in ALGORITHMS.names() if cfg.task.name in ALGORITHMS.get(n).tasks)
        raise GnnrunError(
            f"algorithm={cfg.algorithm.name} does not train task={cfg.task.name}: choose "
            f"algorithm= one of {able}"
        )
    algorithm.check_config(cfg)
    task_of(cfg).check_model(cfg.model)
    _check_link_loss(cfg)
    _check_batch_norm(cfg, algorithm.splits_batch)
    _check_device(cfg, algorithm)
    _check_precision(cfg, algorithm.precisions)
    _check_warmup(cfg)
    if algorithm.partition_kind is not None:
        check_partition_kind(
            cfg.partitioner, algorithm.partition_kind, f"algorithm={cfg.algorithm.name} trains"
        )
        if getattr(cfg.partitioner, "layout", None) == "machines" and not algorithm.shares_parts:
            raise GnnrunError(
                f"partitioner={cfg.partitioner.name} makes one part per machine, shared by its "
                f"trainers, which algorithm={cfg.algorithm.name} does not share: add "
                "partitioner.layout=trainers (a part per rank), or choose partitioner=metis"
            )
        if cfg.partitioner.num_parts != cfg.cluster.nprocs:  # one part per rank
            raise GnnrunError(
                f"partitioner.num_parts={cfg.partitioner.num_parts} but the run has "
                f"{cfg.cluster.nprocs} ranks: algorithm={cfg.algorithm.name} trains one part "
                "per rank; leave partitioner.num_parts out (it follows cluster.nprocs), or use "
                f"cluster.nprocs={cfg.partitioner.num_parts}"
            )


def _check_link_loss(cfg) -> None:
    whole_graph = cfg.algorithm.name == "single" and cfg.algorithm.mode == "full"
    if cfg.task.name == "link" and cfg.task.loss == "reconstruction" and not whole_graph:
        raise GnnrunError(
            f"task.loss=reconstruction scores every vertex pair of the whole graph in each "
            f"step, and algorithm={cfg.algorithm.name} trains on parts of it: use "
            "algorithm=single algorithm.mode=full, or task.loss=bce with sampled negatives"
        )


def _check_batch_norm(cfg, splits_batch: bool) -> None:
    ranks = cfg.partitioner.num_parts  # one part per rank (checked below)
    if splits_batch and cfg.model.norm == "batch" and ranks > 1:
        raise GnnrunError(
            f"model.norm=batch: algorithm={cfg.algorithm.name} spreads each full-graph step "
            f"over its {ranks} ranks, and each would normalise its own rows by their own "
            "statistics: use model.norm=layer (per vertex, exact on any ranks), or a sampled "
            "algorithm (minibatch, pipeline, hec; each rank's minibatch its own batch)"
        )


def _check_device(cfg, algorithm) -> None:
    device, devices = cfg.cluster.device, algorithm.devices
    if device not in devices:
        able = ", ".join(n for n in ALGORITHMS.names() if device in ALGORITHMS.get(n).devices)
        raise GnnrunError(
            f"algorithm={cfg.algorithm.name} runs on cluster.device={' or '.join(devices)}, "
            f"not {device}: use cluster.device=cpu, or one of the algorithms that run on "
            f"{device}: {able}"
        )
    if device == "cuda":
        # An algorithm of one process (`single`) trains in the launcher, on one GPU,
        # whatever cluster.nprocs says.
        check_gpu_ranks(cfg.cluster, 1 if algorithm.partition_kind is None else None)


def check_gpu_ranks(cluster, ranks: int | None = None) -> None:
    """Refuse GPU ranks (cluster.device=cuda) that cannot start: a backend that takes no
    GPU tensors, no GPU, or more ranks on a machine than it has GPUs (under NCCL). `ranks`:
    the ranks on this machine when not the cluster's own count."""
    if cluster.device != "cuda":
        return
    if cluster.backend not in ("auto", "nccl", "gloo"):
        raise GnnrunError(
            f"cluster.device=cuda exchanges GPU tensors through NCCL, not cluster.backend="
            f"{cluster.backend}: leave cluster.backend=auto (NCCL, with gloo beside it for "
            "what stays on the CPU)"
        )
    if cluster.name == "slurm":  # the GPUs are on the nodes SLURM allocates, not here
        if (cluster.gpus_per_node or 0) < cluster.tasks_per_node:
            raise GnnrunError(
                f"cluster=slurm with cluster.device=cuda runs one rank per GPU: set "
                f"cluster.gpus_per_node to cluster.tasks_per_node ({cluster.tasks_per_node})"
            )
        return
    if not torch.cuda.is_available():
        raise GnnrunError(
            f"cluster.device=cuda but this torch ({torch.__version__}) sees no CUDA device: "
            "use cluster.device=cpu, or run where GPUs and a CUDA build of torch are"
        )
    key = "tasks_per_node" if cluster.name == "hosts" else "nprocs"
    ranks, gpus = ranks or getattr(cluster, key), torch.cuda.device_count()
    if ranks > gpus and cluster.backend != "gloo":
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); gloo takes them,
        # moving GPU tensors through host memory.
        raise GnnrunError(
            f"cluster.device=cuda runs one rank per GPU, and this machine has {gpus} GPU(s) for "
            f"cluster.{key}={ranks} ranks: lower cluster.{key} to {gpus} (or, to test several "
            "ranks on fewer GPUs, cluster.backend=gloo: slower, through host memory)"
        )


def visible_gpus() -> int:
    """The CUDA devices this process's torch sees (0 with a CPU build)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def idle_gpus(cluster, overrides: list[str]) -> str | None:
    """What to tell a run on CPU ranks by default (cluster.device not given) on a machine
    whose torch sees GPUs: that they stay idle, and how to use them or say CPU on purpose.
    None elsewhere (SLURM's and other hosts' GPUs are not this machine's)."""
    if cluster.name != "local" or cluster.device != "cpu":
        return None
    if any(o.lstrip("+~").startswith("cluster.device=") for o in overrides):
        return None
    gpus = visible_gpus()
    if not gpus:
        return None
    return (
        f"this torch sees {gpus} GPU{'s' if gpus > 1 else ''} and the run trains on CPU ranks: "
        "cluster.device=cuda trains on the GPUs (docs/gpus.md); cluster.device=cpu keeps "
        "the CPU and silences this"
    )


def _check_warmup(cfg) -> None:
    """A warm-up as long as the run never reaches optimizer.lr: a mistake, not a recipe."""
    warmup, epochs = cfg.optimizer.warmup_epochs, cfg.train.epochs
    if warmup > epochs:
        raise GnnrunError(
            f"optimizer.warmup_epochs={warmup} is longer than train.epochs={epochs}: the rate "
            "would never reach optimizer.lr; shorten the warm-up or raise train.epochs"
        )


def _check_precision(cfg, precisions: tuple[str, ...]) -> None:
    precision = cfg.train.precision
    if precision not in precisions:
        raise GnnrunError(
            f"algorithm={cfg.algorithm.name} trains in train.precision={' or '.join(precisions)}, "
            f"not {precision}: use train.precision=fp32"
        )
    if precision == "bf16" and cfg.cluster.device == "cpu" and not bf16_matmul_supported():
        raise GnnrunError(
            "train.precision=bf16 needs a CPU with bfloat16 instructions (AVX-512 BF16 or AMX); "
            "on this one bfloat16 products are emulated and slower than float32: use "
            "train.precision=fp32"
        )


def check_known_dataset(cfg) -> None:
    """What `check_dataset` and the partitioner refuse, from what is known of the dataset
    without preparing it (its prepared copy's meta.json, or its config): a heterogeneous
    graph for an algorithm of homogeneous ones, more parts than vertices. A sweep runs it
    for every point before the first one starts; what cannot be known here is checked
    when the point starts."""
    heterogeneous, num_nodes = _dataset_facts(cfg.dataset)
    if heterogeneous:
        _refuse_heterogeneous(cfg, cfg.dataset.name, "")
    kind = ALGORITHMS.get(cfg.algorithm.name).partition_kind
    if kind is not None and num_nodes is not None and cfg.partitioner.num_parts > num_nodes:
        raise GnnrunError(
            f"partitioner.num_parts={cfg.partitioner.num_parts} exceeds the {num_nodes} "
            f"vertices of {cfg.dataset.name}: choose at most {num_nodes} parts (cluster.nprocs "
            "ranks, one part each)"
        )


def _dataset_facts(dataset_cfg) -> tuple[bool | None, int | None]:
    """(heterogeneous, vertex count) where known cheaply, else None: from the prepared
    copy's meta.json when it was made from this config, else from a synthetic config."""
    from gnnrun.data import dataset_identity

    meta_file = Path(dataset_cfg.prepared_dir) / "meta.json"
    try:
        meta = json.loads(meta_file.read_text())
        if meta["info"]["config"] == dataset_identity(dataset_cfg):
            return "hetero" in meta, int(meta["num_nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if dataset_cfg.source == "synthetic_hetero":
        return True, None
    if dataset_cfg.source == "synthetic":
        return False, int(dataset_cfg.num_nodes)
    return None, None


def _refuse_heterogeneous(cfg, name: str, detail: str) -> None:
    if ALGORITHMS.get(cfg.algorithm.name).heterogeneous:
        return
    able = ", ".join(n for n in ALGORITHMS.names() if ALGORITHMS.get(n).heterogeneous)
    raise GnnrunError(
        f"algorithm={cfg.algorithm.name} trains homogeneous graphs only, and {name} "
        f"is heterogeneous{detail}: choose algorithm= one of {able}"
    )


def check_dataset(cfg, dataset: GraphDataset) -> None:
    """Refuse what the dataset rules out: a heterogeneous dataset where the algorithm
    trains homogeneous graphs only, model settings that do not fit its types, relations
    or widths."""
    model = cfg.model
    schema = dataset.hetero
    in_dim = dataset.feat_dim
    if schema is not None:
        try:
            in_dim = TypedInputEncoder.width_for(schema, model.hidden, model.input_projection)
        except ValueError as exc:
            raise GnnrunError(f"{dataset.name}: {exc}") from None
    task = task_of(cfg)
    task.check_dataset(dataset)
    out_dim = task.out_dim(model, dataset)  # classes, or embeddings
    model.check_widths(conv_widths(model, in_dim, out_dim))
    # Only a sampled algorithm has relation fanouts (SampledConfig); full batch takes all.
    relation_fanouts = getattr(cfg.algorithm, "relation_fanouts", None) or {}
    if schema is None:
        if relation_fanouts:
            raise GnnrunError(
                f"algorithm.relation_fanouts is set but {dataset.name} is homogeneous (one "
                "relation): give the fanouts in algorithm.fanouts"
            )
        return
    _refuse_heterogeneous(
        cfg,
        dataset.name,
        f" ({schema.num_types} vertex types, {schema.num_relations} relations)",
    )
    names = schema.relation_names()
    for name in relation_fanouts:
        if name not in names:
            raise GnnrunError(
                f"algorithm.relation_fanouts names {name!r}, which is not a relation of "
                f"{dataset.name}{did_you_mean(name, names)}; its relations are {', '.join(names)}"
            )


def check_training_vertices(cfg, dataset: GraphDataset, book: PartitionBook | None) -> None:
    """Refuse a dataset without training vertices (edges, for task=link); warn of ranks
    that will have none, and of an empty validation or test set (not evaluated)."""
    from gnnrun.progress import print_warning

    task = task_of(cfg)
    task.check_targets(dataset)
    if not task.trains_vertices:
        return
    if book is None or not ALGORITHMS.get(cfg.algorithm.name).trains_on_every_rank:
        return
    empty = [part for part, figures in enumerate(book.manifest["parts"]) if figures["train"] == 0]
    if empty:
        print_warning(
            f"part(s) {', '.join(map(str, empty))} of {book.path} hold no training vertices: "
            "their ranks only serve samples and add zero gradients to every step's average "
            "(partitioner=metis with partitioner.balance_splits=true spreads them)"
        )
