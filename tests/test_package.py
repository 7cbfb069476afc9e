"""The built wheel works on its own: installed outside the repository, run from an empty
directory (configs and kernel sources are package data). `make test-package`."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.package


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_installs_and_trains_from_an_empty_directory(tmp_path):
    wheels = tmp_path / "wheels"
    # No build isolation: the build needs only setuptools, already here (no network).
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", wheels, REPO, cwd=tmp_path)  # fmt: skip
    (wheel,) = wheels.glob("gnnrun-*.whl")

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp_path).strip())  # fmt: skip
    # gnnrun's dependencies (torch included) come from this environment's site-packages,
    # appended after the new environment's own: nothing is downloaded, and gnnrun itself
    # is the wheel's (this environment's editable gnnrun is only found through a .pth
    # file there, which a path listed in another .pth does not process).
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "GNNRUN_DATA_ROOT": str(empty / "data"), "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    where = _run(python, "-c", "import gnnrun; print(gnnrun.__file__)", cwd=empty, env=env)
    assert where.startswith(str(site)), where
    # The configs and kernels' sources are the wheel's copies (setup.py's mapping).
    folders = _run(python, "-c", "from gnnrun.cli import CONFIG_DIR; from gnnrun.ops.native "
                   "import KERNELS_DIR; print(CONFIG_DIR); print(KERNELS_DIR)",
                   cwd=empty, env=env).split()  # fmt: skip
    assert folders == [str((site / "gnnrun" / name).resolve()) for name in ("configs", "kernels")]
    assert (site / "gnnrun" / "configs" / "algorithm" / "sampling" / "sage_products.yaml").is_file()
    gnnrun = venv / "bin" / "gnnrun"
    assert _run(gnnrun, "--version", cwd=empty, env=env).strip().startswith("gnnrun ")
    assert "native kernels" in _run(gnnrun, "env", cwd=empty, env=env)
    out = _run(gnnrun, "train", "dataset=synthetic-tiny", "train.epochs=2", cwd=empty, env=env)
    assert "run directory" in out
    assert sorted(p.name for p in empty.iterdir()) == ["data", "outputs"]
