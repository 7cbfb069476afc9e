"""The root config and the sections no registry owns: paths, cluster, train, predict, embed.

Every YAML under configs/ starts from a structured-config schema stored in
Hydra's ConfigStore (`defaults: [/schema/<group>/<name>@_here_, _self_]`), so a
misspelt key or a value of the wrong type fails when the config is composed,
before any work starts. The schemas of datasets, partitioners, models,
optimizers and algorithms are declared beside their implementations and stored
when those register (gnnrun.registry); `gnnrun.schemas.register_schemas` gathers
them all with the ones here. `to_objects()` then runs every section's
`validate()`, which checks what types cannot (ranges, sums, choices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from gnnrun.errors import GnnrunError


def check(condition: bool, message: str) -> None:
    """A schema's validation step: `message` names the key, the value and what is allowed."""
    if not condition:
        raise GnnrunError(f"invalid config: {message}")


@dataclass
class PathsConfig:
    # Prepared datasets, partitions and runs live under data_root.
    data_root: str = "${oc.env:GNNRUN_DATA_ROOT,data}"
    # Raw source files (Planetoid, OGB, MUSAE, ...) are looked up under raw_root.
    raw_root: str = "${oc.env:GNNRUN_RAW_ROOT,${paths.data_root}/raw}"


DEVICES = ("cpu", "cuda")


@dataclass
class ClusterConfig:
    name: str = MISSING  # local | slurm
    nprocs: int = 2  # ranks (the world size); local: on this node (configs/cluster/local.yaml)
    backend: str = "auto"  # auto | gloo | nccl | ccl
    device: str = "cpu"  # where ranks compute: cpu | cuda (one rank per GPU)
    threads_per_rank: int = 0  # 0: cores of one socket (or all cores / nprocs)
    comm_cores: int = 0  # cores per rank left to communication
    # How long a collective waits for a rank: a rank that stopped answering (a hung
    # process, a cut link) is named after this long.
    timeout_s: int = 300
    # local and hosts: restart the ranks from the last checkpoint after a failure, this
    # many times (torch elastic's restarts); 0: a failure ends the run.
    max_restarts: int = 0

    def validate(self) -> None:
        check(self.nprocs >= 1, "cluster.nprocs must be at least 1")
        check(
            self.backend in ("auto", "gloo", "nccl", "ccl", "mpi"),
            f"cluster.backend {self.backend!r} unknown",
        )
        check(
            self.threads_per_rank >= 0 and self.comm_cores >= 0,
            "cluster thread counts must be >= 0",
        )
        check(self.timeout_s > 0, "cluster.timeout_s must be positive")
        check(self.max_restarts >= 0, "cluster.max_restarts must be >= 0 (0: no restarts)")
        check(
            self.device in DEVICES,
            f"cluster.device {self.device!r}: choose one of {', '.join(DEVICES)}",
        )


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
    # SLURM's warning of a job's end (SIGUSR2) comes this long before its time limit: the
    # ranks checkpoint after the epoch they are in and the job is requeued.
    signal_delay_s: int = 120
    max_requeues: int = 3  # how often a job may be requeued that way (0: never)

    def validate(self) -> None:
        super().validate()
        check(self.nodes >= 1, "cluster.nodes must be at least 1")
        check(self.tasks_per_node >= 1, "cluster.tasks_per_node must be at least 1")
        check(
            self.max_restarts == 0,
            "cluster.max_restarts: under SLURM a failed rank ends the job; a preempted or "
            "timed-out job is requeued and resumes by itself (docs/slurm-and-sweeps.md)",
        )
        world = self.nodes * self.tasks_per_node
        check(
            self.nprocs == world,
            f"cluster.nprocs ({self.nprocs}) must be the world size under SLURM, "
            f"cluster.nodes x cluster.tasks_per_node = {world}: set those instead",
        )
        check(
            self.cpus_per_task is None or self.cpus_per_task >= 1,
            "cluster.cpus_per_task must be at least 1 (or null: SLURM's default)",
        )
        check(
            self.gpus_per_node is None or self.gpus_per_node >= 0,
            "cluster.gpus_per_node must be >= 0 (or null)",
        )
        check(self.mem_gb is None or self.mem_gb >= 1, "cluster.mem_gb must be at least 1")
        check(self.time_limit_min >= 1, "cluster.time_limit_min must be at least 1")
        check(
            0 < self.signal_delay_s < self.time_limit_min * 60,
            f"cluster.signal_delay_s={self.signal_delay_s} must be positive and shorter than "
            f"the time limit ({self.time_limit_min * 60} s): it is how long before the end "
            "the job is warned to checkpoint",
        )
        check(self.max_requeues >= 0, "cluster.max_requeues must be >= 0 (0: never requeue)")
        check(
            self.master_port == 0 or 1024 <= self.master_port <= 65535,
            "cluster.master_port must be 0 (from the job id) or in [1024, 65535]",
        )
        for key in self.sbatch:
            option = str(key).lstrip("-").replace("_", "-")
            check(
                option not in _SBATCH_MANAGED,
                f"cluster.sbatch.{key}: gnnrun sets --{option} from {_SBATCH_MANAGED.get(option)}",
            )


