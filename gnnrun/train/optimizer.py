"""`optimizer=NAME`: the optimiser every rank steps, and its settings.

The `optimizer` group's presets are recipes (`adam`; a paper's learning rate and
weight decay); a model preset from a paper chooses its paper's recipe, and
`optimizer.lr=` / `optimizer.weight_decay=` change either on the command line.

Every preset takes a learning-rate schedule and gradient clipping:

- `optimizer.schedule` (SCHEDULES): `constant`, `cosine` (from lr down to
  `optimizer.min_lr` over train.epochs), `step` (times `optimizer.gamma` every
  `optimizer.step_epochs` epochs) or `plateau` (times `optimizer.gamma` once the
  validation figure has not bettered for more than `optimizer.plateau_patience`
  evaluations, as torch's ReduceLROnPlateau), after `optimizer.warmup_epochs` of
  linear warm-up. The rate is a function of the epoch and, for `plateau`, of the
  evaluations before it (`learning_rate`), set before each epoch: a resumed or
  restarted run continues the schedule with nothing more saved (its checkpoint has
  the evaluations), and a minibatch algorithm's steps per epoch do not change it.
- `optimizer.clip_norm`: the gradients scaled so that their total norm is at most
  this (torch's clip_grad_norm_, whose norm counts the rows a sparse embedding
  table's gradient holds too), after the ranks have combined them, so that every
  rank clips alike and a distributed step stays the one-process step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.registry import Registry


@dataclass
class OptimizerConfig:
    name: str = MISSING  # a key of OPTIMIZERS
    lr: float = 0.003
    weight_decay: float = 0.0
    schedule: str = "constant"  # a key of SCHEDULES: the rate per epoch after the warm-up
    warmup_epochs: int = 0  # epochs whose rate rises linearly to lr: lr/W, 2 lr/W, ..., lr
    min_lr: float = 0.0  # cosine: the rate it approaches at train.epochs; plateau: its floor
    step_epochs: int = 0  # step: the rate is multiplied by gamma every this many epochs
    gamma: float = 0.1
    # plateau: evaluations without a better validation figure that are borne; the next one
    # multiplies the rate by gamma (torch's ReduceLROnPlateau patience).
    plateau_patience: int = 10
    clip_norm: float = 0.0  # the dense gradients' largest total (L2) norm; 0: no clipping

    def validate(self) -> None:
        check(self.lr > 0, f"optimizer.lr must be positive (got {self.lr})")
        check(
            self.weight_decay >= 0,
            f"optimizer.weight_decay must be >= 0 (got {self.weight_decay})",
        )
        check(
            self.schedule in SCHEDULES,
            f"optimizer.schedule={self.schedule}: choose one of {', '.join(SCHEDULES)}",
        )
        check(
            self.warmup_epochs >= 0,
            f"optimizer.warmup_epochs must be >= 0 (got {self.warmup_epochs})",
        )
        check(
            0 <= self.min_lr <= self.lr,
            f"optimizer.min_lr={self.min_lr} must lie in [0, optimizer.lr={self.lr}]",
        )
        check(
            self.schedule != "step" or self.step_epochs >= 1,
            "optimizer.schedule=step lowers the rate every optimizer.step_epochs epochs: "
            f"set it to 1 or more (got {self.step_epochs})",
        )
        check(0 < self.gamma <= 1, f"optimizer.gamma must lie in (0, 1] (got {self.gamma})")
        check(
            self.plateau_patience >= 0,
            f"optimizer.plateau_patience must be >= 0 (got {self.plateau_patience})",
        )
        check(
            self.clip_norm >= 0,
            f"optimizer.clip_norm must be >= 0 (0: no clipping; got {self.clip_norm})",
        )
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name, schedules in USED_BY.items():
            value = getattr(self, name)
            check(
                self.schedule in schedules or value == defaults[name],
                f"optimizer.{name}={value} is a setting of optimizer.schedule="
                f"{' or '.join(schedules)}, and this run's schedule is {self.schedule}: "
                f"choose that schedule, or leave optimizer.{name} out",
            )


def _cosine(cfg: OptimizerConfig, epoch: int, span: int) -> float:
    """Cosine annealing from lr (epoch 0 of the span) towards min_lr (epoch `span`)."""
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1 + math.cos(math.pi * epoch / span))


def _cosine_schedule(cfg: OptimizerConfig, epoch: int, span: int, plateaus: int) -> float:
    return _cosine(cfg, epoch, span)


# optimizer.schedule: the rate at `epoch` epochs after the warm-up, of `span` such epochs,
# after `plateaus` plateaus of the validation figure (`plateaus_in`).
SCHEDULES: dict[str, Callable[[OptimizerConfig, int, int, int], float]] = {
    "constant": lambda cfg, epoch, span, plateaus: cfg.lr,
    "cosine": _cosine_schedule,
    "step": lambda cfg, epoch, span, plateaus: cfg.lr * cfg.gamma ** (epoch // cfg.step_epochs),
    "plateau": lambda cfg, epoch, span, plateaus: max(cfg.min_lr, cfg.lr * cfg.gamma**plateaus),
}
# The schedules' own settings, and the schedules that read them: another schedule would
# ignore the value, so a value other than the default is refused there.
USED_BY = {
    "min_lr": ("cosine", "plateau"),
    "step_epochs": ("step",),
    "gamma": ("step", "plateau"),
    "plateau_patience": ("plateau",),
}
# The schedules whose rate depends on train.epochs (a checkpoint records it for them).
SCHEDULES_OVER_EPOCHS = ("cosine",)
# The settings of the schedule and clipping (all off by default).
SCHEDULE_SETTINGS = (
    "schedule",
    "warmup_epochs",
    "min_lr",
    "step_epochs",
    "gamma",
    "plateau_patience",
    "clip_norm",
)


def learning_rate(cfg: OptimizerConfig, epoch: int, epochs: int, plateaus: int = 0) -> float:
    """The rate of epoch `epoch` (0-based) of a run of `epochs` (train.epochs); `plateaus`:
    how many plateaus the evaluations after the warm-up have had (`plateaus_in`)."""
    if epoch < cfg.warmup_epochs:
        return cfg.lr * (epoch + 1) / cfg.warmup_epochs
    after = epoch - cfg.warmup_epochs
    return SCHEDULES[cfg.schedule](cfg, after, max(1, epochs - cfg.warmup_epochs), plateaus)


def plateaus_in(figures: list[float | None], patience: int) -> int:
    """How many times ReduceLROnPlateau (mode max, no threshold, no cool-down) would have
    lowered the rate over these evaluations' validation figures, in order (None: an
    evaluation that betters nothing: no figure, or collapsed scores): each time more than
    `patience` evaluations in a row have not bettered the best."""
    best, bad, plateaus = -math.inf, 0, 0
    for figure in figures:
        if figure is not None and figure > best:
            best, bad = figure, 0
        else:
            bad += 1
        if bad > patience:
            plateaus, bad = plateaus + 1, 0
    return plateaus


def set_learning_rate(optimizer: torch.optim.Optimizer | EmbeddingsApart, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def clip_gradients(parameters: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale the gradients of `parameters` to a total L2 norm of at most `max_norm`; their
    norm before, as a tensor on their device (read once per epoch: reading it at each step
    would wait for a GPU's queue).

    torch's clip_grad_norm_ (the same norm and scale, bit for bit, for dense gradients)
    refuses sparse ones: here an embedding table's sparse gradient counts with the
    values of its rows, coalesced first (a row read twice holds its sum), and its rows
    take the same scale."""
    with_grad = [p for p in parameters if p.grad is not None]
    for p in with_grad:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
    dense = [p for p in with_grad if not p.grad.is_sparse]
    sparse = [p for p in with_grad if p.grad.is_sparse]
    norms = [torch.nn.utils.get_total_norm([p.grad for p in dense])] if dense else []
    norms += [torch.linalg.vector_norm(p.grad.values()) for p in sparse]
    if not norms:
        return torch.zeros(())
    total = torch.linalg.vector_norm(torch.stack(norms))
    torch.nn.utils.clip_grads_with_norm_(dense, max_norm, total)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # clip_grads_with_norm_'s
    for p in sparse:
        p.grad = p.grad * scale
    return total


