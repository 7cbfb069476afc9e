"""SAR's sharded aggregation (gnnrun.algorithms.sar.shards) at the level of the layers: real
gloo ranks against the whole graph in one process, and the streamed edge softmax."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnrun.algorithms.sar import shards
from gnnrun.algorithms.sar.shards import EdgeSoftmaxGradients, StreamingEdgeSoftmax
from gnnrun.ops.attention import gat_aggregate_reference
from gnnrun.ops.block import Block
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import shard_checks  # noqa: E402

KINDS = list(shard_checks.LAYERS)
STRATEGIES = list(shard_checks.STRATEGIES)


@pytest.fixture(scope="module")
def on_ranks():
    """Per world size, every (layer kind, strategy) of one launch: rank results by config."""
    launched: dict[int, list[list[dict]]] = {}

    def results(world: int) -> list[list[dict]]:
        if world not in launched:
            if world == 1:  # one rank: no process group, no remote shard
                per_rank = [shard_checks.sharded_layers(0, 1, KINDS, STRATEGIES)]
            else:
                per_rank = run_on_ranks(shard_checks.sharded_layers, world, KINDS, STRATEGIES)
            launched[world] = [list(config) for config in zip(*per_rank, strict=True)]
        return launched[world]

    return results


@pytest.mark.parametrize(
    "world", [1, 2, pytest.param(4, marks=pytest.mark.slow)]
)  # 4 ranks: make test-slow
def test_sharded_layers_equal_the_whole_graph(on_ranks, world):
    """Outputs (training and no-grad evaluation), input gradients and summed parameter
    gradients of two layers of every kind, for every strategy, on 1, 2 and 4 ranks."""
    for config in on_ranks(world):
        reference = shard_checks.reference(config[0]["kind"], world)
        name = f"{config[0]['kind']} {config[0]['strategy']}"
        for rank in config:
            ids = rank["solid"]
            torch.testing.assert_close(rank["out"], reference["out"][ids], msg=name)
            torch.testing.assert_close(rank["evaluated"], reference["out"][ids], msg=name)
            torch.testing.assert_close(rank["x_grad"], reference["x_grad"][ids], msg=name)
            assert rank["alive_after"] == 0, name
        for i, expected in enumerate(reference["param_grads"]):
            summed = sum(rank["param_grads"][i] for rank in config)
            torch.testing.assert_close(summed, expected, rtol=1e-4, atol=1e-5, msg=name)


def test_plan_covers_every_edge_and_degree(on_ranks):
    """Shards and send lists mirror each other, GCN's out-degrees are the whole graph's,
    and on 4 ranks the last rank has no edge from rank 1 (an empty shard)."""
    world = 4
    config = on_ranks(world)[0]
    for rank, result in enumerate(config):
        for peer in range(world):
            assert result["shard_rows"][peer] == config[peer]["send_rows"][rank]
    dataset = shard_checks.hand_built_graph(world)
    out_degrees = np.bincount(dataset.indices, minlength=dataset.num_nodes)
    for result in config:
        assert result["out_degrees"].tolist() == out_degrees[result["solid"]].tolist()
    assert config[world - 1]["shard_rows"][1] == 0


@pytest.mark.parametrize("world", [2, 4])
def test_remote_rows_alive_at_once(on_ranks, world):
    """Measured from the received buffers' lifetimes (gnnrun.algorithms.sar.shards.RemoteRows):
    sar holds one remote shard at a time, the largest at its peak; with prefetch a shard
    and the next one in ring order; domain_parallel all of a layer's remote rows, from its
    forward pass to its backward pass, and every layer's at once. Nothing remote outlives
    a layer under sar, and nothing outlives the backward pass."""
    for config in on_ranks(world):
        strategy = config[0]["strategy"]
        name = f"{config[0]['kind']} {strategy} on {world}"
        for rank in config:
            ring, total = rank["ring_rows"], sum(rank["shard_rows"])
            expected = {
                "sar": max(ring),
                "sar_prefetch": shard_checks.prefetch_peak(ring),
                "domain_parallel": total,
            }[strategy]
            assert rank["peaks"] == [expected, expected], name  # two layers
            layer_bytes = rank["layer_peak_bytes"].values()
            if strategy == "domain_parallel":
                assert rank["peak_bytes"] == sum(layer_bytes), name
            else:
                assert rank["peak_bytes"] == max(layer_bytes), name
            assert rank["alive_after"] == 0, name
    # On 4 ranks prefetch does hold two shards at once somewhere.
    if world == 4:
        prefetch = [c for c in on_ranks(world) if c[0]["strategy"] == "sar_prefetch"][0]
        assert any(max(r["peaks"]) > max(r["shard_rows"]) for r in prefetch)


@pytest.mark.parametrize("world", [2, 4])
def test_backward_returns_gradients_and_refetches_only_for_gat(on_ranks, world):
    """SAGE and GCN: the backward pass sends back one gradient row per row the forward pass
    received and fetches nothing again; GAT under sar fetches every remote row again."""
    for config in on_ranks(world):
        kind, strategy = config[0]["kind"], config[0]["strategy"]
        prefix = "domain_parallel" if strategy == "domain_parallel" else "sar"
        for rank in config:
            sent, received = rank["rows"]["sent"], rank["rows"]["received"]
            forward = received[f"{prefix}_forward"]
            assert forward == 2 * sum(rank["shard_rows"])  # two layers
            assert sent[f"{prefix}_backward"] == forward
            assert received[f"{prefix}_backward"] == 2 * sum(rank["send_rows"])
            refetched = received.get(f"{prefix}_refetch", 0)
            assert refetched == (forward if kind == "gat" and prefix == "sar" else 0)
            assert rank["bytes"][f"{prefix}_forward"] > 0


def _hub_graph(num_parts: int) -> tuple[Block, np.ndarray]:
    """Vertex 0 has an in-edge from every other vertex; the others a few random ones; with
    self-loops, as GAT adds them. Parts: vertex id % num_parts."""
    rng = np.random.default_rng(5)
    n = 30
    rows = [list(range(n))] + [sorted({v, *rng.integers(0, n, 3).tolist()}) for v in range(1, n)]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    block = Block.from_csr(indptr, np.concatenate(rows))
    return block, np.arange(n) % num_parts


def _shards_of(block: Block, part: np.ndarray, order: list[int]):
    """The block's edges grouped by the part of their source, in `order`."""
    src, dst = block.indices, block.dst_of_edges()
    for p in order:
        mine = torch.from_numpy(part)[src] == p
        yield src[mine], dst[mine]


