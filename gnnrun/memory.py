"""Process-wide memory settings gnnrun applies before torch allocates anything.

Huge pages. Large CPU tensors are fresh allocations at every step
(activations, gathered features, gradients), and each first touch of a 4 KiB
page costs a fault: measured, about 30% of a minibatch step's CPU time went to
the kernel. PyTorch's `THP_MEM_ALLOC_ENABLE=1` backs allocations of 2 MiB and
more with transparent huge pages (512x fewer faults); the sage_products step
fell from 380 to 286 ms (scripts/bench_train.py). PyTorch reads the variable
once, at its first allocation, so it must be set before `import torch`; ranks
started afterwards inherit it. A value the user already set wins.

The allocator. glibc hands every allocation above 32 MiB back to the kernel
when it is freed, so each full-batch layer's [N, 256] activations and gradients
are fresh pages again at every epoch, faulted and zeroed by the kernel, and
epoch times swung by up to 1.9x with how fast the kernel found free huge pages.
tcmalloc keeps freed memory for the next allocation: on a 200k-vertex / 5M-edge
graph a GraphSAGE epoch went from 1.86-2.30 s to 1.6 s and a GCN epoch from
1.61-3.05 s to 1.25-1.29 s, with a spread of a few percent. gnnrun preloads tcmalloc
when it is installed (Debian/Ubuntu `libtcmalloc-minimal4`, conda `gperftools`)
and runs without it otherwise. The library must be loaded before the process
starts: the gnnrun command re-executes itself once with LD_PRELOAD set, and
ranks inherit it. Without tcmalloc, large blocks are still reused: gnnrun's
kernels install a caching CPU allocator for them (gnnrun.ops.cpu_allocator).
GNNRUN_ALLOCATOR=system opts out of both; a path picks a library.

oneDNN's primitive cache. bfloat16 products run through oneDNN, which keeps a
compiled primitive, with its buffers, for each shape it meets, up to
`LRU_CACHE_CAPACITY` of them (1,024 by default). A sampled minibatch has shapes
of its own at every step, so the cache only grew: an RGCN bf16 run on
synthetic-hetero-medium held about 4 MB more after each step. 64 keeps what a
full-batch epoch's few shapes reuse, and bounds the rest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SETTINGS = {"THP_MEM_ALLOC_ENABLE": "1", "LRU_CACHE_CAPACITY": "64"}
ALLOCATOR_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")


def apply_at_import() -> None:
    """Huge pages for a program that imports gnnrun and never runs the gnnrun command.

    `import gnnrun` sets THP_MEM_ALLOC_ENABLE=1 (unless set) when torch is not
    imported yet, so that a library caller's models allocate as `gnnrun train`'s
    do: a full-batch epoch on 200k vertices / 5M edges took 13k page faults
    instead of 430-520k, and 0.16-0.36 s less kernel time. Only before torch:
    torch reads the variable at its first allocation, and the native kernels
    take it, once set, to mean torch's large tensors are huge already (they then
    skip their own huge pages). tcmalloc cannot be loaded this late; that takes
    the gnnrun command, or LD_PRELOAD.
    """
    if "torch" not in sys.modules:
        for name, value in SETTINGS.items():
            os.environ.setdefault(name, value)


def apply_memory_settings() -> None:
    """Huge pages, and the preloaded allocator for every process started from here on."""
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
    library = allocator_library()
    if library is not None and library not in os.environ.get("LD_PRELOAD", "").split(":"):
        os.environ["LD_PRELOAD"] = ":".join(
            p for p in (library, os.environ.get("LD_PRELOAD", "")) if p
        )


def allocator_library() -> str | None:
    """The allocator library to preload: GNNRUN_ALLOCATOR's, or the first tcmalloc found."""
    choice = os.environ.get("GNNRUN_ALLOCATOR", "auto")
    if choice == "system":
        return None
    if choice != "auto":
        return choice if _is_shared_library(Path(choice)) else None
    for folder in _library_folders():
        for name in ALLOCATOR_NAMES:
            if (folder / name).is_file():
                return str(folder / name)
    return None


def allocator_problem() -> str | None:
    """What is wrong with GNNRUN_ALLOCATOR, in a line that says the fix; None when nothing is."""
    choice = os.environ.get("GNNRUN_ALLOCATOR", "auto")
    if choice in ("auto", "system") or _is_shared_library(Path(choice)):
        return None
    return (
        f"GNNRUN_ALLOCATOR={choice} is not a shared library (no such file, or not ELF); "
        "running on the system allocator. Point it at one (e.g. libtcmalloc_minimal.so.4), "
        "or set it to auto or system"
    )


