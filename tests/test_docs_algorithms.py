"""docs/choosing-an-algorithm.md's table of what each algorithm trains says what the
algorithms' classes declare (the facts gnnrun refuses a run by): a row for every
registered algorithm, and its partition, tasks, heterogeneous graphs and bf16 as the
class has them."""

from __future__ import annotations

import re

from gnnrun.algorithms.registry import ALGORITHMS

from .conftest import REPO

PAGE = REPO / "docs" / "choosing-an-algorithm.md"
PARTITIONS = {
    "none": None,
    "edge cut": "edge_cut",
    "vertex cut": "vertex_cut",
    "row blocks": "block1d",
}


def _table() -> dict[str, dict[str, str]]:
    """The rows of the table under "What each one trains", by algorithm."""
    section = PAGE.read_text().split("## What each one trains", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        row = dict(zip(header, cells, strict=True))
        rows[row["algorithm"].strip("`")] = row
    return rows


def test_the_page_names_every_algorithm_with_what_its_class_declares():
    rows = _table()
    assert sorted(rows) == sorted(ALGORITHMS.names())
    for name, row in rows.items():
        cls = ALGORITHMS.get(name)
        partition = re.sub(r"\s*\(.*\)$", "", row["partition"])
        assert PARTITIONS[partition] == cls.partition_kind, name
        assert sorted(t.strip() for t in row["tasks"].split(",")) == sorted(cls.tasks), name
        assert (row["heterogeneous graphs"] == "yes") == cls.heterogeneous, name
        assert (row["`train.precision=bf16`"] == "yes") == ("bf16" in cls.precisions), name
        if name != "single":  # full batch or sampled; the others' full batch spans the ranks
            assert (row["batch"] == "full") == cls.splits_batch, name