@pytest.mark.parametrize(("order", "chunk"), [([0, 1, 2, 3], 1 << 18), ([3, 1, 0, 2], 5)])
def test_streaming_edge_softmax_equals_the_global_one(monkeypatch, order, chunk):
    """Shard by shard, in any order and in chunks of edges, the streamed softmax gives GAT's
    aggregation over all edges and its gradients, with scores large enough that exp()
    alone would overflow."""
    block, part = _hub_graph(4)
    n, heads, dim, slope = block.num_dst, 2, 3, 0.2
    monkeypatch.setattr(shards, "CHUNK_BYTES", chunk * heads * dim * 8)  # float64 rows
    generator = torch.Generator().manual_seed(0)
    feat = torch.randn(n, heads, dim, generator=generator, dtype=torch.float64)
    el = 60 * torch.randn(n, heads, generator=generator, dtype=torch.float64)
    er = 60 * torch.randn(n, heads, generator=generator, dtype=torch.float64)
    grad_out = torch.randn(n, heads, dim, generator=generator, dtype=torch.float64)
    inputs = [t.clone().requires_grad_(True) for t in (feat, el, er)]
    expected = gat_aggregate_reference(block, *inputs, slope)
    expected.backward(grad_out)

    softmax = StreamingEdgeSoftmax(er, dim, slope)
    for src, dst in _shards_of(block, part, order):
        softmax.add(feat, el, src, dst)
    out = softmax.result()
    torch.testing.assert_close(out, expected.detach())

    grads = EdgeSoftmaxGradients(er, softmax.max, softmax.denominator, out, grad_out, slope)
    grad_feat, grad_el = torch.zeros_like(feat), torch.zeros_like(el)
    for src, dst in _shards_of(block, part, order[::-1]):
        shard_feat, shard_el = grads.of_rows(feat, el, src, dst)
        grad_feat += shard_feat
        grad_el += shard_el
    for got, want in zip((grad_feat, grad_el, grads.er), inputs, strict=True):
        torch.testing.assert_close(got, want.grad)


def test_remote_rows_count_the_tensors_alive_not_the_calls():
    """RemoteRows counts a received tensor for as long as anything holds it: one kept by
    the caller shows in the next peaks, one dropped at once does not."""
    remote = shards.RemoteRows()
    kept = torch.zeros(3, 4)
    remote.received(0, kept)
    remote.received(0, torch.zeros(5, 4))  # alive during the call only
    remote.received(0, torch.zeros(2, 4))
    remote.received(1, torch.zeros(4, 4))
    assert remote.peaks() == [3 + 5, 4]
    assert remote.peak_bytes == (3 + 5) * 4 * 4
    assert remote.alive_rows() == 3
    remote.reset()
    assert remote.peaks() == [3] and remote.peak_bytes == 3 * 4 * 4
    del kept
    assert remote.alive_rows() == 0
