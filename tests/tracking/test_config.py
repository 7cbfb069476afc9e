"""The `logger` setting, in the default suite: it composes, it refuses a tracker that is
not installed with the line that installs it, and choosing none imports none."""

from __future__ import annotations

import sys

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.tracking import check_installed
from gnnrun.tracking.backends import BACKENDS, mlflow_key
from gnnrun.tracking.figures import scalars
from tests.tracking.conftest import REPO


def compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    from gnnrun.cli import CONFIG_DIR
    from gnnrun.config import to_objects
    from gnnrun.schemas import register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_objects(compose("config", overrides=list(overrides)))


def test_several_trackers_at_once_and_none_by_default():
    assert compose().logger.chosen == []
    logger = compose("logger=[wandb,tensorboard]", "logger.all_ranks=true").logger
    assert logger.chosen == ["tensorboard", "wandb"] and logger.all_ranks
    assert (
        compose("logger=mlflow", "logger.mlflow.experiment=gat").logger.mlflow.experiment == "gat"
    )
    with pytest.raises(GnnrunError, match="logger.wandb.mode 'cloud': choose one of offline"):
        compose("logger=wandb", "logger.wandb.mode=cloud")


def test_a_missing_tracker_is_refused_with_its_install_line(monkeypatch):
    # The default suite's environment has none of the trackers: tensorboard stands in as
    # installed (any importable module does), mlflow as missing.
    monkeypatch.setattr(BACKENDS.get("tensorboard"), "module", "json")
    monkeypatch.setattr(BACKENDS.get("mlflow"), "module", "gnnrun_no_such_package")
    logger = compose("logger=[tensorboard,mlflow]").logger
    with pytest.raises(GnnrunError, match=r"logger=mlflow needs .* pip install 'mlflow>=2\.10'"):
        check_installed(logger)
    check_installed(compose().logger)  # none chosen: nothing to check
    monkeypatch.setattr(BACKENDS.get("tensorboard"), "module", "gnnrun_no_such_package")
    with pytest.raises(GnnrunError) as both:  # every missing one at once
        check_installed(logger)
    assert str(both.value).startswith(
        "logger=tensorboard, mlflow needs the gnnrun_no_such_package package and the "
        "gnnrun_no_such_package package, which are not installed: pip install 'tensorboard>=2.14'; "
        "pip install 'mlflow>=2.10'"
    )


def test_choosing_no_tracker_imports_none_of_them():
    # The default suite never chooses one, so none of them is loaded in its process.
    import gnnrun.job  # noqa: F401
    import gnnrun.launch.rank  # noqa: F401
    import gnnrun.train.trainer  # noqa: F401
    from gnnrun.tracking import make_tracker

    assert make_tracker(compose(), REPO, 0, 1) is None
    loaded = [m for m in ("tensorboard", "mlflow", "wandb") if m in sys.modules]
    assert not loaded, loaded


def test_an_epochs_record_becomes_named_numbers():
    record = {
        "epoch": 4,
        "rank": 0,
        "loss": 0.5,
        "time": {"fwd": 0.1, "bwd": 0.2},
        "bytes": {"halo": 10},
        "hit_rate": [0.9, 0.5],
        "val_hits@10": 0.3,
        "val_acc": float("nan"),
        "note": "text",
    }
    assert scalars(record) == {
        "loss": 0.5,
        "time/fwd": 0.1,
        "time/bwd": 0.2,
        "bytes/halo": 10.0,
        "hit_rate/0": 0.9,
        "hit_rate/1": 0.5,
        "val_hits@10": 0.3,
    }
    assert mlflow_key("val_hits@10") == "val_hits_at_10"


def test_an_unknown_tracker_in_a_list_is_named_with_the_choices():
    from gnnrun.cli import check_overrides

    check_overrides(["logger=[tensorboard,mlflow]"])
    with pytest.raises(GnnrunError, match="logger=foo in .*Choose from mlflow, none, tensorboard"):
        check_overrides(["logger=[tensorboard,foo]"])


def test_a_trackers_setting_without_the_tracker_is_refused():
    """It would be ignored: the run would log nowhere the user looks."""
    with pytest.raises(GnnrunError, match="logger.mlflow.experiment is set but mlflow is not"):
        compose("logger.mlflow.experiment=x")
    assert compose("logger=mlflow", "logger.mlflow.experiment=x").logger.mlflow.experiment == "x"
