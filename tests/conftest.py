"""Shared fixtures. Real datasets come from ../shared/datasets (override: GNNRUN_TEST_DATASETS)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = Path(os.environ.get("GNNRUN_TEST_DATASETS", REPO.parent / "shared" / "datasets"))


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The folder of real small datasets; tests that need it skip when it is absent."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"real test datasets not found at {SHARED_DATASETS} (set GNNRUN_TEST_DATASETS)")
    return SHARED_DATASETS


@pytest.fixture(autouse=True)
def _isolated_data_root(tmp_path, monkeypatch):
    """Every test writes prepared data and partitions under its own temporary root."""
    monkeypatch.setenv("GNNRUN_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("GNNRUN_RAW_ROOT", str(SHARED_DATASETS))
