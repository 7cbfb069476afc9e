"""`gnnrun.algorithms.sources`, the minibatch sources' module path before the algorithm
families became subpackages: programs that import it keep working, and are told where
the names are now."""

from __future__ import annotations

import importlib
import sys

import pytest

import gnnrun.algorithms


def test_the_old_module_path_still_imports_with_a_warning(monkeypatch):
    monkeypatch.delitem(sys.modules, "gnnrun.algorithms.sources", raising=False)
    with pytest.warns(DeprecationWarning, match=r"gnnrun\.algorithms\.minibatch\.sources"):
        old = importlib.import_module("gnnrun.algorithms.sources")
    assert old.LocalGraphSource is gnnrun.algorithms.LocalGraphSource
    assert old.make_minibatch is gnnrun.algorithms.make_minibatch