def _is_shared_library(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _library_folders() -> list[Path]:
    prefixes = [sys.prefix, os.environ.get("CONDA_PREFIX", "")]
    folders = [Path(p) / "lib" for p in prefixes if p]
    folders += [Path(p) for p in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu")]
    folders += [Path(p) for p in ("/usr/lib64", "/usr/lib", "/usr/local/lib")]
    return folders


def allocator_in_use() -> str:
    """The name of the preloaded allocator this process runs on, or 'system (glibc)'."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown"
    chosen = allocator_library()
    for name in {*ALLOCATOR_NAMES, *([Path(chosen).name] if chosen else [])}:
        if name in maps:
            return name
    return "system (glibc)"


def reexec_with_allocator() -> None:
    """Restart this process with the allocator preloaded, when it is found and not loaded yet.

    For processes that do the work themselves (the gnnrun command, which is a
    rank under srun, and the benchmark scripts). Call it first thing, before
    anything has been printed or started: the process image is replaced.
    """
    apply_memory_settings()
    library = allocator_library()
    if library is None:
        if problem := allocator_problem():
            print(f"gnnrun: {problem}", file=sys.stderr)
        return
    if Path(library).name in allocator_in_use():
        return
    if os.environ.get("GNNRUN_ALLOCATOR_REEXEC") == "1":
        # Restarted with it, and ld.so still did not load it (it said why, above):
        # keep it away from the processes this one starts, which would say so again.
        preload = os.environ.get("LD_PRELOAD", "").split(":")
        os.environ["LD_PRELOAD"] = ":".join(p for p in preload if p and p != library)
        os.environ["GNNRUN_ALLOCATOR"] = "system"
        print(
            f"gnnrun: {library} could not be preloaded; running on the system allocator "
            "(GNNRUN_ALLOCATOR=system silences this)",
            file=sys.stderr,
        )
        return
    os.environ["GNNRUN_ALLOCATOR_REEXEC"] = "1"
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable, *sys.argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *argv[1:]])


class PeakMemory:
    """This process's peak resident memory over the run, and over windows within it.

    A window's figure is its peak minus the resident memory at its start: what an
    epoch's training steps held on top of the process, the dataset and the part
    (activations, remote rows, gradients), which is what full-batch algorithms
    differ in. The window's peak comes from Linux's VmHWM, reset by writing 5 to
    /proc/self/clear_refs, so the run's peak is kept here. Where the kernel
    offers neither, windows give None.

    Peaks are VmHWM where Linux has it, not getrusage's ru_maxrss: a child's
    ru_maxrss starts at its parent's resident memory when it was forked, so a
    rank started by a launcher that had just partitioned a graph would report
    the launcher's memory as its own.
    """

    def __init__(self) -> None:
        self._run_peak = _own_peak_mb()
        self._window_start: float | None = None

    def start_window(self) -> None:
        self._run_peak = max(self._run_peak, _own_peak_mb())
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self._window_start = _proc_status_mb("VmRSS")
        except OSError:
            self._window_start = None

    def window_growth_mb(self) -> float | None:
        """Peak resident memory since `start_window`, above what was resident then."""
        peak = _proc_status_mb("VmHWM") if self._window_start is not None else None
        return None if peak is None else max(peak - self._window_start, 0.0)

    def run_peak_mb(self) -> float:
        self._run_peak = max(self._run_peak, _own_peak_mb())
        return self._run_peak


def skip_exit_collection() -> None:
    """Spare a process that is about to exit the interpreter's last garbage collections.

    Exiting, Python collects every object still tracked, a few times over: after an
    optimiser step (which imports torch._dynamo) a process took 0.71 s to exit, 0.15 s
    without them (benchmarks/2026-11-29-process-exit.md). The launcher waits for every
    rank to exit, and the user for gnnrun's own process. `gc.freeze` moves every object into the permanent generation,
    which no collection visits; the operating system takes the memory back. Only for a
    process whose work is done: cycles that are garbage now are never freed.
    """
    import gc

    gc.freeze()


def resident_mb() -> float:
    """This process's resident memory now (VmRSS), 0 where Linux does not say."""
    return _proc_status_mb("VmRSS") or 0.0


def anonymous_mb() -> float | None:
    """This process's resident anonymous memory (heap, tensors), without the pages of the
    files it maps, which the kernel can drop at any time; None where Linux does not say."""
    return _proc_status_mb("RssAnon")


def _own_peak_mb() -> float:
    """This process image's peak resident memory since it started (or the last reset)."""
    peak = _proc_status_mb("VmHWM")
    if peak is not None:
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _proc_status_mb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
