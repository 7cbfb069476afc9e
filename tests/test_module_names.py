"""Every `gnnrun.package.module[.name]` that the docs, scripts, tests and the package's own
comments mention exists: a module moved or renamed leaves no reference to its old name.
(Names whose first part is no gnnrun module, such as tracker tags, are not module names.)"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"(?<![\w/.-])gnnrun(?:\.[A-Za-z_]\w*)+")
# Dated records (benchmarks, the changelog) keep the names of their day.
HISTORY = ("benchmarks/", "CHANGELOG.md")


@functools.cache
def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@functools.cache
def _exists(name: str) -> bool:
    parts = name.split(".")
    if not _is_module(".".join(parts[:2])):
        return True  # not a module name (gnnrun.rank, a tracker tag; gnnrun.world_size, ...)
    for end in range(len(parts), 1, -1):
        module = ".".join(parts[:end])
        if _is_module(module):
            if end == len(parts):
                return True
            try:
                obj = importlib.import_module(module)
            except ImportError:  # an optional dependency missing: the module is there
                return True
            for attribute in parts[end:]:
                if not hasattr(obj, attribute):
                    return False
                obj = getattr(obj, attribute)
            return True
    return False


def test_every_module_name_mentioned_exists():
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.toml", "*.yaml", "Makefile"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    missing = {}
    for file in files:
        if file.startswith(HISTORY) or not (REPO / file).is_file():
            continue
        for match in NAME.finditer((REPO / file).read_text(errors="replace")):
            name = match.group(0)
            if not _exists(name):
                missing.setdefault(name, []).append(file)
    assert not missing, f"names of modules that do not exist: {missing}"
