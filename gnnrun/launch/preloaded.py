"""Imported last by the server the ranks are forked from (gnnrun.launch.forkserver),
once its imports are done.

It freezes the objects those imports made (`gc.freeze()`, as Python's documentation
advises for a server that forks): collections skip them from then on, in the server
and in every rank forked from it, so that a rank's collections do not write to, and
so copy, the pages it shares with the server, and the server's exit does not collect
them (0.5-0.7 s for a process holding torch: gnnrun.memory.skip_exit_collection).
"""

import gc

gc.freeze()
