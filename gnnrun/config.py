"""Structured-config schemas: every YAML under configs/ is checked against one of these.

Each group's YAML files start from a schema stored here in Hydra's ConfigStore
(`defaults: [/schema/<group>/<kind>@_here_, _self_]`), so a misspelt key or a
value of the wrong type fails when the config is composed, before any work
starts. `validate()` then checks what types cannot (ranges, sums, choices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, DictConfig, OmegaConf

from gnnrun.errors import GnnrunError


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise GnnrunError(f"invalid config: {message}")


@dataclass
class PathsConfig:
    # Prepared datasets, partitions and runs live under data_root.
    data_root: str = "${oc.env:GNNRUN_DATA_ROOT,data}"
    # Raw source files (Planetoid, OGB, MUSAE, ...) are looked up under raw_root.
    raw_root: str = "${oc.env:GNNRUN_RAW_ROOT,${paths.data_root}/raw}"


# ----------------------------------------------------------------------- datasets


@dataclass
class DatasetConfig:
    name: str = MISSING  # also the directory name of the prepared dataset
    source: str = MISSING  # key in gnnrun.data.DATASET_SOURCES
    seed: int = 0
    row_normalize: bool = (
        False  # divide each feature row by its sum (Kipf & Welling's preprocessing)
    )
    prepared_dir: str = "${paths.data_root}/prepared/${dataset.name}"

    def validate(self) -> None:
        _check(
            bool(self.name) and "/" not in self.name,
            f"dataset.name {self.name!r} must be a plain name",
        )


@dataclass
class SplitFractions:
    train: float = 0.1
    val: float = 0.1
    test: float = 0.8

    def validate(self, where: str) -> None:
        parts = (self.train, self.val, self.test)
        _check(all(0 <= p <= 1 for p in parts), f"{where} fractions must lie in [0, 1]")
        _check(sum(parts) <= 1 + 1e-9, f"{where} fractions sum to {sum(parts):.3f} > 1")


@dataclass
class SyntheticDatasetConfig(DatasetConfig):
    source: str = "synthetic"
    num_nodes: int = 2000
    avg_degree: float = 10.0  # directed edges per vertex after symmetrisation
    num_classes: int = 8  # one community per class
    feat_dim: int = 32
    homophily: float = 0.8  # probability that an edge stays inside its community
    power_law_exponent: float = 2.5  # of the expected-degree distribution
    max_degree_fraction: float = 0.01  # caps expected degree at this share of the nodes
    feature_noise: float = 1.0  # noise std relative to the class-centroid spread
    split: SplitFractions = field(default_factory=SplitFractions)

    def validate(self) -> None:
        super().validate()
        _check(self.num_nodes >= 2, "dataset.num_nodes must be at least 2")
        _check(0 < self.avg_degree < self.num_nodes, "dataset.avg_degree must be in (0, num_nodes)")
        _check(
            2 <= self.num_classes <= self.num_nodes, "dataset.num_classes must be in [2, num_nodes]"
        )
        _check(self.feat_dim >= 1, "dataset.feat_dim must be positive")
        _check(0 <= self.homophily <= 1, "dataset.homophily must be in [0, 1]")
        _check(
            self.power_law_exponent > 2, "dataset.power_law_exponent must exceed 2 (finite mean)"
        )
        _check(0 < self.max_degree_fraction <= 1, "dataset.max_degree_fraction must be in (0, 1]")
        _check(self.feature_noise >= 0, "dataset.feature_noise must be >= 0")
        self.split.validate("dataset.split")


@dataclass
class PlanetoidDatasetConfig(DatasetConfig):
    source: str = "planetoid"
    planetoid_name: str = MISSING  # cora | citeseer | pubmed: the ind.<name>.* file prefix
    raw_dir: str = MISSING

    def validate(self) -> None:
        super().validate()
        _check(
            self.planetoid_name in ("cora", "citeseer", "pubmed"),
            f"dataset.planetoid_name {self.planetoid_name!r} is not one of cora, citeseer, pubmed",
        )


@dataclass
class OgbDatasetConfig(DatasetConfig):
    source: str = "ogb"
    ogb_name: str = MISSING  # e.g. ogbn-arxiv
    root: str = "${paths.raw_root}/ogb"  # holds <ogb_name with _ for ->/raw, split/...
    to_undirected: bool = True  # add reverse edges to directed graphs (arxiv, papers100M)

    def validate(self) -> None:
        super().validate()
        _check(
            self.ogb_name.startswith("ogbn-"),
            f"dataset.ogb_name {self.ogb_name!r} is not an ogbn-* name",
        )


@dataclass
class CustomDatasetConfig(DatasetConfig):
    source: str = "custom"
    path: str = MISSING  # a .npz file, layout in the README
    to_undirected: bool = True
    split: SplitFractions = field(default_factory=SplitFractions)  # used when the file has no split

    def validate(self) -> None:
        super().validate()
        self.split.validate("dataset.split")


@dataclass
class MusaeDatasetConfig(DatasetConfig):
    source: str = "musae"
    raw_dir: str = MISSING
    prefix: str = "facebook"  # <prefix>_edges.csv, <prefix>_features.json, <prefix>_target.csv
    label_column: str = "page_type"
    feature_dim: int = 128  # truncated SVD of the sparse bag of feature ids; 0 keeps them dense
    split: SplitFractions = field(default_factory=lambda: SplitFractions(0.2, 0.2, 0.6))

    def validate(self) -> None:
        super().validate()
        _check(self.feature_dim >= 0, "dataset.feature_dim must be >= 0")
        self.split.validate("dataset.split")


@dataclass
class HeterophilousDatasetConfig(DatasetConfig):
    """The npz layout of Platonov et al.'s heterophilous benchmarks (tolokers, ...)."""

    source: str = "heterophilous"
    file: str = MISSING
    split: int = 0  # which of the file's fixed splits

    def validate(self) -> None:
        super().validate()
        _check(self.split >= 0, "dataset.split must be >= 0")


