"""gnnrun.resources.shipped: the configs and kernels inside an installed package, else at
the top of the checkout."""

from __future__ import annotations

import pytest

from gnnrun import resources
from gnnrun.cli import CONFIG_DIR
from gnnrun.ops.native import KERNELS_DIR

from .conftest import REPO


def test_a_checkout_finds_the_folders_at_its_top():
    assert CONFIG_DIR == REPO / "configs" and (CONFIG_DIR / "config.yaml").is_file()
    assert KERNELS_DIR == REPO / "kernels" and (KERNELS_DIR / "sampler.cpp").is_file()


def test_an_installed_packages_copy_comes_first(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "gnnrun"
    (package / "configs").mkdir(parents=True)
    (tmp_path / "site-packages" / "configs").mkdir()  # not gnnrun's: never reached
    monkeypatch.setattr(resources, "PACKAGE", package)
    assert resources.shipped("configs") == package / "configs"


def test_a_missing_folder_names_both_places(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "PACKAGE", tmp_path / "gnnrun")
    with pytest.raises(FileNotFoundError, match=r"kernels/ is neither in .*gnnrun nor in"):
        resources.shipped("kernels")


def test_an_extras_install_command_names_its_packages():
    """gnnrun is installed from a clone, not an index: `pip install 'gnnrun[mlflow]'` would
    fail, so the command names the extra's own packages, as pyproject.toml lists them."""
    from gnnrun.resources import install_command

    assert install_command("mlflow") == "pip install 'mlflow>=2.10'"
    assert install_command("slurm") == "pip install 'submitit>=1.5' 'hydra-submitit-launcher>=1.2'"
    assert install_command("no-such-extra") == "pip install -e '.[no-such-extra]' in gnnrun's clone"
