"""The CPU block cache: large freed blocks come back to the next allocation of their size,
and the cache never holds more than the process once had in use."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import torch

from gnnrun.ops import cpu_allocator

MIB = 2**20

pytestmark = pytest.mark.skipif(
    not cpu_allocator.install(), reason="the native kernels cannot be built here"
)


def floats(mib: float) -> torch.Tensor:
    return torch.empty(int(mib * MIB) // 4)


def test_a_freed_large_block_is_reused_for_its_size_class():
    cpu_allocator.release()
    first = floats(40)
    address = first.data_ptr()
    del first
    before = cpu_allocator.stats()
    second = floats(39)  # a little smaller, the same size class (40 MiB rounded up by at most 1/8)
    after = cpu_allocator.stats()
    assert second.data_ptr() == address
    assert after.hits == before.hits + 1 and after.misses == before.misses
    second.fill_(3.0)
    assert float(second.sum()) == 3.0 * second.numel()


def test_small_blocks_are_left_to_torch():
    before = cpu_allocator.stats()
    small = [torch.ones(1000) for _ in range(100)] + [floats(31.9)]
    del small
    after = cpu_allocator.stats()
    assert (after.hits, after.misses) == (before.hits, before.misses)


def test_blocks_in_use_and_cached_never_exceed_the_peak_in_use():
    cpu_allocator.release()
    rng = random.Random(0)
    live: list[torch.Tensor] = []
    for _ in range(300):
        if live and rng.random() < 0.45:
            live.pop(rng.randrange(len(live)))
        else:
            live.append(floats(rng.choice([32, 36, 40, 48, 64, 80, 104])))
        s = cpu_allocator.stats()
        assert s.in_use_bytes + s.cached_bytes <= s.peak_in_use_bytes
    assert cpu_allocator.stats().hits > 0  # the sizes repeat: some came from the cache
    live.clear()
    assert cpu_allocator.release() == cpu_allocator.stats().released_bytes - s.released_bytes


def test_release_hands_every_cached_block_back():
    held = floats(48)
    del held
    assert cpu_allocator.stats().cached_bytes >= 48 * MIB
    assert cpu_allocator.release() >= 48 * MIB
    assert cpu_allocator.stats().cached_bytes == 0
    assert cpu_allocator.describe().startswith("large blocks kept for reuse, ")
    assert cpu_allocator.describe().endswith(" reused")


def run(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_gnnrun_allocator_system_leaves_torchs_allocator_alone():
    code = (
        "from gnnrun.ops import cpu_allocator as c; "
        "print(c.install(), c.stats(), c.release(), c.describe().split(' (')[0])"
    )
    assert run(code, GNNRUN_ALLOCATOR="system") == "False None 0 large blocks not kept"


def test_nothing_is_installed_until_a_kernel_runs():
    code = (
        "import torch; from gnnrun.ops import cpu_allocator as c; a = c.installed(); "
        "from gnnrun.ops.aggregate import aggregate; from gnnrun.ops.block import Block; "
        "aggregate(Block(torch.tensor([0, 1]), torch.tensor([0]), 1), torch.ones(1, 4), 'sum'); "
        "print(a, c.installed(), c.describe())"
    )
    assert run(code) == "False True large blocks kept for reuse, none allocated yet"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_allocates_while_another_thread_holds_the_cache():
    # A thread keeps the cache's lock busy: each allocation of the other size class
    # misses and hands the touched 256 MiB block back to glibc under the lock. A child
    # forked meanwhile must not inherit the lock held (it would wait forever). The child
    # touches its block's pages without a parallel region (1 float in 1024: under torch's
    # grain size): GNU OpenMP is not fork-safe, and a child forked while the churning
    # thread was starting one of its own can hang on OpenMP's state, not the cache's.
    # The main thread calls the child's operators once before the churning thread starts:
    # torch looks an operator up on its first call, inside a C++ static's initialisation,
    # and a child forked while another thread was in it waits forever on the static's
    # guard (`__cxa_guard_acquire`), whatever the allocator (this test hung so, 2 runs in
    # 60 beside a full suite; it takes 3-10 s).
    code = """
import os, threading, torch
from gnnrun.ops import cpu_allocator
assert cpu_allocator.install()
torch.empty(2**24)[::1024] = 1  # the operators' first calls, before any other thread
stop = False
def churn():
    size = 2**26
    while not stop:
        torch.empty(size).fill_(1)
        size = 2**26 + 2**25 if size == 2**26 else 2**26
t = threading.Thread(target=churn); t.start()
for _ in range(40):
    pid = os.fork()
    if pid == 0:
        torch.empty(2**24)[::1024] = 1; os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
stop = True; t.join(); print("ok")
"""
    assert run(code) == "ok"


def test_the_aggregations_outputs_are_reused_when_torch_was_imported_first():
    # Without THP_MEM_ALLOC_ENABLE (torch imported before gnnrun), the aggregation kernel
    # mapped large outputs itself, outside the cache.
    code = """
import torch
from gnnrun.ops import cpu_allocator as c
from gnnrun.ops.aggregate import aggregate
from gnnrun.ops.block import Block
n = 40_000
block = Block(torch.arange(n + 1), torch.arange(n), n)
x = torch.ones(n, 256)
for _ in range(3):
    out = aggregate(block, x, "sum")  # 41 MB
    assert float(out.sum()) == n * 256
    del out
print(c.stats().hits >= 2)
"""
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
