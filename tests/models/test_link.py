"""Pair scoring: chunks of gathered rows give the scores of the whole gather."""

from __future__ import annotations

import pytest
import torch

from gnnrun.models.link import SCORE_CHUNK_BYTES, build_scorer, score_pairs


@pytest.mark.parametrize("scorer", ["dot", "mlp"])
@pytest.mark.parametrize("chunk_bytes", [1, 3 * 8 * 4 * 5, 1 << 30])  # a row; 3 edges' 5 rows
def test_pairs_scored_in_chunks_equal_the_whole_gather(monkeypatch, scorer, chunk_bytes):
    monkeypatch.setitem(SCORE_CHUNK_BYTES, "cpu", chunk_bytes)
    torch.manual_seed(0)
    score = build_scorer(scorer, 8)
    h = torch.randn(30, 8)
    u, v = torch.randint(0, 30, (11,)), torch.randint(0, 30, (11,))
    w = torch.randint(0, 30, (11, 5))
    with torch.no_grad():
        # u [P] with v [P]: one score a pair.
        assert torch.allclose(score_pairs(score, h, u, v), score(h[u], h[v]))
        # u [E] against w [E, k]: each source against its k.
        expected = score(h[u][:, None, :].expand(-1, 5, -1), h[w])
        assert torch.allclose(score_pairs(score, h, u, w), expected, atol=1e-6)
        # u [E, k] with w [E, k]: pair by pair.
        uu = torch.randint(0, 30, (11, 5))
        assert torch.allclose(score_pairs(score, h, uu, w), score(h[uu], h[w]))
        assert score_pairs(score, h, u[:0], w[:0]).shape == (0, 5)