Parameters = Iterable[torch.nn.Parameter]
OPTIMIZERS: Registry[Callable[[Parameters, OptimizerConfig], torch.optim.Optimizer]] = Registry(
    "optimizer", group="optimizer", base_schema=OptimizerConfig
)


@OPTIMIZERS.register("adam")
def adam(parameters: Parameters, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam)."""
    return torch.optim.Adam(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay)


@OPTIMIZERS.register("adamw")
def adamw(parameters: Parameters, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW)."""
    return torch.optim.AdamW(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay)


def build_optimizer(
    model: torch.nn.Module, cfg: OptimizerConfig
) -> torch.optim.Optimizer | EmbeddingsApart:
    """The configured optimiser over the model's parameters; sparse embedding tables
    (gnnrun.models.hetero) apart, with torch's SparseAdam at the same learning rate."""
    tables = sparse_tables(model)
    if not tables:
        return OPTIMIZERS.get(cfg.name)(model.parameters(), cfg)
    apart = {id(t) for t in tables}
    dense = [p for p in model.parameters() if id(p) not in apart]
    return EmbeddingsApart(
        OPTIMIZERS.get(cfg.name)(dense, cfg), torch.optim.SparseAdam(tables, lr=cfg.lr)
    )


def sparse_tables(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters whose gradients are sparse: the tables of sparse embeddings."""
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse]


class EmbeddingsApart:
    """Two optimisers stepped as one: the configured one over the dense parameters, and
    SparseAdam over the embedding tables, which updates (and keeps moments for) only
    the rows a step's gradient holds. Adam cannot take sparse gradients, and a dense
    gradient of a table would cost every step the whole table. Weight decay does not
    apply to the tables (SparseAdam has none)."""

    def __init__(self, dense: torch.optim.Optimizer, sparse: torch.optim.SparseAdam) -> None:
        self.dense, self.sparse = dense, sparse

    @property
    def param_groups(self) -> list[dict]:
        return self.dense.param_groups + self.sparse.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none)
        self.sparse.zero_grad(set_to_none=True)  # a zeroed sparse gradient keeps its size

    def step(self) -> None:
        self.dense.step()
        self.sparse.step()

    def state_dict(self) -> dict:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.dense.load_state_dict(state["dense"])
        self.sparse.load_state_dict(state["sparse"])
