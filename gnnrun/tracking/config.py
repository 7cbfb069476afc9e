"""The `logger` section: which experiment trackers a run writes to, and how.

`logger=[tensorboard,mlflow]` selects several options of the `logger` config group at
once; each option turns on its own sub-section (configs/logger/<name>.yaml), so that
`logger.mlflow.experiment=...` and the like can be set beside the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gnnrun.config import check
from gnnrun.errors import GnnrunError

WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class TensorBoardConfig:
    enabled: bool = False
    # Where the event files go; null: the run directory (one TensorBoard run per gnnrun run).
    log_dir: str | None = None


@dataclass
class MlflowConfig:
    enabled: bool = False
    # null: MLflow's own choice, MLFLOW_TRACKING_URI when set, else ./mlflow.db (sqlite).
    tracking_uri: str | None = None
    experiment: str = "gnnrun"
    # The final checkpoint as an artifact (a large model makes a large artifact).
    log_checkpoint: bool = True


@dataclass
class WandbConfig:
    enabled: bool = False
    project: str = "gnnrun"
    # offline: files under <dir>/wandb/, sent later by `wandb sync`; WANDB_MODE wins when set.
    mode: str = "offline"
    entity: str | None = None
    # Where the wandb/ folder goes; null: the run directory.
    dir: str | None = None
    log_checkpoint: bool = True


@dataclass
class LoggerConfig:
    # Every rank logs, each with its rank as a tag / run name suffix; false: rank 0 only.
    all_ranks: bool = False
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    @property
    def chosen(self) -> list[str]:
        """The trackers turned on, in a fixed order."""
        return [name for name in ("tensorboard", "mlflow", "wandb") if getattr(self, name).enabled]

    def validate(self) -> None:
        check(
            self.wandb.mode in WANDB_MODES,
            f"logger.wandb.mode {self.wandb.mode!r}: choose one of {', '.join(WANDB_MODES)}",
        )
        for name in ("tensorboard", "mlflow", "wandb"):
            settings = getattr(self, name)
            if not settings.enabled and settings != type(settings)():
                changed = next(
                    k for k, v in vars(settings).items() if v != getattr(type(settings)(), k)
                )
                raise GnnrunError(
                    f"logger.{name}.{changed} is set but {name} is not chosen: add "
                    f"logger={name} (or logger=[...,{name}]), or leave logger.{name}.* out"
                )
        check(bool(self.mlflow.experiment), "logger.mlflow.experiment must not be empty")
        check(bool(self.wandb.project), "logger.wandb.project must not be empty")


def store_schema() -> None:
    """`schema/logger/base`, which the root config places at `logger` before the choices."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="schema/logger", name="base", node=LoggerConfig)
