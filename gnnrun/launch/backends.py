"""Which torch.distributed backends work here, checked by really starting a 1-rank group."""

from __future__ import annotations

import datetime
import importlib
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist

CCL_INSTALL_HINT = (
    "install Intel's oneCCL bindings matching your torch (`pip install oneccl_bind_pt` "
    "from Intel's wheel index), or use cluster.backend=gloo"
)


@dataclass(frozen=True)
class BackendStatus:
    name: str
    works: bool
    detail: str


def probe_backend(name: str) -> BackendStatus:
    """Start a world-size-1 process group on `name` and all-reduce one tensor."""
    if name == "nccl" and not torch.cuda.is_available():
        return BackendStatus(name, False, "no CUDA device")
    if name == "mpi" and not dist.is_mpi_available():
        return BackendStatus(name, False, "torch built without MPI")
    if name == "ccl":
        try:
            importlib.import_module("oneccl_bindings_for_pytorch")
        except ImportError:
            return BackendStatus(
                name, False, "oneccl_bindings_for_pytorch not installed: " + CCL_INSTALL_HINT
            )
    if dist.is_initialized():
        return BackendStatus(name, False, "a process group is already running here")
    device = "cuda" if name == "nccl" else "cpu"
    try:
        with tempfile.NamedTemporaryFile() as store_file:
            store = dist.FileStore(store_file.name, 1)
            dist.init_process_group(
                name, store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20)
            )
            try:
                value = torch.ones(1, device=device)
                dist.all_reduce(value)
            finally:
                dist.destroy_process_group()
        return BackendStatus(name, True, "1-rank all-reduce ok")
    except Exception as exc:  # each backend fails in its own way; report, don't crash
        return BackendStatus(
            name, False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )


def probe_all() -> list[BackendStatus]:
    return [probe_backend(name) for name in ("gloo", "nccl", "ccl", "mpi")]
