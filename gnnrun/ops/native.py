"""Build (once, cached by torch) and load the C++/OpenMP kernels in `kernels/`.

Each `kernels/*.cpp` registers its operators in the `gnnrun` namespace with
`TORCH_LIBRARY_FRAGMENT(gnnrun, m)`, so a kernel is one self-contained file;
`native_kernels()` returns that namespace (`torch.ops.gnnrun`).

Every kernel has a reference implementation in Python. When no compiler is
present, or the build fails, callers fall back to it after one warning line.
Set GNNRUN_NO_NATIVE=1 to force the references (tests compare both).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"


@functools.cache
def native_kernels() -> Any | None:
    """`torch.ops.gnnrun` with every kernel loaded, or None when they cannot be built here."""
    if os.environ.get("GNNRUN_NO_NATIVE") == "1":
        return None
    sources = sorted(str(p) for p in KERNELS_DIR.glob("*.cpp"))
    if not sources:
        _warn(f"no kernel sources in {KERNELS_DIR}")
        return None
    try:
        from torch.utils.cpp_extension import load

        load(
            name="gnnrun_kernels",
            sources=sources,
            extra_cflags=["-O3", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
        return torch.ops.gnnrun
    except Exception as exc:  # a missing compiler shows up as many different errors
        _warn(
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        )
        return None


def to_tensor(array: np.ndarray, dtype: np.dtype | type | None = None) -> torch.Tensor:
    """A tensor over `array` (no copy when it is already contiguous, writable and of `dtype`)."""
    return torch.from_numpy(np.require(array, dtype=dtype, requirements=["C", "W"]))


def _warn(reason: str) -> None:
    from gnnrun.progress import console

    console.print(
        f"[yellow]gnnrun: native kernels unavailable ({reason}); using the slower reference code[/]"
    )


def native_status() -> str:
    """One line for `gnnrun env`."""
    module = native_kernels()
    return (
        f"built ({module.__file__})" if module is not None else "not available (reference fallback)"
    )
