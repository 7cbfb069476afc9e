"""Configs for algorithm tests, composed from configs/ exactly as the CLI composes them."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR
from gnnrun.config import to_objects
from gnnrun.partition import find_partition, partition_dataset
from gnnrun.schemas import register_schemas
from gnnrun.tasks import prepare_for_task


def make_config(*overrides: str):
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_objects(compose("config", overrides=list(overrides)))


def prepared(*overrides: str):
    """The config, with its dataset prepared and (for partitioned algorithms) partitioned."""
    cfg = make_config(*overrides)
    dataset = prepare_for_task(cfg.dataset, cfg.task)
    if cfg.algorithm.name != "single" and find_partition(dataset, cfg.partitioner) is None:
        partition_dataset(dataset, cfg.partitioner)
    return cfg


@pytest.fixture
def configure():
    return prepared
