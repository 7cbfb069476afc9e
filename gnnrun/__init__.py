"""gnnrun: distributed GNN training launcher driven by composable Hydra configs."""

import os as _os
import signal as _signal

from gnnrun.memory import apply_at_import as _apply_memory_settings_at_import

__version__ = "0.1.0"

# Set by the local launcher for the ranks it starts (gnnrun.launch.elastic).
RANK_STARTING_ENV = "GNNRUN_RANK_STARTING"


def _leave_quietly_on_interrupt_while_starting() -> None:
    """A starting rank leaves quietly on Ctrl-C until it installs its own handler.

    A spawned rank spends seconds importing torch; an interrupt then would print
    the import's KeyboardInterrupt traceback. The new process imports this package
    first (its main script does), so this runs before those imports.
    """
    if _os.environ.get(RANK_STARTING_ENV) == "1":
        _signal.signal(_signal.SIGINT, lambda signum, frame: _os._exit(128 + signum))


_leave_quietly_on_interrupt_while_starting()

# Before anything imports torch: what `gnnrun train` runs with, for library callers too.
_apply_memory_settings_at_import()
