"""Block's per-block caches."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from gnnrun.ops.block import Block

sys.path.insert(0, str(Path(__file__).parent))
from test_aggregate import random_block, symmetric_block  # noqa: E402


def test_out_degrees_are_counted_once_and_again_for_new_indices(monkeypatch):
    block = random_block(60, 90, seed=3)
    bincount = torch.bincount
    counted = []
    monkeypatch.setattr(torch, "bincount", lambda *a, **k: counted.append(1) or bincount(*a, **k))
    assert torch.equal(block.graph_out_degrees(), bincount(block.indices, minlength=90))
    assert block.graph_out_degrees() is block.graph_out_degrees()
    assert len(counted) == 1
    block.indices = (block.indices + 1) % block.num_src  # a new array: counted again
    assert torch.equal(block.graph_out_degrees(), bincount(block.indices, minlength=90))
    assert len(counted) == 2


def test_a_symmetric_block_counts_nothing_and_a_part_uses_the_graph_degrees():
    block = symmetric_block()
    counts = torch.bincount(block.indices, minlength=block.num_src)
    assert torch.equal(block.graph_out_degrees(), counts)
    graph_out = torch.arange(block.num_src)
    part = Block(block.indptr, block.indices, block.num_src, graph_degrees=(graph_out, graph_out))
    assert part.graph_out_degrees() is graph_out
