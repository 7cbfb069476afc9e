"""Every script and `make` target the docs show exists, with the flags they give it.

tests/test_docs_commands.py runs the `gnnrun` commands of the docs; the
benchmark scripts are too slow to run here, so this test checks what can go
stale without a word: a script's name, the flags written after it on the same
line (each must be an option its argparse declares), and the `make` targets.
The dated files under benchmarks/ record the commands of their day and are
left out (benchmarks/README.md, the index, is checked).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import REPO

FILES = sorted(
    p
    for p in [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        REPO / "benchmarks" / "README.md",
        *(REPO / "docs").glob("**/*.md"),
    ]
    if p.is_file()
)
# A script's name and the rest of its line, up to a table cell's end, a code span's
# end or a comment.
SCRIPT = re.compile(r"scripts/([\w-]+\.(?:py|sh))([^|`#\n]*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
# `make X` in a code span, or in a code block (a line indented 4 or more).
MAKE = re.compile(r"(?:^ {4,}|`)make ([a-z][\w-]*\b)(?!-)", re.MULTILINE)


def script_problems(path: Path, scripts: Path) -> list[str]:
    """`file:line: problem` for every script or flag in `path` that `scripts` lacks."""
    problems = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in SCRIPT.finditer(line):
            script = scripts / match.group(1)
            if not script.is_file():
                problems.append(f"{path.name}:{number}: no scripts/{script.name}")
                continue
            source = script.read_text()
            for flag in FLAG.findall(match.group(2)):
                declared = f'"{flag}"' in source or f"'{flag}'" in source
                if not declared and not (script.suffix == ".sh" and flag in source):
                    problems.append(f"{path.name}:{number}: scripts/{script.name} has no {flag}")
    return problems


def make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", makefile.read_text(), re.MULTILINE))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_documented_scripts_and_their_flags_exist(path):
    assert not script_problems(path, REPO / "scripts")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_documented_make_targets_exist(path):
    targets = make_targets(REPO / "Makefile")
    missing = [t for t in MAKE.findall(path.read_text()) if t not in targets]
    assert not missing, f"{path.name}: no make target {missing}"


def test_the_docs_show_scripts_with_flags():
    """The checks above look at something: the docs show scripts with their flags."""
    shown = sum(
        len(FLAG.findall(m.group(2))) for path in FILES for m in SCRIPT.finditer(path.read_text())
    )
    assert shown > 50, shown


def test_the_checker(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "bench.py").write_text('parser.add_argument("--runs", type=int)\n')
    doc = tmp_path / "doc.md"
    doc.write_text(
        "    python scripts/bench.py --runs 3 --lowest-priority   # --ignored in a comment\n"
        "| `scripts/bench.py --runs 2` | --outside the cell |\n"
        "`scripts/gone.py`\n"
    )
    assert script_problems(doc, scripts) == [
        "doc.md:1: scripts/bench.py has no --lowest-priority",
        "doc.md:3: no scripts/gone.py",
    ]
    makefile = tmp_path / "Makefile"
    makefile.write_text(".PHONY: test\ntest: setup\n\tpytest\nsetup:\n")
    assert make_targets(makefile) == {"test", "setup"}
    shown = "`make test`, to make the most of it, `make bench-*`:\n\n    make lint\n"
    assert MAKE.findall(shown) == ["test", "lint"]
