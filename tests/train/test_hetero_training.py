"""Training heterogeneous graphs end to end: what RGCN learns that an MLP and a type-blind
model cannot, a one-type graph trained exactly as the homogeneous one, a resumed run, and
sampled blocks with every neighbour against the full batch. (`pipeline` against
`minibatch` on real ranks: tests/algorithms/test_hetero.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from gnnrun.data import load_prepared
from gnnrun.train.trainer import train

sys.path.insert(0, str(Path(__file__).parents[1] / "algorithms"))
from conftest import prepared  # noqa: E402

TINY = "dataset=synthetic-hetero-tiny"


def records(run_dir: Path, rank: int = 0) -> list[dict]:
    lines = (run_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def trajectory(run_dir: Path, rank: int = 0) -> list[tuple]:
    """Per epoch: the training loss and the evaluated accuracies (what must match)."""
    return [(r["loss"], r.get("val_acc"), r.get("test_acc")) for r in records(run_dir, rank)]


def train_run(tmp_path: Path, name: str, *overrides: str) -> tuple[dict, Path]:
    run_dir = tmp_path / name
    run_dir.mkdir()
    cfg = prepared(*overrides, f"train.checkpoint_dir={tmp_path}/checkpoints/{name}")
    return train(cfg, run_dir), run_dir


def mlp_test_accuracy(cfg, hidden: int, epochs: int, lr: float) -> float:
    """A 2-layer MLP on the target type's own features, trained full batch like the GNNs."""
    dataset = load_prepared(cfg.dataset)
    target = dataset.hetero.target_type
    x = torch.from_numpy(np.array(dataset.typed_feat[target]))
    offset = int(dataset.hetero.offsets[target])
    y = torch.from_numpy(np.array(dataset.label[offset : offset + x.shape[0]]))
    train_ids = torch.from_numpy(np.array(dataset.train_idx)) - offset
    test_ids = torch.from_numpy(np.array(dataset.test_idx)) - offset
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], hidden),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.5),
        torch.nn.Linear(hidden, dataset.num_classes),
    )
    optimizer = torch.optim.Adam(mlp.parameters(), lr=lr)
    for _ in range(epochs):
        mlp.train()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(mlp(x[train_ids]), y[train_ids]).backward()
        optimizer.step()
    mlp.eval()
    with torch.no_grad():
        return float((mlp(x[test_ids]).argmax(1) == y[test_ids]).float().mean())


def test_rgcn_learns_what_the_relations_say(tmp_path):
    """On synthetic-hetero-tiny a paper's class shows in its citations (shifted by one class
    either way) and its fields and authors, barely in its own features: RGCN beats an MLP on
    the features by a wide margin, and GraphSAGE over the graph with the relations ignored
    by a clear one. (Measured at these settings, width 32 and 50 epochs: RGCN 0.89,
    type-blind SAGE 0.62, MLP 0.26. The type-blind model closes much of the gap with
    more width on this small graph: 0.845 against 0.79 at width 64, 0.895 against 0.85
    after 100 epochs; on synthetic-hetero, 0.80 against 0.59 at width 64.)"""
    common = (TINY, "algorithm=single", "algorithm.mode=full", "model.hidden=32")
    epochs = ("train.epochs=50", "train.eval_every=50")
    rgcn, _ = train_run(tmp_path, "rgcn", *common, *epochs, "model=rgcn")
    blind, _ = train_run(tmp_path, "sage", *common, *epochs, "model=sage")
    cfg = prepared(*common, "model=rgcn")
    mlp = mlp_test_accuracy(cfg, hidden=32, epochs=50, lr=cfg.optimizer.lr)
    rgcn_acc, blind_acc = rgcn["final"]["test_acc"], blind["final"]["test_acc"]
    assert rgcn_acc > mlp + 0.3, (rgcn_acc, mlp)
    assert rgcn_acc > blind_acc + 0.1, (rgcn_acc, blind_acc)


