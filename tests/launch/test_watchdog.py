"""The watchdog's words: which errors mean a lost peer, and gloo's lines cleaned."""

from __future__ import annotations

from gnnrun.errors import GnnrunError
from gnnrun.launch.elastic import ElasticGroup
from gnnrun.launch.watchdog import _first_line, is_lost_peer

GLOO = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[10.0.0.2]:61593: Connection reset by peer. This is typically caused by a remote "
    "worker hanging or bugs in the application. Check the logs of the remote worker."
)


def test_a_collective_that_lost_its_peer_is_told_from_a_rank_error():
    assert is_lost_peer(RuntimeError(GLOO))
    assert is_lost_peer(RuntimeError("Timed out waiting 15000ms for recv operation to complete"))
    assert not is_lost_peer(ValueError("boom"))
    assert not is_lost_peer(GnnrunError("rank 1: training loss is nan at epoch 3"))


def test_gloo_lines_lose_their_source_location_and_advice():
    assert (
        _first_line(RuntimeError(GLOO)) == "Read error [10.0.0.2]:61593: Connection reset by peer"
    )
    assert _first_line(GnnrunError("GnnrunError: x\nmore")) == "x"


def test_a_host_runs_the_ranks_of_its_place():
    assert list(ElasticGroup(2, nnodes=3, node_rank=1).ranks()) == [2, 3]
    assert list(ElasticGroup(4).ranks()) == [0, 1, 2, 3]
