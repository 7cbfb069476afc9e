"""What every task implements, and the vertex objective the vertex tasks share.

A task (`task=NAME`) owns what is learnt: the dataset it trains on (the
prepared one, or a copy with held-out edges), the model's output width, each
training step's targets and loss, the metrics and the one that picks the best
epoch, the columns of the epoch table and of the reports, what a checkpoint
records of it and what `gnnrun predict` writes. Algorithms, the trainer,
inference and reports ask the task (`task_of(cfg)`); none of them branches on
its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from omegaconf import MISSING

from gnnrun.comm import Communicator
from gnnrun.data import load_prepared, prepare_dataset
from gnnrun.data.dataset import GraphDataset
from gnnrun.errors import GnnrunError


@dataclass
class TaskConfig:
    """The settings every task has; a task's own schema extends it."""

    name: str = MISSING  # key in gnnrun.tasks.TASKS
    # The name of the graph the task trains on: partitions and checkpoints live under it.
    graph: str = "${dataset.name}"

    def validate(self) -> None:
        pass


class EvaluationSource(Protocol):
    """What an algorithm gives a task's objective to evaluate with (collectives: every rank
    calls them the same number of times)."""

    def outputs_of(self, model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """The model's output rows of global vertices `ids` (this rank's own)."""

    def every_output(self, model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        """A lookup of any global vertices' output rows, each vertex computed once."""


class Objective(Protocol):
    """One rank's training items, each step's targets, the loss and the evaluation outputs."""

    train_ids: torch.Tensor  # the training items this rank owns (vertices, or edges)

    def step(self, items: torch.Tensor, key: int) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
        """(the vertices whose outputs the step needs, the pairs its blocks leave out (None:
        none), its targets)."""

    def loss(self, model: torch.nn.Module, out: torch.Tensor, targets: Any) -> torch.Tensor | None:
        """The step's loss from the outputs of `step`'s vertices; None when the rank has none."""

    def evaluate(
        self, model: torch.nn.Module, source: EvaluationSource
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split ("val", "test"): what `Task.metrics` takes from this rank."""


class Task:
    """One kind of learning problem; `cfg` is its section of the config (`task.*`)."""

    name: ClassVar[str]
    # The figures an evaluation gives per split, as (key suffix, how tables name it):
    # the epoch table shows the first one there is, reports every one there is.
    figures: ClassVar[tuple[tuple[str, str], ...]]
    # The validation figure that picks the best epoch and the time to target.
    best: ClassVar[str]
    # The epoch table's val / test columns: their headers, and the figures they show
    # (the first there is).
    shown_as: ClassVar[tuple[str, str]] = ("val", "test")
    shown: ClassVar[tuple[str, ...]]
    # Whether the training items are vertices (a part without any trains nothing).
    trains_vertices: ClassVar[bool] = True
    # Whether `gnnrun predict` scores the vertex pairs of predict.candidates (rather
    # than writing a prediction per vertex).
    scores_pairs: ClassVar[bool] = False

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg

    def best_metric(self, history: list[dict[str, Any]]) -> str:
        """The validation figure that picks a run's best epoch and its time to target."""
        return self.best

    # ------------------------------------------------------------------ data

    def prepare(self, dataset_cfg, force: bool = False) -> GraphDataset:
        """The dataset the task trains on, prepared."""
        return prepare_dataset(dataset_cfg, force=force)

    def load(self, dataset_cfg) -> GraphDataset:
        """`prepare`'s dataset, already prepared and current (what ranks open)."""
        return load_prepared(dataset_cfg)

    def check_dataset(self, dataset: GraphDataset) -> None:
        """Refuse a dataset whose labels the task cannot learn (before anything starts)."""

    def check_targets(self, dataset: GraphDataset) -> None:
        """Refuse a dataset without training items; warn of empty validation or test sets."""
        from gnnrun.progress import print_warning

        if dataset.train_idx.size == 0:
            raise GnnrunError(
                f"dataset {dataset.name!r} has no training vertices ({dataset.val_idx.size} "
                f"validation, {dataset.test_idx.size} test): nothing to train on. Give the split "
                "a training share (dataset.split.train > 0 where the split is drawn; train_idx or "
                "train_mask in a custom .npz), then prepare it again"
            )
        sizes = {"validation": dataset.val_idx.size, "test": dataset.test_idx.size}
        if empty := [name for name, size in sizes.items() if size == 0]:
            print_warning(
                f"dataset {dataset.name!r} has no {' and no '.join(empty)} vertices: they are not "
                "evaluated, and no best epoch is chosen without validation vertices (give "
                "dataset.split.val / dataset.split.test a share, or val_idx / test_idx in a "
                "custom .npz, to evaluate)"
            )

    # ----------------------------------------------------------------- model

    def out_dim(self, model_cfg, dataset: GraphDataset) -> int:
        """The model's output width: one logit per class."""
        return dataset.num_classes

    def check_model(self, model_cfg) -> None:
        """Refuse model settings that this task would ignore: model.embedding sets the width
        of a link task's vertex embeddings; here the last layer gives one logit per class."""
        if model_cfg.embedding:
            raise GnnrunError(
                f"model.embedding={model_cfg.embedding} is the width of a link task's vertex "
                f"embeddings, and task={self.cfg.name}'s model ends in one logit per class or label: "
                "train task=link or task=gae, or leave it out (model.embedding=0)"
            )

    def model_options(self) -> dict[str, Any]:
        """Keyword arguments of gnnrun.models.build_model beyond the widths."""
        return {}

    def encoder_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The GNN's weights in a checkpoint's model state."""
        return state

    def encoder(self, model: torch.nn.Module) -> torch.nn.Module:
        """The GNN of a trained model (what layer-wise inference runs)."""
        return model

    # -------------------------------------------------------------- training

    def vertex_loss(
        self, logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean"
    ) -> torch.Tensor:
        """The loss of vertices' logits against their labels (`reduction` as torch's:
        "none" gives one term per vertex, "sum" their sum)."""
        raise NotImplementedError(f"task={self.name} does not train on vertex labels")

    def objective(
        self,
        dataset: GraphDataset,
        rank: int,
        owner: torch.Tensor | None,
        train_ids: torch.Tensor,
        eval_ids: dict[str, torch.Tensor],
        labels_of: Callable[[torch.Tensor], torch.Tensor],
    ) -> Objective:
        """This rank's objective: `train_ids` / `eval_ids` are the vertices it trains and
        evaluates, `owner` each vertex's rank (None: all of them in one process)."""
        return VertexObjective(self, train_ids, eval_ids, labels_of)

    # ------------------------------------------------------------ evaluation

    def metrics(
        self, outputs: dict[str, tuple[torch.Tensor, torch.Tensor]], comm: Communicator
    ) -> dict[str, float]:
        """{split}_{figure} over every rank's `Objective.evaluate` outputs (a collective)."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """What a checkpoint records of the task (as flat `task.key` names): every setting but
        where its data lives."""
        return {
            f"task.{k}": v
            for k, v in dataclasses.asdict(self.cfg).items()
            if k not in ("graph", "prepared_dir")
        }

    # ------------------------------------------------------------- inference

    def check_inference(self, kind: str, candidates: str | None, run_dir) -> None:
        """Refuse a `gnnrun predict` / `embed` the task's model cannot answer."""
        if candidates:
            raise GnnrunError(
                "predict.candidates scores vertex pairs with a task=link run's model; "
                f"`gnnrun {kind}` of the run in {run_dir} (task={self.name}) does not take it"
            )

    def output_columns(self, num_classes: int) -> tuple[str, ...]:
        """The arrays each `gnnrun predict` shard holds besides `ids`."""
        raise NotImplementedError

    def prediction_columns(self, logits: np.ndarray) -> dict[str, np.ndarray]:
        """`output_columns`' arrays of a chunk of output rows."""
        raise NotImplementedError


class VertexObjective:
    """Training vertices, their labels and the task's vertex loss (node and multi-label
    classification)."""

    def __init__(
        self,
        task: Task,
        train_ids: torch.Tensor,
        eval_ids: dict[str, torch.Tensor],
        labels_of: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        self.task, self.train_ids, self.eval_ids = task, train_ids, eval_ids
        self.labels_of = labels_of

    def step(self, items: torch.Tensor, key: int) -> tuple[torch.Tensor, None, torch.Tensor]:
        return items, None, self.labels_of(items)

    def loss(self, model, out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        if not targets.shape[0]:
            return None  # a rank without seeds still joined every collective of the forward
        return self.task.vertex_loss(out, targets)

    @torch.no_grad()
    def evaluate(self, model, source: EvaluationSource):
        return {
            split: (source.outputs_of(model, ids), self.labels_of(ids))
            for split, ids in self.eval_ids.items()
        }
