"""The `offline` fixture of the OGB tests."""

from __future__ import annotations

import builtins
import socket
import threading
import urllib.request

import pytest


@pytest.fixture
def offline(monkeypatch):
    """Every way out to the network (and ogb's update prompt) records the attempt and fails."""
    attempts: list[str] = []

    def refuse(what):
        def blocked(*args, **kwargs):
            attempts.append(f"{what}{args[:2]}")
            raise OSError(f"network access attempted: {what}")

        return blocked

    monkeypatch.setattr(urllib.request, "urlopen", refuse("urlopen"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    monkeypatch.setattr(builtins, "input", refuse("input"))
    threads_before = set(threading.enumerate())
    yield attempts
    for thread in set(threading.enumerate()) - threads_before:
        if (
            not thread.daemon
        ):  # e.g. the version check `import ogb` starts (tqdm's monitor is a daemon)
            thread.join(timeout=10)
    assert attempts == []
