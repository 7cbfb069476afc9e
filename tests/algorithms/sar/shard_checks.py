"""What the shard tests run on each real rank (imported by name there): GNN layers on a
rank's edge-cut part with a sharded aggregation, on a hand-built graph."""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.algorithms.sar.shards import DomainParallelAggregation, SequentialAggregation, ShardPlan
from gnnrun.comm import Communicator
from gnnrun.data.dataset import GraphDataset
from gnnrun.data.graph import csr_from_edges
from gnnrun.models.gat import GATConv
from gnnrun.models.gcn import GCNConv
from gnnrun.models.sage import SAGEConv
from gnnrun.ops.block import Block
from gnnrun.partition.book import Part
from gnnrun.partition.edge_cut import EdgeCutBuilder

NUM_NODES = 48
IN_DIM = 6
HUB = 0  # in-edges from every other vertex, so from every part
LONELY = NUM_NODES - 1  # no in-edges at all (only GAT's self-loop)
# (first, second) layer widths: the first widens (aggregate, then project), the second
# narrows (project, then aggregate), so both orders of every layer run.
WIDTHS = ((IN_DIM, 8), (8, 4))

LAYERS = {
    "sage_mean": lambda i, o: SAGEConv(i, o, "mean"),
    "sage_gcn": lambda i, o: SAGEConv(i, o, "gcn"),
    "gcn": lambda i, o: GCNConv(i, o),
    "gat": lambda i, o: GATConv(i, o, heads=2, concat=True),
}
STRATEGIES = {
    "sar": lambda plan, comm: SequentialAggregation(plan, comm),
    "sar_prefetch": lambda plan, comm: SequentialAggregation(plan, comm, prefetch=True),
    "domain_parallel": lambda plan, comm: DomainParallelAggregation(plan, comm),
}


def prefetch_peak(ring_rows: list[int]) -> int:
    """Remote rows alive at once under sar with prefetch: a shard and the next one in ring
    order (`ring_rows`: the rows of each peer's shard, rank+1 first)."""
    pairs = [a + b for a, b in zip(ring_rows, ring_rows[1:], strict=False)]
    return max(pairs, default=max(ring_rows))


def node_part(world: int) -> np.ndarray:
    """Contiguous ranges of vertex ids, one per part."""
    return np.arange(NUM_NODES) * world // NUM_NODES


def hand_built_graph(world: int) -> GraphDataset:
    """A random graph in which the hub's in-edges span every part, one vertex has no
    in-edges, and (from 3 parts on) the last part has no in-edge from part 1."""
    rng = np.random.default_rng(7)
    src = rng.integers(0, NUM_NODES, 200)
    dst = rng.integers(0, NUM_NODES, 200)
    src = np.concatenate([src, np.arange(1, NUM_NODES)])
    dst = np.concatenate([dst, np.full(NUM_NODES - 1, HUB)])
    keep = dst != LONELY
    part = node_part(world)
    if world >= 3:
        keep &= ~((part[src] == 1) & (part[dst] == world - 1))
    indptr, indices = csr_from_edges(src[keep], dst[keep], NUM_NODES, symmetrize=False)
    return GraphDataset(
        name="hand-built",
        indptr=indptr,
        indices=indices.astype(np.int64),
        feat=rng.standard_normal((NUM_NODES, IN_DIM)).astype(np.float32),
        label=np.zeros(NUM_NODES, dtype=np.int64),
        train_idx=np.arange(NUM_NODES),
        val_idx=np.arange(0),
        test_idx=np.arange(0),
        num_classes=1,
    )


def output_weights(width: int) -> torch.Tensor:
    """Fixed weights of the outputs in the loss: every output row gets its own gradient."""
    return torch.from_numpy(np.random.default_rng(11).standard_normal((NUM_NODES, width))).float()


