"""`gnnrun env`: what this machine offers a gnnrun run."""

from __future__ import annotations

import os
import platform

import torch
from rich.table import Table
from rich.text import Text

from gnnrun import __version__
from gnnrun.launch.backends import probe_all
from gnnrun.launch.topology import read_topology
from gnnrun.ops.native import native_status
from gnnrun.progress import out


def environment_rows() -> list[tuple[str, str | Text]]:
    topo = read_topology()
    rows = [
        ("gnnrun", __version__),
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        (
            "torch threads",
            f"{torch.get_num_threads()} (intra-op), {torch.get_num_interop_threads()} (inter-op)",
        ),
        ("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "unset")),
        ("CPUs usable", f"{topo.logical_cpus} logical, {topo.physical_cores} physical cores"),
        ("sockets", ", ".join(f"{s}: {len(c)} CPUs" for s, c in topo.sockets.items())),
        ("NUMA nodes", str(topo.numa_nodes)),
        (
            "CUDA",
            f"{torch.cuda.device_count()} device(s)"
            if torch.cuda.is_available()
            else "not available",
        ),
    ]
    for status in probe_all():
        rows.append(
            (
                f"backend {status.name}",
                Text.assemble(
                    ("works", "green") if status.works else ("no", "red"), " ", status.detail
                ),
            )
        )
    rows.append(("native kernels", native_status()))
    rows.append(("allocator", _allocator_status()))
    return rows


def _allocator_status() -> str:
    from gnnrun.memory import allocator_in_use, allocator_library
    from gnnrun.ops import cpu_allocator

    text = (
        f"{allocator_in_use()}; {cpu_allocator.describe()}; "
        f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}"
    )
    if allocator_library() is None and os.environ.get("GNNRUN_ALLOCATOR", "auto") == "auto":
        text += "; install tcmalloc (libtcmalloc-minimal4) to reuse small blocks too"
    return text


def print_environment() -> None:
    table = Table(title="gnnrun environment", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for key, value in environment_rows():
        table.add_row(key, Text(value) if isinstance(value, str) else value)  # text, not markup
    out.print(table)
