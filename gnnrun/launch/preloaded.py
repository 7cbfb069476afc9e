"""Imported last by the server the ranks are forked from (gnnrun.launch.forkserver),
once its imports are done.

- It freezes the objects those imports made (`gc.freeze()`, as Python's
  documentation advises for a server that forks): collections skip them from then
  on, in the server and in every rank forked from it, so that a rank's collections
  do not write to, and so copy, the pages it shares with the server.
- The server leaves without the interpreter's teardown once the launcher has gone
  (0.3-0.5 s for a process holding torch, during which it would keep the launcher's
  output open: `gnnrun train ... | tee log` would wait for it). It holds nothing to
  flush or close. The ranks it forks never run its exit handlers: each leaves
  through os._exit once its job has returned and its output is flushed.
"""

import atexit
import gc
import os

gc.freeze()
atexit.register(os._exit, 0)