def two_layers(kind: str) -> list[torch.nn.Module]:
    torch.manual_seed(3)
    return [LAYERS[kind](i, o) for i, o in WIDTHS]


def run_layers(layers, block: Block, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Two layers with a ReLU between, and the weighted sum of the output rows `ids`."""
    h = torch.relu(layers[0](block, x))
    out = layers[1](block, h)
    return out, (out * output_weights(out.shape[1])[ids]).sum()


def reference(kind: str, world: int) -> dict:
    """The two layers on the whole graph (as split in `world` parts) in this process:
    outputs and gradients."""
    dataset = hand_built_graph(world)
    block = Block.from_csr(dataset.indptr, dataset.indices)
    x = torch.from_numpy(dataset.feat).requires_grad_(True)
    layers = two_layers(kind)
    out, loss = run_layers(layers, block, x, torch.arange(NUM_NODES))
    loss.backward()
    params = [p.grad for layer in layers for p in layer.parameters()]
    return {"out": out.detach(), "x_grad": x.grad, "param_grads": params}


def rank_part(rank: int, world: int) -> tuple[Part, np.ndarray]:
    """This rank's edge-cut part of the hand-built graph, and its halos' local ids at their owners."""
    builder = EdgeCutBuilder(hand_built_graph(world), node_part(world), world)
    arrays = next(a for part, a, _ in builder.parts() if part == rank)
    part = Part(rank, world, "edge_cut", arrays, {})
    return part, builder.node_local[arrays["nodes"][part.num_solid :]]


def sharded_layers(rank: int, world: int, kinds: list[str], strategies: list[str]) -> list[dict]:
    """Per (kind, strategy): outputs and gradients of this rank's rows, its parameter
    gradients, the rows moved per purpose and the remote rows alive at once per layer."""
    # More ranks than cores: one thread each, or OpenMP's spinning threads crowd the peers.
    torch.set_num_threads(1)
    part, halo_local = rank_part(rank, world)
    comm = Communicator()
    solid = torch.from_numpy(np.asarray(part["nodes"][: part.num_solid]))
    results = []
    for kind in kinds:
        for strategy in strategies:
            plan, block = ShardPlan.from_part(part, halo_local, comm)
            block.graph_degrees = (plan.in_degrees, plan.out_degrees)
            block.sharded = aggregation = STRATEGIES[strategy](plan, comm)
            x = torch.from_numpy(np.asarray(part["feat"])).requires_grad_(True)
            layers = two_layers(kind)
            comm.bytes.reset()
            aggregation.begin_pass()
            out, loss = run_layers(layers, block, x, solid)
            forward_peaks = aggregation.remote_rows.peaks()
            loss.backward()
            rows, sent = aggregation.rows.reset(), comm.bytes.reset()
            with torch.no_grad():
                aggregation.begin_pass()
                evaluated, _ = run_layers(layers, block, x, solid)
            results.append(
                {
                    "kind": kind,
                    "strategy": strategy,
                    "solid": solid,
                    "out": out.detach(),
                    "evaluated": evaluated,
                    "x_grad": x.grad,
                    "param_grads": [p.grad for layer in layers for p in layer.parameters()],
                    "rows": rows,  # training's forward and backward pass
                    "bytes": sent,
                    "forward_peaks": forward_peaks,
                    "peaks": aggregation.remote_rows.peaks(),
                    "peak_bytes": aggregation.remote_rows.peak_bytes,
                    "layer_peak_bytes": aggregation.remote_rows.layer_peak_bytes,
                    "alive_after": aggregation.remote_rows.alive_rows(),
                    "shard_rows": [s.num_rows for s in plan.remote],
                    # In ring order: the shards of rank+1, rank+2, ...
                    "ring_rows": [plan.remote[plan.ahead(k)].num_rows for k in plan.steps],
                    "send_rows": [int(r.numel()) for r in plan.send_rows],
                    "out_degrees": plan.out_degrees,
                }
            )
    return results
