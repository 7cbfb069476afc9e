"""Datasets the partition tests run on: synthetic-tiny always, Cora when the shared data is there."""

from __future__ import annotations

import pytest

from gnnrun.data import prepare_dataset
from gnnrun.data.planetoid import PlanetoidDatasetConfig
from gnnrun.data.synthetic import SyntheticDatasetConfig


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    cfg = SyntheticDatasetConfig(
        name="synthetic-tiny",
        num_nodes=2000,
        avg_degree=10,
        num_classes=8,
        feat_dim=32,
        max_degree_fraction=0.05,
        prepared_dir=str(tmp_path_factory.mktemp("tiny") / "prepared"),
    )
    return prepare_dataset(cfg)


@pytest.fixture(scope="session")
def cora(tmp_path_factory, shared_datasets):
    raw = shared_datasets / "cora" / "raw"
    cfg = PlanetoidDatasetConfig(
        name="cora",
        planetoid_name="cora",
        raw_dir=str(raw),
        prepared_dir=str(tmp_path_factory.mktemp("cora") / "prepared"),
    )
    return prepare_dataset(cfg)


@pytest.fixture(params=["tiny", "cora"])
def dataset(request):
    return request.getfixturevalue(request.param)