# -------------------------------------------------------------------- partitioners


@dataclass
class PartitionerConfig:
    name: str = MISSING  # key in gnnrun.partition.PARTITIONERS
    num_parts: int = II("cluster.nprocs")  # one part per rank unless told otherwise
    seed: int = 0
    output_dir: str = (
        "${paths.data_root}/partitions/${dataset.name}/${partitioner.name}-${partitioner.num_parts}"
    )

    def validate(self) -> None:
        _check(self.num_parts >= 1, "partitioner.num_parts must be at least 1")
        _check(self.num_parts <= 64 or self.name != "libra", "libra supports at most 64 parts")


@dataclass
class MetisPartitionerConfig(PartitionerConfig):
    name: str = "metis"
    # Balance train/val/test vertex counts and edges per part as extra METIS
    # constraints, as DistDGL does; off: balance vertices only.
    balance_splits: bool = True
    balance_edges: bool = True


@dataclass
class TwoLevelPartitionerConfig(MetisPartitionerConfig):
    name: str = "two_level"
    num_machines: int = 1  # first level; num_parts / num_machines trainers per machine

    def validate(self) -> None:
        super().validate()
        _check(self.num_machines >= 1, "partitioner.num_machines must be at least 1")
        _check(
            self.num_parts % self.num_machines == 0,
            f"partitioner.num_parts ({self.num_parts}) must be a multiple of "
            f"partitioner.num_machines ({self.num_machines})",
        )


# ------------------------------------------------- model, algorithm, cluster, train


# Names the models accept (gnnrun.models maps them to functions and layers).
ACTIVATIONS = ("relu", "elu", "gelu")
SAGE_AGGREGATORS = ("mean", "gcn")


