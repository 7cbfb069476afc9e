"""Build (once, cached) and load the C++/OpenMP kernels in `kernels/`.

Each `kernels/NAME.cpp` is its own extension library that registers operators
in the `gnnrun` namespace (`TORCH_LIBRARY_FRAGMENT(gnnrun, m)`): a kernel is one
self-contained file, and one that fails to build costs only its own operators.
Every kernel has a reference implementation in Python; when a file cannot be
built (no compiler), callers fall back to it after one warning line. Set
GNNRUN_NO_NATIVE=1 to force the references (tests compare both).

Kernels include ATen and `torch/library.h`, never `torch/extension.h`: that one
brings the whole C++ frontend and pybind11, and made each file take 30-45 s to
compile on a 2-core machine against 10-18 s with ATen alone.

Kernels are compiled for the CPU they run on (`-march=native`: AVX-512 where
there is one, which made the aggregation 1.3-1.5x faster than the generic
x86-64 build on a Xeon with AVX-512). The build cache therefore lives in one
folder per (CPU, torch installation, Python): a home directory shared over NFS
by nodes of different CPU types never hands one of them the other's binary.
GNNRUN_MARCH=x86-64-v3 (or any -march value) builds a portable library instead;
GNNRUN_KERNEL_CACHE moves the cache (default ~/.cache/gnnrun/kernels), where
builds nothing uses are removed (`kernel_cache`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from gnnrun.ops import kernel_cache
from gnnrun.resources import shipped

KERNELS_DIR = shipped("kernels")
CPU_ALLOCATOR = "cpu_allocator"  # the kernel file loaded before any other
# A build takes well under a minute per file; a lock older than this was left by
# a build that was killed, and torch would wait on it forever.
STALE_LOCK_SECONDS = 600
# torch takes the same lock briefly to find a kernel already built, so ranks
# starting together see each other's: only a lock that stays this long is a build.
BUILD_NOTICE_SECONDS = 2.0


def march() -> str:
    return os.environ.get("GNNRUN_MARCH", "native")


def compile_flags() -> list[str]:
    return ["-O3", "-fopenmp", f"-march={march()}"]


def cpu_signature() -> str:
    """What distinguishes one CPU's native build from another's: model name and feature flags."""
    wanted = {"model name", "flags", "Features", "CPU part"}  # x86 and arm spellings
    fields = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in wanted:
                    fields.append(f"{key.strip()}={value.strip()}")
                elif not line.strip() and fields:
                    break  # the first processor's block is enough
    except OSError:
        pass
    return "\n".join(fields) or f"{platform.machine()} {platform.processor()}"


def build_root() -> Path:
    """The cache folder for this CPU (when native), this torch installation and Python.

    torch's build files name the installation's include and library folders, so
    two environments (each clone's .venv) sharing a folder would each rebuild
    every kernel whenever the other had built last.
    """
    base = os.environ.get("GNNRUN_KERNEL_CACHE") or Path.home() / ".cache" / "gnnrun" / "kernels"
    target = march()
    if target == "native":
        target = "native-" + hashlib.sha1(cpu_signature().encode()).hexdigest()[:10]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    installation = hashlib.sha1(str(torch_home()).encode()).hexdigest()[:8]
    return Path(base) / f"{python}-torch{torch.__version__}-{installation}-{target}"


def torch_home() -> Path:
    """The folder torch is installed in."""
    return Path(torch.__file__).resolve().parent


def stage_source(source: Path) -> Path:
    """A copy of `source` in its build folder, named by its content.

    ninja decides what to rebuild by path and timestamp: building a clone's own
    file would rebuild every kernel in every fresh clone or worktree (30 s of
    `make run`), though the cache holds the same code. Built from a copy whose
    folder is named by the content's hash, an unchanged kernel is found built.
    """
    text = source.read_bytes()
    folder = build_root() / f"{source.stem}-{hashlib.sha1(text).hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / source.name
    if not staged.is_file() or staged.read_bytes() != text:
        partial = folder / f".{source.name}.{os.getpid()}"
        partial.write_bytes(text)
        os.replace(partial, staged)  # whole or absent, for a rank building beside us
    return staged


_cpu_allocator_installed = False


def install_cpu_allocator() -> bool:
    """kernels/cpu_allocator.cpp as torch's CPU allocator, once (gnnrun.ops.cpu_allocator says why).

    False when GNNRUN_ALLOCATOR=system or it cannot be built.
    """
    global _cpu_allocator_installed
    wanted = os.environ.get("GNNRUN_ALLOCATOR", "auto") != "system"
    if not _cpu_allocator_installed and wanted and load_kernel_file(CPU_ALLOCATOR):
        _cpu_allocator_installed = bool(torch.ops.gnnrun.cpu_allocator_install())
    return _cpu_allocator_installed


def cpu_allocator_installed() -> bool:
    """Whether the CPU block cache is torch's CPU allocator in this process (installs nothing)."""
    return _cpu_allocator_installed


@functools.cache
def load_kernel_file(stem: str) -> bool:
    """Compile (or fetch from the cache) and load kernels/<stem>.cpp; False if impossible."""
    if os.environ.get("GNNRUN_NO_NATIVE") == "1":
        return False
    if stem != CPU_ALLOCATOR:
        install_cpu_allocator()  # before the kernel's first large tensors
    source = KERNELS_DIR / f"{stem}.cpp"
    if not source.is_file():
        _warn(stem, f"{source} not found")
        return False
    try:
        from torch.utils.cpp_extension import load

        staged = stage_source(source)
        first_use = not (staged.parent / kernel_cache.LAST_USED).exists()
        _clear_stale_lock(staged.parent / "lock", stem)
        with _path_independent_build():
            load(
                name=f"gnnrun_{stem}",
                sources=[str(staged)],
                extra_cflags=compile_flags(),
                extra_ldflags=["-fopenmp"],
                build_directory=str(staged.parent),
                is_python_module=False,
                verbose=False,
            )
    except Exception as exc:  # a missing compiler shows up as many different errors
        _warn(stem, _build_failure(exc))
        return False
    kernel_cache.mark_used(staged.parent, torch_home())
    if first_use:  # a new build: time to drop the ones nothing uses any more
        _report_pruned(kernel_cache.prune(build_root().parent, STALE_LOCK_SECONDS))
    return True


def _our_ninja_dir() -> str | None:
    """The folder of the ninja that gnnrun's `ninja` dependency installed, if any.

    Found through the package's list of installed files: the package's own lookup
    (`ninja.BIN_DIR`) searches only the running interpreter's scripts folder, so an
    environment that takes its packages from another one (a venv with a .pth file
    naming that one's site-packages) found none, ran the system's older ninja, and
    every kernel was rebuilt there and again at the next run from the other one.
    """
    from importlib.metadata import PackageNotFoundError, distribution

    folders = []
    try:
        package = distribution("ninja")
        folders += [
            str(Path(package.locate_file(f)).resolve().parent)
            for f in package.files or ()
            if f.name == "ninja" and f.parent.name == "bin"
        ]
    except PackageNotFoundError:
        pass
    folders.append(str(Path(sys.executable).parent))  # next to the running interpreter
    for folder in folders:
        if os.access(Path(folder) / "ninja", os.X_OK):
            return folder
    return None


@contextlib.contextmanager
def _path_independent_build() -> Iterator[None]:
    """Build the same way whatever PATH holds, so that no PATH change rebuilds the kernels.

    ninja rebuilds a target whose command line changed, or whose build log it cannot
    read; both depended on PATH, and each switch of PATH (gnnrun run as `gnnrun` with
    the environment's bin on PATH, then by its full path without) rebuilt all six
    kernels, about 70 s here:
    - torch runs the first `ninja` on PATH, and two ninja versions (a system 1.11 and
      the environment's 1.13) read each other's build log as foreign. So the
      environment's own ninja goes first on PATH during the build.
    - torch writes `cxx = ccache c++` into build.ninja when `ccache` (or `sccache`) is
      on PATH and `cxx = c++` when not: another command line. gnnrun already caches
      builds by content (`stage_source`), so the wrapper is turned off
      (TORCH_NO_COMPILER_WRAPPER); an explicit CXX is still honoured.
    """
    saved = {name: os.environ.get(name) for name in ("PATH", "TORCH_NO_COMPILER_WRAPPER")}
    ours = _our_ninja_dir()
    if ours is not None:  # none: PATH decides, as torch would
        path = saved["PATH"]
        os.environ["PATH"] = os.pathsep.join([ours, path]) if path else ours
    os.environ["TORCH_NO_COMPILER_WRAPPER"] = "1"
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _report_pruned(removed: list[Path]) -> None:
    if removed:
        from gnnrun.progress import console

        console.print(
            f"gnnrun: removed {len(removed)} kernel build folder(s) that nothing used for "
            f"{kernel_cache.UNUSED_BUILD_DAYS} days or whose torch installation is gone "
            f"({', '.join(p.name for p in removed)}) from {build_root().parent}",
            markup=False,
        )


def _build_failure(exc: Exception) -> str:
    """The compiler's own error line when there is one (not ninja's "build stopped")."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    errors = [line for line in lines if " error: " in f" {line}" and len(line) < 300]
    reason = errors[0] if errors else f"{type(exc).__name__}: {lines[-1] if lines else ''}"
    if march() != "native":
        reason += f"; built with GNNRUN_MARCH={march()}"
    return reason


def _clear_stale_lock(lock: Path, stem: str) -> None:
    """Remove a build lock that a killed build left behind; say so when waiting on a live one."""
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    from gnnrun.progress import console, print_warning

    if age > STALE_LOCK_SECONDS:
        lock.unlink(missing_ok=True)
        print_warning(
            f"gnnrun: removed a stale build lock for kernels/{stem}.cpp "
            f"({lock}, {age / 60:.0f} min old: a build was killed)"
        )
    else:
        deadline = time.monotonic() + BUILD_NOTICE_SECONDS
        while lock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not lock.exists():
            return
        console.print(
            f"gnnrun: waiting for kernels/{stem}.cpp, which another process is building "
            f"(a lock left by a killed build is removed after {STALE_LOCK_SECONDS // 60} min)",
            markup=False,
        )


def native_op(name: str, source: str) -> Callable | None:
    """The operator `gnnrun::name` from kernels/<source>.cpp, or None when it cannot be built."""
    if not load_kernel_file(source):
        return None
    return getattr(torch.ops.gnnrun, name)


def to_tensor(array: np.ndarray, dtype: np.dtype | type | None = None) -> torch.Tensor:
    """A tensor over `array` (no copy when it is already contiguous, writable and of `dtype`)."""
    return torch.from_numpy(np.require(array, dtype=dtype, requirements=["C", "W"]))


def _warn(stem: str, reason: str) -> None:
    from gnnrun.progress import print_warning

    print_warning(
        f"gnnrun: native kernels/{stem}.cpp unavailable ({reason}); using the slower reference code"
    )


def native_status() -> str:
    """One line for `gnnrun env`."""
    stems = sorted(p.stem for p in KERNELS_DIR.glob("*.cpp"))
    built = [s for s in stems if load_kernel_file(s)]
    missing = sorted(set(stems) - set(built))
    text = f"built (-march={march()}): {', '.join(built) or 'none'}"
    if missing:
        text += f"; unavailable (reference fallback): {', '.join(missing)}"
    cache = build_root().parent
    return text + f"; cache {cache} ({kernel_cache.size_summary(cache)})"
