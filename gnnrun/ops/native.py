"""Build (once, cached by torch) and load the C++/OpenMP kernels in `kernels/`.

Each `kernels/NAME.cpp` is its own extension library that registers operators
in the `gnnrun` namespace (`TORCH_LIBRARY_FRAGMENT(gnnrun, m)`): a kernel is one
self-contained file, and one that fails to build costs only its own operators.
Every kernel has a reference implementation in Python; when a file cannot be
built (no compiler), callers fall back to it after one warning line. Set
GNNRUN_NO_NATIVE=1 to force the references (tests compare both).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"
CFLAGS = ["-O3", "-fopenmp"]


@functools.cache
def load_kernel_file(stem: str) -> bool:
    """Compile (or fetch from torch's cache) and load kernels/<stem>.cpp; False if impossible."""
    if os.environ.get("GNNRUN_NO_NATIVE") == "1":
        return False
    source = KERNELS_DIR / f"{stem}.cpp"
    if not source.is_file():
        _warn(stem, f"{source} not found")
        return False
    try:
        from torch.utils.cpp_extension import load

        load(
            name=f"gnnrun_{stem}",
            sources=[str(source)],
            extra_cflags=CFLAGS,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
        return True
    except Exception as exc:  # a missing compiler shows up as many different errors
        lines = str(exc).strip().splitlines()
        _warn(stem, f"{type(exc).__name__}: {lines[-1] if lines else ''}")
        return False


def native_op(name: str, source: str) -> Callable | None:
    """The operator `gnnrun::name` from kernels/<source>.cpp, or None when it cannot be built."""
    if not load_kernel_file(source):
        return None
    return getattr(torch.ops.gnnrun, name)


def to_tensor(array: np.ndarray, dtype: np.dtype | type | None = None) -> torch.Tensor:
    """A tensor over `array` (no copy when it is already contiguous, writable and of `dtype`)."""
    return torch.from_numpy(np.require(array, dtype=dtype, requirements=["C", "W"]))


def _warn(stem: str, reason: str) -> None:
    from gnnrun.progress import console

    console.print(
        f"[yellow]gnnrun: native kernels/{stem}.cpp unavailable ({reason}); "
        "using the slower reference code[/]"
    )


def native_status() -> str:
    """One line for `gnnrun env`."""
    stems = sorted(p.stem for p in KERNELS_DIR.glob("*.cpp"))
    built = [s for s in stems if load_kernel_file(s)]
    missing = sorted(set(stems) - set(built))
    text = f"built: {', '.join(built) or 'none'}"
    return text + (f"; unavailable (reference fallback): {', '.join(missing)}" if missing else "")