@dataclass
class ModelConfig:
    name: str = MISSING  # sage | gcn | gat
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.5  # on hidden features, after each activation
    # On the input features. Kipf & Welling's GCN and DGL's full-batch examples
    # drop inputs; DGL's minibatch examples (and the papers' presets) do not.
    input_dropout: float = 0.0
    activation: str = "relu"
    aggregator: str = "mean"  # sage: mean | gcn
    heads: int = 1  # gat
    fanouts: list[int] = field(default_factory=lambda: [10, 25])  # seeds first (PyG order)
    batch_size: int = 1000
    lr: float = 0.003
    weight_decay: float = 0.0

    def validate(self) -> None:
        _check(self.layers >= 1, "model.layers must be at least 1")
        _check(self.hidden >= 1, "model.hidden must be positive")
        _check(0 <= self.dropout < 1, "model.dropout must be in [0, 1)")
        _check(0 <= self.input_dropout < 1, "model.input_dropout must be in [0, 1)")
        _check(len(self.fanouts) == self.layers, "model.fanouts needs one entry per layer")
        _check(
            all(f >= 1 or f == -1 for f in self.fanouts),
            f"model.fanouts {list(self.fanouts)}: each entry is the neighbours sampled per "
            "vertex, at least 1 (or -1 for all of them; 0 would train without neighbours)",
        )
        _check(self.batch_size >= 1, "model.batch_size must be positive")
        _check(
            self.activation in ACTIVATIONS,
            f"model.activation {self.activation!r}: choose one of {', '.join(ACTIVATIONS)}",
        )
        _check(
            self.aggregator in SAGE_AGGREGATORS,
            f"model.aggregator {self.aggregator!r}: choose one of {', '.join(SAGE_AGGREGATORS)}",
        )
        _check(self.heads >= 1, f"model.heads must be at least 1 (got {self.heads})")
        _check(
            self.name != "gat" or self.layers == 1 or self.hidden % self.heads == 0,
            f"model.hidden ({self.hidden}) must be a multiple of model.heads ({self.heads}): "
            "hidden GAT layers concatenate their heads",
        )
        _check(self.lr > 0, f"model.lr must be positive (got {self.lr})")
        _check(self.weight_decay >= 0, "model.weight_decay must be >= 0")


@dataclass
class AlgorithmConfig:
    name: str = MISSING  # key in gnnrun.algorithms.ALGORITHMS
    mode: str = "minibatch"  # single: full | minibatch

    def validate(self) -> None:
        _check(
            self.mode in ("full", "minibatch"),
            f"algorithm.mode {self.mode!r}: choose full or minibatch",
        )


BACKWARD_COMPLETIONS = ("autograd", "delayed", "exact")


@dataclass
class DelayedAggregatesConfig(AlgorithmConfig):
    """cdr (DistGNN): remote partial aggregates sent at epoch t are used from epoch t + delay."""

    mode: str = "full"
    delay: int = 5  # epochs between sending split vertices' partial aggregates and using them
    # Split vertices communicate in turn: bin (vertex id % bins) at the epochs = bin mod
    # bins. None: one bin per epoch of delay (at least one), as DistGNN's released code
    # groups them; a remote sum is then delay to 2 x delay - 1 epochs old.
    bins: int | None = None
    # How split clones complete their partial *gradients*: `autograd`, the gradient of
    # the forward pass as it ran (stale remote sums are constants; delay 0 is cd0);
    # `delayed` like the forward pass; `exact` synchronously every layer (DistGNN's
    # released code). Completing gradients of a stale forward pass makes training
    # oscillate (README, DistGNN section), hence the default.
    backward: str = "autograd"

    def validate(self) -> None:
        super().validate()
        _check(self.mode == "full", "algorithm.mode: DistGNN's algorithms train full batch")
        _check(self.delay >= 0, "algorithm.delay must be >= 0 (0 is cd0)")
        _check(
            self.bins is None or self.bins >= 1,
            "algorithm.bins must be at least 1, or null for one bin per epoch of delay",
        )
        _check(
            self.backward in BACKWARD_COMPLETIONS,
            f"algorithm.backward must be one of {BACKWARD_COMPLETIONS}, not {self.backward!r}",
        )


