"""Running DGL 2.1 beside gnnrun in one benchmark invocation.

DGL 2.1 does not import on gnnrun's torch, so its side runs in a venv of its
own: a benchmark given `--dgl-python PATH` writes its graph to an .npz, runs a
worker script (`dgl_*.py` here) with that python, and reads the one JSON
object the worker prints. The worker inherits this process's environment (the
allocator preload and THP_MEM_ALLOC_ENABLE that gnnrun's side runs with) and
its OpenMP thread count, so both sides run on the same allocator and threads.

This module imports only the standard library and numpy: the workers import it
too, from DGL's venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent


def allocator() -> str:
    """The preloaded library this process runs on (from LD_PRELOAD), or the system's."""
    maps = Path("/proc/self/maps").read_text()
    preloaded = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]
    found = [Path(p).name for p in preloaded if Path(p).name in maps]
    return " ".join(found) or "system (glibc)"


def features(num_rows: int, width: int) -> np.ndarray:
    """Deterministic float32 features, the same on both sides: x[i, j] = ((7 i + j) mod 13) / 13,
    so that both sides' sums can be compared (a checksum) without sending x."""
    rows = np.arange(num_rows, dtype=np.int64)[:, None] * 7
    return (((rows + np.arange(width)) % 13) / np.float32(13)).astype(np.float32)


def print_result(**figures) -> None:
    """A worker's one JSON line: DGL's and torch's versions, threads, allocator, `figures`."""
    import dgl
    import torch

    versions = {"dgl": dgl.__version__, "torch": torch.__version__}
    setup = {"threads": torch.get_num_threads(), "allocator": allocator()}
    print(json.dumps({**versions, **setup, **figures}))


def dgl_graph(data):
    """A DGL graph of the in-edge CSR in `data` (`indptr`, `indices`: row v lists the sources
    of the edges into v), its formats built. Imports DGL: for the workers only."""
    import dgl
    import torch

    indptr = data["indptr"].astype(np.int64)
    num_nodes = len(indptr) - 1
    src = torch.from_numpy(data["indices"].astype(np.int64))
    dst = torch.from_numpy(np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(indptr)))
    return dgl.graph((src, dst), num_nodes=num_nodes)


def check_dgl_python(python: str | None) -> None:
    """Exit at once, with the fix, when `--dgl-python` cannot import DGL: before any graph is
    built or any gnnrun figure measured, so that a wrong path costs nothing."""
    if python is None:
        return
    try:
        done = subprocess.run(
            [python, "-c", "import dgl, torch; print(dgl.__version__)"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.exit(f"--dgl-python {python}: cannot run it ({exc}); `make dgl-venv` builds one")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(
            f"--dgl-python {python} cannot import DGL ({last}): give the python of a venv "
            "with DGL 2.1; `make dgl-venv` builds one in .dgl-venv"
        )


def run_worker(
    python: str, worker: str, arguments: list[str], threads: int, timeout: float
) -> dict:
    """Run `worker` (a file in scripts/) with DGL's `python`; its JSON, or {"error": ...}.

    gnnrun's cached CPU blocks go back to the system first: DGL then runs with the free
    memory it would have had alone (this process waits meanwhile).
    """
    from gnnrun.ops import cpu_allocator

    cpu_allocator.release()
    command = [python, str(SCRIPTS / worker), *arguments, f"--threads={threads}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        result = {"error": str(exc)}
    else:
        if done.returncode == 0:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            result = {"error": (done.stdout + done.stderr)[-2000:]}
    result["command"] = " ".join(command)
    if "error" in result:
        print(f"DGL side FAILED ({result['command']}):\n{result['error']}", file=sys.stderr)
    return result
