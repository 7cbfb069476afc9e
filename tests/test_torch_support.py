"""The torch range: pyproject.toml declares what gnnrun.torch_support tests and refuses."""

from __future__ import annotations

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.torch_support import check_torch_version, supported_range

from .conftest import REPO


def test_pyproject_declares_the_tested_range():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    torch_requirement = [d for d in project["dependencies"] if d.startswith("torch")]
    assert torch_requirement == [f"torch{supported_range()}"]


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.13.0+cpu", "2.14.1"])
def test_versions_in_the_range_pass(version):
    check_torch_version(version)


@pytest.mark.parametrize("version", ["2.10.1", "2.15.0", "3.0.0"])
def test_versions_outside_are_refused_in_one_line_naming_both(version):
    with pytest.raises(GnnrunError) as refused:
        check_torch_version(version)
    message = str(refused.value)
    assert "\n" not in message
    assert f"torch {version} is installed" in message
    assert "torch>=2.11,<2.15" in message