@dataclass
class HostsClusterConfig(ClusterConfig):
    """cluster=hosts: one `gnnrun train` per host, joined by a rendezvous (as `torchrun
    --nnodes --node-rank --rdzv-endpoint` does); gnnrun.launch.elastic."""

    name: str = "hosts"
    # Named as cluster=slurm names them (nodes, tasks_per_node: a task is a rank).
    nodes: int = 2  # hosts taking part
    node_rank: int = -1  # this host's place: 0 .. nodes-1 (node 0 holds the rendezvous)
    tasks_per_node: int = 1  # ranks per host: one per socket (CPU) or one per GPU
    nprocs: int = II("gnnrun.world_size:${cluster.nodes},${cluster.tasks_per_node}")
    rdzv_endpoint: str = ""  # HOST:PORT on node 0 that every host reaches
    # How long each host waits for the others to join (node 0 prepares the data meanwhile).
    join_timeout_s: int = 900

    def validate(self) -> None:
        super().validate()
        check(self.nodes >= 1, "cluster.nodes must be at least 1")
        check(self.tasks_per_node >= 1, "cluster.tasks_per_node must be at least 1")
        check(
            self.node_rank >= 0 and bool(self.rdzv_endpoint),
            "cluster=hosts runs the same gnnrun command on every host: give each its place and "
            "node 0's address, e.g. cluster.node_rank=0 cluster.rdzv_endpoint=node0.example:29400 on "
            "node 0 and cluster.node_rank=1 with the same endpoint on the next host",
        )
        check(
            0 <= self.node_rank < self.nodes,
            f"cluster.node_rank={self.node_rank} must lie in 0..{self.nodes - 1} "
            f"(cluster.nodes={self.nodes}): give every host its own",
        )
        check(self.join_timeout_s > 0, "cluster.join_timeout_s must be positive")
        host, _, port = self.rdzv_endpoint.rpartition(":")
        check(
            # A host name or an address (IPv6 in brackets), as torch's rendezvous parses it.
            re.fullmatch(r"[\w.:-]+", host.removeprefix("[").removesuffix("]")) is not None
            and port.isdigit()
            and 1 <= int(port) <= 65535,
            f"cluster.rdzv_endpoint={self.rdzv_endpoint!r}: write HOST:PORT, an address of "
            "node 0 that every host reaches and a free port there (e.g. node0.example:29400)",
        )


def _world_size(
    nodes: Any, per_node: Any, nodes_key: str = "nodes", per_node_key: str = "tasks_per_node"
) -> int:
    """${gnnrun.world_size:nodes,per_node[,their key names]}: the world size of cluster=slurm
    and cluster=hosts (checked here because partitioner.num_parts, validated first, follows it)."""
    for name, value in ((nodes_key, nodes), (per_node_key, per_node)):
        if int(value) < 1:
            raise GnnrunError(f"cluster.{name} must be at least 1, not {value}")
    return int(nodes) * int(per_node)


