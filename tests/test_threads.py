"""A thread's own CPU priority: lowered for that thread alone."""

from __future__ import annotations

import sys
import threading

import pytest

from gnnrun.threads import LOWEST, lower_this_thread_priority, this_thread_nice


@pytest.mark.skipif(sys.platform != "linux", reason="a nice value per thread is Linux's")
def test_only_the_calling_thread_is_lowered():
    before = this_thread_nice()
    seen = {}

    def background():
        lower_this_thread_priority()
        seen["nice"] = this_thread_nice()

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen["nice"] == LOWEST
    assert this_thread_nice() == before  # the caller's own, untouched