def test_a_one_type_graph_trains_as_the_homogeneous_graph_bit_for_bit(tmp_path):
    """The same graph as one vertex type and one relation (both directions given) through
    the heterogeneous path, hetero SAGE without input projection, against the homogeneous
    path and SAGE: the same losses and accuracies, bit for bit."""
    rng = np.random.default_rng(0)
    n = 400
    src, dst = rng.integers(0, n, 2400), rng.integers(0, n, 2400)
    label = rng.integers(0, 4, n)
    feat = rng.normal(size=(n, 8)).astype(np.float32) + label[:, None]
    order = rng.permutation(n)
    split = {"train_idx": order[:200], "val_idx": order[200:300], "test_idx": order[300:]}
    np.savez(
        tmp_path / "plain.npz", edge_index=np.stack([src, dst]), feat=feat, label=label, **split
    )
    np.savez(
        tmp_path / "typed.npz",
        edge_index__v__e__v=np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]),
        feat__v=feat,
        label=label,
        target=np.array("v"),
        **split,
    )
    model = (
        "algorithm=single",
        "algorithm.mode=minibatch",
        "train.epochs=3",
        "train.eval_every=1",
        "model.hidden=16",
        "algorithm.fanouts=[5,3]",
        "algorithm.batch_size=64",
        "model.dropout=0.5",
        "model.aggregator=mean",
    )
    _, plain = train_run(
        tmp_path, "plain", "dataset=custom", f"dataset.path={tmp_path}/plain.npz",
        "dataset.name=plain", "model=sage", *model,
    )  # fmt: skip
    _, typed = train_run(
        tmp_path, "typed", "dataset=custom", f"dataset.path={tmp_path}/typed.npz",
        "dataset.name=typed", "dataset.to_undirected=false", "model=hetero_sage",
        "model.input_projection=false", *model,
    )  # fmt: skip
    assert trajectory(plain) == trajectory(typed)
    assert len(trajectory(plain)) == 3


def test_a_resumed_heterogeneous_run_continues_the_same_trajectory(tmp_path):
    """The sparse embeddings' optimiser state is in the checkpoint: 2 epochs, then a resume
    to 4, equal 4 epochs straight."""
    common = (
        TINY, "model=rgcn", "algorithm=single", "algorithm.mode=minibatch", "train.epochs=4",
        "train.eval_every=1", "model.hidden=16", "algorithm.batch_size=512",
    )  # fmt: skip
    _, straight = train_run(tmp_path, "straight", *common)
    _, first = train_run(tmp_path, "split", *common, "train.stop_after=2")
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    train(
        prepared(
            *common, "train.resume=true", f"train.checkpoint_dir={tmp_path}/checkpoints/split"
        ),
        resumed_dir,
    )
    assert trajectory(first) + trajectory(resumed_dir) == trajectory(straight)


def test_sampling_every_neighbour_gives_the_full_batch_logits():
    """With fanout -1 for every relation, a minibatch's blocks hold every in-edge of the
    seeds' neighbourhoods: RGCN's (and hetero SAGE's) logits for the seeds equal those of
    the full-batch pass over the whole graph."""
    from gnnrun.algorithms.minibatch.sources import LocalGraphSource, make_minibatch
    from gnnrun.algorithms.single import Single
    from gnnrun.comm import Communicator
    from gnnrun.models import build_model
    from gnnrun.timers import PhaseTimer

    for model in ("rgcn", "hetero_sage"):
        cfg = prepared(TINY, f"model={model}", "algorithm=single", "algorithm.fanouts=[-1,-1]")
        single = Single(cfg, Communicator(), PhaseTimer())
        torch.manual_seed(0)
        gnn = build_model(cfg.model, single.in_dim, single.num_classes, single.schema).eval()
        seeds = single.eval_ids["test"][:64]
        with torch.no_grad():
            full = single.full_logits(gnn)[seeds]
            source = LocalGraphSource(load_prepared(cfg.dataset))
            blocks, x = make_minibatch(source, seeds, [[-1] * 8, [-1] * 8], key=5)
            sampled = gnn(blocks, x)
        torch.testing.assert_close(sampled, full, rtol=1e-4, atol=1e-5)


def test_a_featureless_type_no_minibatch_reaches_trains_without_gradients(tmp_path):
    """Islands, linked only among themselves, are never sampled from papers: their
    embedding table gets no gradient at all, and training goes on."""
    rng = np.random.default_rng(0)
    papers, islands = 200, 30
    label = rng.integers(0, 3, papers)
    np.savez(
        tmp_path / "islands.npz",
        target=np.array("paper"),
        feat__paper=rng.normal(size=(papers, 6)) + label[:, None],
        label=label,
        num_nodes__island=np.array(islands),
        edge_index__paper__cites__paper=rng.integers(0, papers, (2, 600)),
        edge_index__island__links__island=rng.integers(0, islands, (2, 60)),
    )
    summary, run_dir = train_run(
        tmp_path, "islands", "dataset=custom", f"dataset.path={tmp_path}/islands.npz",
        "dataset.name=islands", "model=rgcn", "algorithm=single", "algorithm.mode=minibatch",
        "train.epochs=2", "algorithm.batch_size=50",
    )  # fmt: skip
    assert summary["epochs"] == 2 and len(trajectory(run_dir)) == 2
