"""The `trained` fixture: a checkpoint to infer from (tests/infer/trained_models.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from trained_models import checkpointed  # noqa: E402


@pytest.fixture
def trained(tmp_path):
    return lambda *overrides, seed=0: checkpointed(tmp_path, *overrides, seed=seed)
