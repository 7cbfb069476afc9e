"""What each rank of the local launcher runs: set up as every rank is, do its job
(train, or layer-wise inference), leave."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from torch.distributed.elastic.multiprocessing.errors import record

from gnnrun.launch.rank import (
    infer_rank,
    partition_rank,
    prepare_rank,
    process_group,
    rank_cpus,
    train_rank,
)
from gnnrun.memory import skip_exit_collection

INTERRUPTED_EXIT = 128 + signal.SIGINT  # a rank's exit status after SIGINT (as the shell's)

# `job` -> what a rank runs: fn(cfg, rank, *args).
RANK_JOBS = {
    "train": train_rank,
    "infer": infer_rank,
    "partition": partition_rank,
    "prepare": prepare_rank,
}


@record  # writes the exception to the error file the launcher reads, for its message
def rank_main(cfg, backend: str, job: str, *args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    # Ctrl-C reaches a rank twice: from the terminal and forwarded by the agent.
    # The second must not interrupt the first one's cleanup with a traceback.
    signal.signal(signal.SIGINT, _interrupt_once)
    cpus, threads = rank_cpus(rank, world, cfg.cluster.threads_per_rank, cfg.cluster.comm_cores)
    try:
        with process_group(cfg, backend, local_rank, cpus, threads, job):
            result = RANK_JOBS[job](cfg, rank, *args)
    except KeyboardInterrupt:
        _leave_interrupted()
    skip_exit_collection()  # the launcher waits for every rank to exit
    return result


def _interrupt_once(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _leave_interrupted() -> None:
    """Exit 130 once the rank has left its process group, skipping the interpreter's
    teardown: with a peer gone mid-collective, the exit's C++ destructors (torch's
    threads) can abort it, printing "terminate called without an active exception",
    "Fatal Python error: Aborted" and the module list. The launcher names the rank as
    interrupted (gnnrun.launch.elastic)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(INTERRUPTED_EXIT)