@dataclass
class HistoricalEmbeddingCacheConfig(AlgorithmConfig):
    """hec (DistGNN-MB): halo embeddings come from a per-layer cache filled by pushes.

    Defaults are the paper's settings for every experiment (section 5).
    """

    cache_size: int = 1_000_000  # cs: cache lines per layer (input features included)
    lifespan: int = 2  # ls: a line older than this many minibatches is purged
    push_limit: int = 2000  # nc: embeddings pushed per layer to each remote rank per minibatch
    delay: int = 1  # d: a push started at minibatch k is stored remotely at minibatch k + d

    def validate(self) -> None:
        super().validate()
        _check(self.mode == "minibatch", "algorithm.mode: hec trains on minibatches")
        _check(self.cache_size >= 0, "algorithm.cache_size must be >= 0 (0: local-only training)")
        _check(self.lifespan >= 0, "algorithm.lifespan must be >= 0")
        _check(self.push_limit >= 0, "algorithm.push_limit must be >= 0")
        _check(self.delay >= 0, "algorithm.delay must be >= 0")


@dataclass
class ClusterConfig:
    name: str = MISSING  # local | slurm
    nprocs: int = 2  # ranks (the world size); local: on this node
    backend: str = "auto"  # auto | gloo | nccl | ccl
    threads_per_rank: int = 0  # 0: cores of one socket (or all cores / nprocs)
    comm_cores: int = 0  # cores per rank left to communication
    timeout_s: int = 300  # collective timeout

    def validate(self) -> None:
        _check(self.nprocs >= 1, "cluster.nprocs must be at least 1")
        _check(
            self.backend in ("auto", "gloo", "nccl", "ccl", "mpi"),
            f"cluster.backend {self.backend!r} unknown",
        )
        _check(
            self.threads_per_rank >= 0 and self.comm_cores >= 0,
            "cluster thread counts must be >= 0",
        )
        _check(self.timeout_s > 0, "cluster.timeout_s must be positive")


# sbatch options gnnrun sets itself from the fields above (or submitit does).
_SBATCH_MANAGED = {
    "nodes": "cluster.nodes",
    "ntasks": "cluster.nodes and cluster.tasks_per_node",
    "ntasks-per-node": "cluster.tasks_per_node",
    "cpus-per-task": "cluster.cpus_per_task",
    "gpus-per-node": "cluster.gpus_per_node",
    "partition": "cluster.partition",
    "account": "cluster.account",
    "qos": "cluster.qos",
    "time": "cluster.time_limit_min",
    "mem": "cluster.mem_gb",
    "output": "nothing (logs go to <sweep dir>/.submitit/)",
    "error": "nothing (logs go to <sweep dir>/.submitit/)",
    "array": "nothing (a sweep submits one job array per resource shape)",
}


@dataclass
class SlurmClusterConfig(ClusterConfig):
    """cluster=slurm: one SLURM task per rank, submitted through submitit.

    The world size is nodes x tasks_per_node; nprocs follows it (and with it
    partitioner.num_parts). The fields map onto sbatch options (configs/cluster/slurm.yaml
    passes them to Hydra's submitit launcher).
    """

    name: str = "slurm"
    nodes: int = 1
    tasks_per_node: int = 1  # ranks per node: one per socket (CPU) or one per GPU
    nprocs: int = II("gnnrun.world_size:${cluster.nodes},${cluster.tasks_per_node}")
    cpus_per_task: int | None = None  # None: SLURM's default (1)
    gpus_per_node: int | None = None
    mem_gb: int | None = None  # per node; None: the partition's default
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = 60
    sbatch: dict[str, Any] = field(default_factory=dict)  # more sbatch options, without "--"
    setup: list[str] = field(default_factory=list)  # shell lines run before srun (module load ...)
    master_port: int = 0  # rendezvous port on the first node; 0: derived from the job id

    def validate(self) -> None:
        super().validate()
        _check(self.nodes >= 1, "cluster.nodes must be at least 1")
        _check(self.tasks_per_node >= 1, "cluster.tasks_per_node must be at least 1")
        world = self.nodes * self.tasks_per_node
        _check(
            self.nprocs == world,
            f"cluster.nprocs ({self.nprocs}) must be the world size under SLURM, "
            f"cluster.nodes x cluster.tasks_per_node = {world}: set those instead",
        )
        _check(
            self.cpus_per_task is None or self.cpus_per_task >= 1,
            "cluster.cpus_per_task must be at least 1 (or null: SLURM's default)",
        )
        _check(
            self.gpus_per_node is None or self.gpus_per_node >= 0,
            "cluster.gpus_per_node must be >= 0 (or null)",
        )
        _check(self.mem_gb is None or self.mem_gb >= 1, "cluster.mem_gb must be at least 1")
        _check(self.time_limit_min >= 1, "cluster.time_limit_min must be at least 1")
        _check(
            self.master_port == 0 or 1024 <= self.master_port <= 65535,
            "cluster.master_port must be 0 (from the job id) or in [1024, 65535]",
        )
        for key in self.sbatch:
            option = str(key).lstrip("-").replace("_", "-")
            _check(
                option not in _SBATCH_MANAGED,
                f"cluster.sbatch.{key}: gnnrun sets --{option} from {_SBATCH_MANAGED.get(option)}",
            )


def _world_size(nodes: Any, tasks_per_node: Any) -> int:
    """${gnnrun.world_size:nodes,tasks_per_node}: SLURM's world size (checked here because
    partitioner.num_parts, validated first, follows it)."""
    for name, value in (("nodes", nodes), ("tasks_per_node", tasks_per_node)):
        if int(value) < 1:
            raise ValueError(f"cluster.{name} must be at least 1")
    return int(nodes) * int(tasks_per_node)


OmegaConf.register_new_resolver("gnnrun.world_size", _world_size, replace=True)


@dataclass
class TrainConfig:
    epochs: int = 10
    seed: int = 0
    eval_every: int = 1
    # Resume from the checkpoint in checkpoint_dir when there is one.
    resume: bool = False
    checkpoint_dir: str = (
        "${paths.data_root}/checkpoints/${dataset.name}/"
        "${algorithm.name}-${model.name}-p${cluster.nprocs}-s${train.seed}"
    )
    stop_after: int = 0  # stop after this many epochs of this invocation (0: run to the end)
    # Checkpoint every this many epochs, and at the end of every invocation.
    checkpoint_every: int = 10

    def validate(self) -> None:
        _check(self.epochs >= 1, "train.epochs must be at least 1")
        _check(self.eval_every >= 1, "train.eval_every must be at least 1")
        _check(self.checkpoint_every >= 1, "train.checkpoint_every must be at least 1")
        _check(
            self.stop_after >= 0,
            f"train.stop_after must be >= 0 (epochs of this invocation; 0: run to the end), "
            f"not {self.stop_after}",
        )


@dataclass
class GnnrunConfig:
    dataset: Any = MISSING
    partitioner: Any = MISSING
    model: Any = MISSING
    algorithm: Any = MISSING
    cluster: Any = MISSING
    paths: PathsConfig = field(default_factory=PathsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": {
        "synthetic": SyntheticDatasetConfig,
        "planetoid": PlanetoidDatasetConfig,
        "ogb": OgbDatasetConfig,
        "custom": CustomDatasetConfig,
        "musae": MusaeDatasetConfig,
        "heterophilous": HeterophilousDatasetConfig,
    },
    "partitioner": {
        "base": PartitionerConfig,
        "metis": MetisPartitionerConfig,
        "two_level": TwoLevelPartitionerConfig,
    },
    "model": {"base": ModelConfig},
    "algorithm": {
        "base": AlgorithmConfig,
        "delayed": DelayedAggregatesConfig,
        "hec": HistoricalEmbeddingCacheConfig,
    },
    "cluster": {"base": ClusterConfig, "slurm": SlurmClusterConfig},
}


def register_schemas() -> None:
    cs = ConfigStore.instance()
    cs.store(name="gnnrun_schema", node=GnnrunConfig)
    for group, kinds in SCHEMAS.items():
        for kind, schema in kinds.items():
            cs.store(group=f"schema/{group}", name=kind, node=schema)


def to_objects(cfg: DictConfig) -> GnnrunConfig:
    """Resolve interpolations, build the dataclasses and validate every section."""
    try:
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:  # omegaconf raises a zoo of types; the message is what matters
        raise GnnrunError(f"invalid config: {exc}") from None
    # cluster before partitioner: partitioner.num_parts follows cluster.nprocs.
    for section in ("dataset", "cluster", "partitioner", "model", "algorithm", "train"):
        value = getattr(obj, section, None)
        if hasattr(value, "validate"):
            value.validate()
    return obj
