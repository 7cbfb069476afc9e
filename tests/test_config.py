"""Every YAML under configs/ composes against its schema and validates."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR, GROUPS
from gnnrun.config import SCHEMAS, register_schemas, to_objects
from gnnrun.errors import GnnrunError

OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONFIG_DIR / g).glob("*.yaml"))]
# Options whose config leaves a required field for the user to give.
REQUIRED = {
    ("dataset", "custom"): ["dataset.path=/x.npz"],
    ("dataset", "ogbn"): ["dataset.ogb_name=ogbn-mag"],
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
    assert type(section) in SCHEMAS[group].values(), f"{group}={option} is not typed by a schema"


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
