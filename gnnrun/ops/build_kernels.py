"""Compile every native kernel now, several at a time: `python -m gnnrun.ops.build_kernels`.

A kernel is otherwise compiled by the first process that needs it, one file at a
time (10-25 s each on a 2-core machine); `make test` builds them all first, one
process per core, so that its tests do not wait on the compiler in turn. Each
kernel builds in a process of its own (gnnrun.ops.native caches the result and
holds a lock while building), the CPU allocator first, since every other kernel
loads it. Kernels already in the cache are left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gnnrun.ops.native import CPU_ALLOCATOR, KERNELS_DIR, is_built

LOAD = "import sys; from gnnrun.ops.native import load_kernel_file; sys.exit(not load_kernel_file({!r}))"


def build(stems: list[str], processes: int) -> list[str]:
    """Build `stems`, `processes` at a time; return those that failed."""
    waiting, running, failed = list(stems), {}, []
    while waiting or running:
        while waiting and len(running) < processes:
            stem = waiting.pop(0)
            running[stem] = subprocess.Popen([sys.executable, "-c", LOAD.format(stem)])
        for stem, process in list(running.items()):
            if process.poll() is not None:
                del running[stem]
                if process.returncode != 0:
                    failed.append(stem)
        time.sleep(0.1)
    return failed


def main() -> int:
    if os.environ.get("GNNRUN_NO_NATIVE") == "1":  # the Python references are asked for
        return 0
    start = time.perf_counter()
    missing = sorted(p.stem for p in KERNELS_DIR.glob("*.cpp") if not is_built(p.stem))
    if not missing:
        return 0
    first = [CPU_ALLOCATOR] if CPU_ALLOCATOR in missing else []
    others = [stem for stem in missing if stem != CPU_ALLOCATOR]
    failed = build(first, 1) + build(others, os.cpu_count() or 1)
    took = time.perf_counter() - start
    if failed:  # each printed why; gnnrun falls back to the Python references for them
        print(f"kernels not built: {', '.join(failed)} ({took:.0f} s)")
        return 1
    print(f"kernels built: {', '.join(missing)} ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
