"""Every relative link in the Markdown files outside mkdocs' reach resolves.

`mkdocs build --strict` (make lint) checks the links of docs/ between its pages.
This test checks the links of README.md, CONTRIBUTING.md, CHANGELOG.md,
benchmarks/*.md and docs/**/*.md: a relative link must name an existing file or
folder inside the repository, and its `#anchor`, where it has one and names a
Markdown file, a heading of that file (GitHub's slugs).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

from .conftest import REPO

FILES = sorted(
    p
    for p in [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        REPO / "CHANGELOG.md",
        *(REPO / "benchmarks").glob("*.md"),
        *(REPO / "docs").glob("**/*.md"),
    ]
    if p.is_file()
)
PARSER = MarkdownIt().enable("table")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (repeated headings get -1, -2, ...)."""
    tokens = PARSER.parse(path.read_text())
    found: set[str] = set()
    for opening, inline in zip(tokens, tokens[1:], strict=False):
        if opening.type != "heading_open":
            continue
        text = "".join(
            child.content
            for child in inline.children or []
            if child.type in ("text", "code_inline")
        )
        slug, n = _slug(text), 1
        while slug in found:
            slug, n = f"{_slug(text)}-{n}", n + 1
        found.add(slug)
    return found


def _links(path: Path) -> list[tuple[int, str]]:
    """(line, href) of every link in the file, code spans and blocks left out."""
    links = []
    for token in PARSER.parse(path.read_text()):
        if token.type != "inline":
            continue
        for child in token.children or []:
            if child.type == "link_open":
                links.append((token.map[0] + 1, child.attrs["href"]))
    return links


def _problem(source: Path, href: str) -> str | None:
    """Why `href` in `source` does not resolve; None when it does (or is not relative)."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return None  # a web address: not checked here
    if href.startswith("/"):
        return "an absolute path: link relative to the file"
    target = (source.parent / unquote(parts.path)).resolve() if parts.path else source
    if not target.is_relative_to(REPO):
        return "points outside the repository"
    if not target.exists():
        return f"{target.relative_to(REPO)} does not exist"
    if parts.fragment and target.suffix == ".md" and parts.fragment not in _anchors(target):
        return f"{target.relative_to(REPO)} has no heading for #{parts.fragment}"
    return None


def test_files_are_found():
    names = {p.relative_to(REPO).as_posix() for p in FILES}
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/index.md"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(path):
    broken = [
        f"{path.relative_to(REPO)}:{line}: ({href}) {problem}"
        for line, href in _links(path)
        if (problem := _problem(path, href))
    ]
    assert not broken, "\n".join(broken)


def test_the_checker(tmp_path, monkeypatch):
    """A missing file, a missing anchor and a link out of the repository are found."""
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Known `gaps`: short\n\n## Known `gaps`: short\n")
    page = tmp_path / "b.md"
    assert _problem(page, "a.md#known-gaps-short") is None
    assert _problem(page, "a.md#known-gaps-short-1") is None
    assert _problem(page, "a.md") is None
    assert _problem(page, "https://example.org/x.md") is None
    assert "no heading" in _problem(page, "a.md#nothing")
    assert "does not exist" in _problem(page, "missing.md")
    assert "outside" in _problem(page, "../elsewhere.md")
    assert "absolute" in _problem(page, "/a.md")
