"""Every YAML under configs/ composes against its schema and validates."""

from __future__ import annotations

import pytest
import yaml
from hydra import compose, initialize_config_dir

from gnnrun.algorithms import ALGORITHMS
from gnnrun.algorithms.minibatch.minibatch import SampledConfig, SampledTraining
from gnnrun.cli import CONFIG_DIR, GROUPS
from gnnrun.config import (
    ClusterConfig,
    HostsClusterConfig,
    SlurmClusterConfig,
    to_objects,
)
from gnnrun.data import DATASET_SOURCES
from gnnrun.errors import GnnrunError
from gnnrun.models import LAYERS
from gnnrun.partition import PARTITIONERS
from gnnrun.schemas import register_schemas
from gnnrun.tasks import TASKS
from gnnrun.tracking.config import LoggerConfig
from gnnrun.train.optimizer import OPTIMIZERS

OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONFIG_DIR / g).glob("*.yaml"))]
# Options whose config leaves a required field for the user to give.
REQUIRED = {
    ("dataset", "custom"): ["dataset.path=/x.npz"],
    ("dataset", "chunked"): ["dataset.path=/x/metadata.json"],
    ("dataset", "ogbn"): ["dataset.ogb_name=ogbn-mag"],
    ("cluster", "hosts"): ["cluster.node_rank=0", "cluster.rdzv_endpoint=node0:29400"],
}


@pytest.fixture(scope="module", autouse=True)
def _schemas():
    register_schemas()


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_validates(group, option):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"{group}={option}", *REQUIRED.get((group, option), [])])
    config = to_objects(cfg)
    section = getattr(config, group)
    assert type(section) is SCHEMA_OF[group](section), f"{group}={option} has the wrong schema"


# The schema each group's option must be typed by: the one its implementation registered.
SCHEMA_OF = {
    "dataset": lambda s: DATASET_SOURCES.schema(s.source),
    "partitioner": lambda s: PARTITIONERS.schema(s.name),
    "model": lambda s: LAYERS.schema(s.name),
    "optimizer": lambda s: OPTIMIZERS.schema(s.name),
    "algorithm": lambda s: ALGORITHMS.schema(s.name),
    "cluster": lambda s: {"slurm": SlurmClusterConfig, "hosts": HostsClusterConfig}.get(
        s.name, ClusterConfig
    ),
    "task": lambda s: TASKS.schema(s.name),
    "logger": lambda s: LoggerConfig,
}


def test_yaml_typo_in_a_config_file_fails_at_composition(tmp_path):
    """A key the schema does not know, written in a YAML file, is an error, not ignored."""
    import shutil

    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    bad = configs / "partitioner" / "metis.yaml"
    bad.write_text(bad.read_text() + "num_prts: 4\n")
    with (
        initialize_config_dir(config_dir=str(configs), version_base="1.3"),
        pytest.raises(Exception, match="num_prts"),
    ):
        compose("config", overrides=["partitioner=metis"])


def test_validation_ranges():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["dataset.split.train=0.9", "dataset.split.val=0.3"])
    with pytest.raises(GnnrunError, match="fractions sum to 2.000"):
        to_objects(cfg)


def test_train_precision_is_fp32_or_bf16():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["train.precision=fp16"])
    with pytest.raises(GnnrunError, match="train.precision 'fp16': choose one of fp32, bf16"):
        to_objects(cfg)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({}, "give each its place and node 0's address"),
        ({"node_rank": 0, "rdzv_endpoint": "node0"}, "write HOST:PORT"),
        ({"node_rank": 0, "rdzv_endpoint": "http://node0:29400"}, "write HOST:PORT"),
        ({"node_rank": 2, "rdzv_endpoint": "node0:29400"}, r"must lie in 0\.\.1"),
        ({"node_rank": 0, "rdzv_endpoint": "node0:29400", "max_restarts": -1}, "max_restarts"),
    ],
)
def test_cluster_hosts_names_what_is_missing_or_wrong(fields, message):
    with pytest.raises(GnnrunError, match=message):
        HostsClusterConfig(nprocs=2, **fields).validate()
    HostsClusterConfig(nprocs=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400").validate()
    HostsClusterConfig(nprocs=2, node_rank=1, rdzv_endpoint="[::1]:29400").validate()


def test_cluster_slurm_refuses_restarts_and_a_late_warning():
    with pytest.raises(GnnrunError, match="under SLURM a failed rank ends the job"):
        SlurmClusterConfig(nprocs=1, max_restarts=1).validate()
    with pytest.raises(GnnrunError, match="shorter than the time limit"):
        SlurmClusterConfig(nprocs=1, time_limit_min=1, signal_delay_s=120).validate()


SAMPLED = [n for n in ALGORITHMS if issubclass(ALGORITHMS.schema(n), SampledConfig)]
SAMPLING = CONFIG_DIR / "algorithm" / "sampling"


def test_the_sampled_algorithms_and_only_they_have_sampling_settings():
    for name in ALGORITHMS:
        samples = issubclass(ALGORITHMS.get(name), SampledTraining)
        assert issubclass(ALGORITHMS.schema(name), SampledConfig) == samples, name
    assert {"minibatch", "pipeline", "hec", "single"} <= set(SAMPLED)


def _algorithm_of(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_objects(compose("config", overrides=list(overrides))).algorithm


def test_a_model_presets_sampling_reaches_the_sampled_algorithms():
    """algorithm/sampling/<model>.yaml: what model=<model> samples with under the sampled
    algorithms (each preset under one of them, in turn); the command line still wins, and
    full batch has none of it."""
    presets = sorted(p.stem for p in SAMPLING.glob("*.yaml"))
    for number, preset in enumerate(presets):
        assert (CONFIG_DIR / "model" / f"{preset}.yaml").is_file(), f"no model={preset}"
        expected = yaml.safe_load((SAMPLING / f"{preset}.yaml").read_text())
        algorithm = SAMPLED[number % len(SAMPLED)]
        composed = _algorithm_of(f"model={preset}", f"algorithm={algorithm}")
        assert {k: getattr(composed, k) for k in expected} == expected, (preset, algorithm)
    products = _algorithm_of("model=sage_products", "algorithm=minibatch")
    assert (products.fanouts, products.batch_size) == ([15, 10, 5], 1000)
    given = _algorithm_of("model=sage_products", "algorithm.fanouts=[3]", "algorithm.batch_size=7")
    assert (given.fanouts, given.batch_size) == ([3], 7)
    assert not hasattr(_algorithm_of("model=sage_products", "algorithm=cd0"), "fanouts")


def test_a_model_without_a_sampling_preset_samples_with_the_defaults():
    assert not (SAMPLING / "sage.yaml").exists()
    composed = _algorithm_of("model=sage", "algorithm=minibatch")
    default = SampledConfig(name="minibatch")
    assert (composed.fanouts, composed.batch_size) == (default.fanouts, default.batch_size)
