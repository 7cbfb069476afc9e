"""All-to-all-v between the ranks of one host through files in /dev/shm.

Over loopback TCP, gloo moves an exchange with background threads in every
rank and a socket copy at each end. When every core runs a rank's compute
thread, those threads preempt it mid-GEMM: with DRPA's exchanges in flight,
MKL's GEMMs took about 3x the cycles per unit of work on 2 ranks of a 2-core
machine (README, Performance). Here the sender writes each peer's rows to a
file of their own in a directory on /dev/shm (tmpfs: memory, no disk) and
renames it into place; the receiver, when it waits, reads the rows straight
into its output buffer and removes the file. No thread, one copy at each end,
and an exchange that is waited for epochs later (cd-r) costs nothing until
then.

A file is named `<seq>.<source>-<destination>`, `seq` counting the exchanges
this transport has started. Every rank starts the same exchanges in the same
order, as with any collective, so the names agree without a word exchanged.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from gnnrun.errors import GnnrunError

SHM_ROOT = Path("/dev/shm")
PREFIX = "gnnrun-a2a-"


class SharedMemoryAllToAll:
    """This rank's end of the transport; `start` is `all_to_all_single` with split sizes."""

    def __init__(self, directory: Path, rank: int, world_size: int, timeout_s: float) -> None:
        self.directory, self.rank, self.world_size = directory, rank, world_size
        self.timeout_s = timeout_s
        self.seq = 0

    @classmethod
    def for_group(cls, timeout_s: float) -> SharedMemoryAllToAll | None:
        """Collective: the transport when all ranks run on this host and /dev/shm is usable."""
        rank, world = dist.get_rank(), dist.get_world_size()
        hosts: list[str | None] = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
        shared: list[str | None] = [None]
        if rank == 0 and len(set(hosts)) == 1 and os.access(SHM_ROOT, os.W_OK):
            _remove_stale_directories()
            shared[0] = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=SHM_ROOT)
        dist.broadcast_object_list(shared, src=0)
        if shared[0] is None:
            return None
        directory = Path(shared[0])
        # Every rank removes it at exit; files of exchanges never waited for go with it.
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        return cls(directory, rank, world, timeout_s)

    def start(
        self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]
    ) -> SharedMemoryWork:
        """Send `inp`'s split q to rank q now; `wait()` fills `out`'s split p from rank p.

        Both tensors are flat and contiguous; splits count elements.
        """
        seq, self.seq = self.seq, self.seq + 1
        sends = _offsets(in_splits)
        for peer, (begin, end) in enumerate(sends):
            if peer == self.rank or begin == end:
                continue
            final = self.directory / f"{seq}.{self.rank}-{peer}"
            partial = final.with_name("." + final.name)
            try:
                with open(partial, "wb", buffering=0) as f:
                    f.write(_bytes(inp[begin:end]))
            except FileNotFoundError:
                raise GnnrunError(
                    f"rank {self.rank}: {self.directory} is gone: another rank has exited "
                    "(its own error, if any, is reported too)"
                ) from None
            os.rename(partial, final)  # a receiver never sees a file half written
        begin, end = sends[self.rank]
        mine = _offsets(out_splits)[self.rank]
        out[mine[0] : mine[1]].copy_(inp[begin:end])
        return SharedMemoryWork(self, seq, out, out_splits)


class SharedMemoryWork:
    """An exchange started by `SharedMemoryAllToAll.start`; `wait()` receives it."""

    def __init__(self, transport: SharedMemoryAllToAll, seq: int, out, out_splits) -> None:
        self.transport, self.seq, self.out, self.out_splits = transport, seq, out, out_splits

    def wait(self) -> None:
        t = self.transport
        for peer, (begin, end) in enumerate(_offsets(self.out_splits)):
            if peer == t.rank or begin == end:
                continue
            path = t.directory / f"{self.seq}.{peer}-{t.rank}"
            target = _bytes(self.out[begin:end])
            with _open_when_there(path, t.timeout_s, peer) as f:
                got = 0
                while got < len(target):
                    n = f.readinto(target[got:])
                    if not n:
                        raise GnnrunError(
                            f"rank {t.rank}: exchange {self.seq} from rank {peer} ended after "
                            f"{got} of {len(target)} bytes ({path}); the ranks disagree on "
                            "what they exchange"
                        )
                    got += n
            path.unlink()


def _offsets(splits: list[int]) -> list[tuple[int, int]]:
    out, begin = [], 0
    for n in splits:
        out.append((begin, begin + n))
        begin += n
    return out


def _bytes(flat: torch.Tensor) -> memoryview:
    return memoryview(flat.detach().numpy()).cast("B")


def _open_when_there(path: Path, timeout_s: float, peer: int):
    deadline, pause = time.monotonic() + timeout_s, 2e-5
    while True:
        try:
            return open(path, "rb", buffering=0)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise GnnrunError(
                    f"rank {peer} did not send {path.name} within cluster.timeout_s="
                    f"{timeout_s:g} s: it stopped or is far behind (its own error, if any, "
                    "is reported too)"
                ) from None
            time.sleep(pause)
            pause = min(2 * pause, 1e-3)


def _remove_stale_directories() -> None:
    """Directories of runs that were killed before their exit handlers ran (this user's)."""
    for directory in SHM_ROOT.glob(PREFIX + "*"):
        try:
            pid = int(directory.name[len(PREFIX) :].split("-")[0])
            if directory.stat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue
