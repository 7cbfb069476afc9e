"""A fault hook for tests: make one rank fail at a chosen step, on the run's first attempt.

GNNRUN_FAULT=<kind>:rank=<r>:epoch=<e>[:step=<s>] makes rank r fail after step s
(default 1, so mid-epoch) of epoch e (0-based, as in metrics files). Kinds:
`raise` (an exception, as a bug would), `exit` (the process leaves with code 1),
`kill` (SIGKILL to itself), `stop` (SIGSTOP to itself: a hung rank). It fires on
the first attempt only (gnnrun.attempt), so a restarted or requeued run goes past
it: the restart tests and benchmarks use it. Unset, it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from gnnrun.attempt import current_attempt
from gnnrun.errors import GnnrunError

FAULT_ENV = "GNNRUN_FAULT"
KINDS = ("raise", "exit", "kill", "stop")


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    epoch: int
    step: int = 1


def parse_fault(text: str) -> Fault:
    kind, *fields = text.split(":")
    try:
        values = {key: int(value) for key, value in (f.split("=", 1) for f in fields)}
        fault = Fault(kind, **values)
    except (ValueError, TypeError):
        fault = None
    if fault is None or kind not in KINDS:
        raise GnnrunError(
            f"{FAULT_ENV}={text!r}: write <kind>:rank=<r>:epoch=<e>[:step=<s>] with a kind "
            f"of {', '.join(KINDS)}"
        )
    return fault


def inject_fault(rank: int, epoch: int, step: int) -> None:
    """Fail here when GNNRUN_FAULT names this rank, epoch and step (after `step` steps)."""
    text = os.environ.get(FAULT_ENV)
    if not text:
        return
    fault = parse_fault(text)
    if (fault.rank, fault.epoch, fault.step) != (rank, epoch, step):
        return
    if current_attempt().restarted:
        return
    if fault.kind == "raise":
        raise RuntimeError(f"injected fault on rank {rank} at epoch {epoch}, step {step}")
    if fault.kind == "exit":
        os._exit(1)
    os.kill(os.getpid(), signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP)