OmegaConf.register_new_resolver("gnnrun.world_size", _world_size, replace=True)


def default_local_ranks(device: str) -> int:
    """${gnnrun.local_ranks:${cluster.device}}: cluster=local's ranks unless cluster.nprocs is
    given: one per GPU on cuda (1 where torch sees none, which the device check refuses
    with the reason), 2 on the CPU."""
    if device != "cuda":
        return 2
    import torch

    return max(1, torch.cuda.device_count())


OmegaConf.register_new_resolver("gnnrun.local_ranks", default_local_ranks, replace=True)


PRECISIONS = ("fp32", "bf16")


@dataclass
class TrainConfig:
    epochs: int = 10
    seed: int = 0
    eval_every: int = 1
    # Resume from the checkpoint in checkpoint_dir when there is one.
    resume: bool = False
    checkpoint_dir: str = (
        "${paths.data_root}/checkpoints/${task.graph}/"
        "${algorithm.name}-${model.name}-p${cluster.nprocs}-s${train.seed}"
    )
    stop_after: int = 0  # stop after this many epochs of this invocation (0: run to the end)
    # Checkpoint every this many epochs, and at the end of every invocation.
    checkpoint_every: int = 10
    # fp32, or bf16: dense layers in bfloat16 under autocast (gnnrun.ops.precision).
    precision: str = "fp32"
    # Validation accuracy (AUC for binary tasks) whose epoch and seconds the summary
    # records as time to target (within 1%, relative); null: the run's best.
    target: float | None = None
    # Early stopping: end the run once this many evaluations in a row have not bettered
    # the best validation figure (the one the summary picks its best epoch by); 0: never.
    patience: int = 0
    # Also keep the model of the best evaluation so far, as best.pt beside checkpoint.pt
    # (gnnrun predict predict.checkpoint=best).
    keep_best: bool = False

    def validate(self) -> None:
        check(self.epochs >= 1, "train.epochs must be at least 1")
        check(
            self.patience >= 0,
            f"train.patience must be >= 0 (evaluations without a better validation figure; "
            f"0: train every epoch), not {self.patience}",
        )
        check(
            self.target is None or 0 < self.target <= 1,
            f"train.target {self.target}: a validation accuracy in (0, 1], or null for the run's best",
        )
        check(self.eval_every >= 1, "train.eval_every must be at least 1")
        check(self.checkpoint_every >= 1, "train.checkpoint_every must be at least 1")
        check(
            self.precision in PRECISIONS,
            f"train.precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}",
        )
        check(
            self.stop_after >= 0,
            f"train.stop_after must be >= 0 (epochs of this invocation; 0: run to the end), "
            f"not {self.stop_after}",
        )


PARQUET_CHOICES = ("auto", "true", "false")


@dataclass
class PredictConfig:
    """`gnnrun predict` / `gnnrun embed` (gnnrun.infer): layer-wise inference over the graph."""

    # Vertices per chunk: each rank computes its vertices this many at a time, with their
    # full in-neighbourhoods, so that memory follows the chunk, not the graph.
    chunk_vertices: int = 65536
    # Where the outputs go; null: <run>/predict/<dataset> or <run>/embed/<dataset>-layer<k>.
    output_dir: str | None = None
    # Parquet shards beside the .npy ones: auto (when pyarrow is installed), true, false.
    parquet: str = "auto"
    # A task=link run: the .npy of vertex pairs ((2, P) or (P, 2)) whose scores to write.
    candidates: str | None = None
    # The run's model to use: its last checkpoint, or its best evaluation's (train.keep_best).
    checkpoint: str = "last"

    def validate(self) -> None:
        check(
            self.chunk_vertices >= 1,
            f"predict.chunk_vertices must be at least 1 (got {self.chunk_vertices})",
        )
        check(
            self.checkpoint in ("last", "best"),
            f"predict.checkpoint={self.checkpoint}: choose last (the run's last checkpoint) "
            "or best (its best evaluation's model, kept with train.keep_best=true)",
        )
        check(
            str(self.parquet).lower() in PARQUET_CHOICES,
            f"predict.parquet {self.parquet!r}: choose auto, true or false",
        )


@dataclass
class EmbedConfig:
    # The layer whose output `gnnrun embed` writes: 0 is the first, negative counts from
    # the end (-1: the output layer's logits, -2: the last hidden layer).
    layer: int = -2
    # A heterogeneous graph's vertex type whose rows it writes (by name); None: the
    # labelled type, the one `gnnrun predict` writes.
    node_type: str | None = None


@dataclass
class GnnrunConfig:
    dataset: Any = MISSING
    partitioner: Any = MISSING
    model: Any = MISSING
    optimizer: Any = MISSING
    algorithm: Any = MISSING
    cluster: Any = MISSING
    task: Any = MISSING
    paths: PathsConfig = field(default_factory=PathsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    predict: PredictConfig = field(default_factory=PredictConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    # Experiment trackers (gnnrun.tracking.config.LoggerConfig, stored with the tracking
    # package); None in a config composed before they existed.
    logger: Any = None


def store_root_schemas() -> None:
    """The root schema and the cluster group's (the other groups' come with their registries)."""
    cs = ConfigStore.instance()
    cs.store(name="gnnrun_schema", node=GnnrunConfig)
    cs.store(group="schema/cluster", name="base", node=ClusterConfig)
    cs.store(group="schema/cluster", name="slurm", node=SlurmClusterConfig)
    cs.store(group="schema/cluster", name="hosts", node=HostsClusterConfig)


# Keys renamed since the first release (CHANGELOG.md): old name -> the names it became.
# Where one key meant different things it became several; the error names the one
# that exists in the config being composed.
RENAMED_KEYS: dict[str, tuple[str, ...]] = {
    "model.lr": ("optimizer.lr",),
    "model.weight_decay": ("optimizer.weight_decay",),
    "algorithm.delay": ("algorithm.delay_epochs", "algorithm.delay_minibatches"),
    # cluster=hosts names its layout as cluster=slurm does.
    "cluster.nnodes": ("cluster.nodes",),
    "cluster.nproc_per_node": ("cluster.tasks_per_node",),
    # The sampled algorithms' settings (gnnrun.algorithms.minibatch.minibatch.SampledConfig): full
    # batch has none.
    "model.fanouts": ("algorithm.fanouts",),
    "model.batch_size": ("algorithm.batch_size",),
    "model.relation_fanouts": ("algorithm.relation_fanouts",),
}


def renamed(key: str) -> tuple[str, tuple[str, ...]] | None:
    """(the renamed key `key` is or lies under (model.relation_fanouts.writes), its new
    names); None where `key` was not renamed."""
    for old, names in RENAMED_KEYS.items():
        if key == old or key.startswith(f"{old}."):
            return old, names
    return None


def _one_line(exc: Exception) -> str:
    """omegaconf's error in one line: a check of ours that failed while an interpolation
    was resolved (gnnrun.world_size, which names the key it checks) as it is, without the
    key whose interpolation it was; otherwise the first line and the key."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, GnnrunError):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    key = getattr(exc, "full_key", None)
    if isinstance(exc, MissingMandatoryValue) and key:
        return f"{key} is required and not given: add {key}=..."
    return f"{first} (full_key: {key})" if key and str(key) not in first else first


def to_objects(cfg: DictConfig) -> GnnrunConfig:
    """Resolve interpolations, build the dataclasses and validate every section."""
    try:
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:  # omegaconf raises a zoo of types; the message is what matters
        raise GnnrunError(f"invalid config: {_one_line(exc)}") from None
    # cluster before partitioner: partitioner.num_parts follows cluster.nprocs.
    sections = (
        "dataset",
        "cluster",
        "partitioner",
        "model",
        "optimizer",
        "algorithm",
        "task",
        "train",
        "predict",
        "logger",
    )
    for section in sections:
        value = getattr(obj, section, None)
        if hasattr(value, "validate"):
            value.validate()
    return obj
