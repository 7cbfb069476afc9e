"""Real trackers for the `tracking` suite (make test-tracking): a `mlflow server` and
`tensorboard` started on loopback, headless Chromium for screenshots, gnnrun runs
started as a user starts them. Every one of these is a process of its own, stopped
at the end of the session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Where the screenshots go: GNNRUN_SCREENSHOTS_DIR (docs/images, to refresh the docs'),
# else the session's temporary folder.
SCREENSHOTS_ENV = "GNNRUN_SCREENSHOTS_DIR"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[:3]} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tracking")


@pytest.fixture(scope="session")
def mlflow_server(session_dir) -> Iterator[str]:
    """`mlflow server` on a sqlite store, serving artifacts, on a free loopback port."""
    port = free_port()
    root = session_dir / "mlflow-server"
    root.mkdir()
    log = open(root / "server.log", "w")  # noqa: SIM115 (open while the server runs)
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/health", process)
        yield url
    finally:
        stop(process)
        log.close()


def gnnrun_env(session_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLFLOW_", "WANDB_", "GNNRUN_ATTEMPT", "GNNRUN_RUN_ID"))
    }
    env |= {
        "PYTHONPATH": str(REPO),
        "GNNRUN_DATA_ROOT": str(session_dir / "data"),  # the dataset is prepared once
        "COLUMNS": "120",
        **extra,
    }
    return env


def train(
    session_dir: Path, cwd: Path, *overrides: str, timeout_s: float = 300, **env: str
) -> subprocess.CompletedProcess:
    """`gnnrun train OVERRIDES` in `cwd`, as a user runs it; fails the test if it fails."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "gnnrun.cli", "train", *overrides],
        cwd=cwd,
        env=gnnrun_env(session_dir, **env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (make test-tracking installs it with apt-get)")
    return found


def screenshot(
    url: str, name: str, session_dir: Path, size: str = "1400,900", wait_ms: int = 15000
) -> Path:
    """A PNG of `url` as headless Chromium renders it."""
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or session_dir / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.unlink(missing_ok=True)
    subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={size}",
            f"--virtual-time-budget={wait_ms}",
            f"--screenshot={path}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "HOME": str(session_dir)},
    )
    return path


def distinct_colours(path: Path) -> int:
    """How many colours a PNG has: a blank or error page has a handful, a chart hundreds."""
    import numpy as np
    from matplotlib.image import imread

    pixels = (imread(path)[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    return len(np.unique(pixels, axis=0))


# One run logged to all three trackers, which the TensorBoard, MLflow and W&B tests read.
LOGGED_RUN = (
    "dataset=synthetic-tiny",
    "algorithm=hec",  # its own figures too: cache hit rates per layer
    "train.epochs=3",
    "logger=[tensorboard,mlflow,wandb]",
)


@pytest.fixture(scope="session")
def logged_run(session_dir, mlflow_server) -> Path:
    run_dir = session_dir / "logged" / "run"
    train(
        session_dir,
        session_dir / "logged",
        *LOGGED_RUN,
        f"hydra.run.dir={run_dir}",
        MLFLOW_TRACKING_URI=mlflow_server,
    )
    return run_dir


def epochs_of(run_dir: Path, rank: int = 0) -> list[dict]:
    import json

    return [json.loads(line) for line in (run_dir / f"metrics.rank{rank}.jsonl").open()]
