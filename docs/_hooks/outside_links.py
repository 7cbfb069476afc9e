"""mkdocs hook: let `mkdocs build --strict` accept links that leave docs/ for a file that exists.

The pages link to files outside docs/ (../README.md, ../benchmarks/*.md,
../CHANGELOG.md, ...). mkdocs reports every such link as "not found among
documentation files", which `strict: true` turns into a failure. This hook drops
that warning when the link, resolved on disk from the page's own folder, names
an existing file inside the repository; any other broken link still fails the
build. Anchors into those files are checked by tests/test_docs_links.py.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

_NOT_FOUND = re.compile(
    r"Doc file '(?P<page>[^']+)' contains a link '(?P<url>[^']+)', but the target.* is not "
    r"found among documentation files"
)


class _OutsideLinks(logging.Filter):
    def __init__(self, docs_dir: Path) -> None:
        super().__init__()
        self.docs_dir = docs_dir.resolve()
        self.repo = self.docs_dir.parent

    def filter(self, record: logging.LogRecord) -> bool:
        match = _NOT_FOUND.match(record.getMessage())
        if match is None:
            return True
        path = unquote(urlsplit(match["url"]).path)
        target = (self.docs_dir / match["page"]).parent.joinpath(path).resolve()
        outside_docs = not target.is_relative_to(self.docs_dir)
        inside_repo = target.is_relative_to(self.repo)
        return not (outside_docs and inside_repo and target.exists())


def on_config(config):
    logger = logging.getLogger("mkdocs.structure.pages")
    for old in [f for f in logger.filters if isinstance(f, _OutsideLinks)]:
        logger.removeFilter(old)
    logger.addFilter(_OutsideLinks(Path(config["docs_dir"])))
    return config
