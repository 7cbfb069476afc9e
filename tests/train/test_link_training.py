"""Link prediction end to end: what a GNN learns beyond a scorer on the raw features,
distributed minibatch training against one process, and a resumed run's trajectory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnrun.algorithms.single import Single
from gnnrun.comm import Communicator
from gnnrun.launch.elastic import run_ranks
from gnnrun.models.link import DotScorer, LinkModel
from gnnrun.timers import PhaseTimer
from gnnrun.train.optimizer import build_optimizer
from gnnrun.train.trainer import train, train_epoch

sys.path.insert(0, str(Path(__file__).parents[1] / "algorithms"))
from conftest import prepared  # noqa: E402

# A width and settings at which both Cora and Facebook learn in a few seconds.
MODEL = ("model.hidden=64", "model.dropout=0")


def records(run_dir: Path, rank: int = 0) -> list[dict]:
    lines = (run_dir / f"metrics.rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def train_run(tmp_path: Path, name: str, *overrides: str) -> tuple[dict, Path]:
    run_dir = tmp_path / name
    run_dir.mkdir()
    cfg = prepared(*overrides, f"train.checkpoint_dir={tmp_path}/checkpoints/{name}")
    if cfg.algorithm.name == "single":
        return train(cfg, run_dir), run_dir
    return run_ranks(cfg, run_dir), run_dir


class FeatureMLP(torch.nn.Module):
    """Two layers on a vertex's own features: the graph is not read (the seeds, the last
    block's destinations, are the first input vertices)."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(in_dim, hidden), torch.nn.Linear(hidden, hidden)]
        )

    def forward(self, blocks, x, layer_input=None):
        x = x[: blocks[-1].num_dst]
        return self.layers[1](torch.relu(self.layers[0](x)))


def feature_scorer_metrics(cfg, epochs: int) -> dict[str, float]:
    """The test figures of a dot scorer on FeatureMLP embeddings, trained as the GNN (the
    same steps, loss, negatives and optimiser), evaluated on the same negatives."""
    single = Single(cfg, Communicator(), PhaseTimer())
    torch.manual_seed(cfg.train.seed)
    model = LinkModel(FeatureMLP(single.in_dim, cfg.model.hidden), DotScorer())
    optimizer = build_optimizer(model, cfg.optimizer)
    for epoch in range(epochs):
        train_epoch(single, model, optimizer, epoch)
    return single.task.metrics(single.evaluate(model), Communicator())


@pytest.mark.parametrize(
    ("dataset", "mode", "epochs"),
    [  # 9 s and more each: tests/algorithms/test_link.py trains link prediction by default
        pytest.param("cora", "full", 200, marks=pytest.mark.slow),
        pytest.param("facebook", "minibatch", 10, marks=pytest.mark.slow),
    ],
)
def test_sage_ranks_held_out_edges_far_better_than_a_scorer_on_the_features(
    tmp_path, shared_datasets, dataset, mode, epochs
):
    """The same settings for both: GraphSAGE ranks held-out edges clearly better than the
    feature scorer (measured, test MRR and Hits@10: Cora 0.098 and 0.227 against 0.043 and
    0.093; Facebook 0.201 and 0.494 against 0.137 and 0.337)."""
    common = (f"dataset={dataset}", "task=link", "algorithm=single", f"algorithm.mode={mode}")
    common += (*MODEL, "task.eval_negatives=1000")
    run = (f"train.epochs={epochs}", f"train.eval_every={epochs}", "model=sage")
    sage, _ = train_run(tmp_path, "sage", *common, *run)
    features = feature_scorer_metrics(prepared(*common, "model=sage"), epochs)
    print(f"{dataset}: sage {sage['final']}, features {features}")
    assert sage["final"]["test_mrr"] > 1.3 * features["test_mrr"], (sage["final"], features)
    assert sage["final"]["test_hits@10"] > features["test_hits@10"] + 0.1


@pytest.mark.slow  # three runs, 25 s: make test-slow
def test_minibatch_on_two_ranks_learns_as_one_process_within_seed_noise(tmp_path, shared_datasets):
    """`minibatch` on 2 ranks of 128 edges a step against `single` minibatch with the same
    global batch, 256 (each rank draws its own edges, so the runs differ): its test MRR lies
    within three times the spread of two seeds of the single run, or 0.02, of seed 0's."""
    common = ("dataset=cora", "task=link", "model=sage", *MODEL)
    common += ("train.epochs=12", "train.eval_every=12")
    single = [
        train_run(tmp_path, f"single{seed}", *common, "algorithm=single", "algorithm.batch_size=256",
                  "algorithm.mode=minibatch", f"train.seed={seed}")[0]["final"]["test_mrr"]
        for seed in (0, 1)
    ]  # fmt: skip
    two, _ = train_run(
        tmp_path,
        "two",
        *common,
        "algorithm=minibatch",
        "cluster.nprocs=2",
        "algorithm.batch_size=128",
    )
    mrr = two["final"]["test_mrr"]
    print(f"single seeds 0, 1: {single}; minibatch on 2 ranks: {mrr}")
    assert min(mrr, *single) > 0.03, (
        "all must learn (a random ranking among 1,000 negatives: 0.0075)"
    )
    assert abs(mrr - single[0]) <= max(3 * abs(single[1] - single[0]), 0.02), (single, mrr)


def test_a_resumed_link_run_continues_the_same_trajectory(tmp_path, shared_datasets):
    """2 epochs, then 2 more from the checkpoint, against 4 straight: the same losses and
    figures (the MLP scorer's weights and the optimiser's state are in the checkpoint)."""
    common = ("dataset=cora", "task=link", "model=sage", "algorithm=single", *MODEL)
    common += ("algorithm.mode=minibatch", "algorithm.batch_size=512", "task.scorer=mlp")
    common += ("train.epochs=4", "task.eval_negatives=100")

    def trajectory(run_dir: Path) -> list[tuple]:
        return [(r["loss"], r["val_mrr"], r["test_hits@10"]) for r in records(run_dir)]

    train_run(tmp_path, "straight", *common)
    checkpoints = f"train.checkpoint_dir={tmp_path}/checkpoints/resumed"
    first = tmp_path / "first"
    first.mkdir()
    train(prepared(*common, "train.stop_after=2", checkpoints), first)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    train(prepared(*common, "train.resume=true", checkpoints), resumed)
    assert trajectory(first) + trajectory(resumed) == trajectory(tmp_path / "straight")


@pytest.mark.slow  # 200 full-batch epochs of heterogeneous SAGE: make test-slow
def test_the_heterogeneous_path_learns_links_on_cora_as_one_type(tmp_path, shared_datasets):
    """Cora as one vertex type and one relation `e` (each pair once; its reverse `rev_e`
    added): `task.relation=e` holds out pairs with their reverse twins, and heterogeneous
    SAGE learns as the homogeneous path does (measured: test MRR 0.127 and Hits@10 0.256,
    against 0.098 and 0.227 homogeneous and 0.043 and 0.093 for the feature scorer)."""
    from gnnrun.data import load_prepared

    cora = load_prepared(prepared("dataset=cora", "algorithm=single").dataset)
    src = np.asarray(cora.indices)
    dst = np.repeat(np.arange(cora.num_nodes), np.diff(cora.indptr))
    once = src < dst
    np.savez(
        tmp_path / "typed.npz",
        edge_index__v__e__v=np.stack([src[once], dst[once]]),
        feat__v=np.asarray(cora.feat),
        label=np.asarray(cora.label),
        target=np.array("v"),
    )
    summary, _ = train_run(
        tmp_path, "typed", "dataset=custom", f"dataset.path={tmp_path}/typed.npz",
        "dataset.name=cora-typed", "model=hetero_sage", "model.input_projection=false",
        "task=link", "task.relation=e", "algorithm=single", "algorithm.mode=full", *MODEL,
        "train.epochs=200", "train.eval_every=200",
    )  # fmt: skip
    assert summary["final"]["test_mrr"] > 0.08 and summary["final"]["test_hits@10"] > 0.18


@pytest.mark.parametrize(("homophily", "low", "high"), [(1.0, 0.85, 1.0), (0.0, 0.45, 0.56)])
def test_rgcn_ranks_held_out_edges_of_a_relation_as_well_as_the_graph_allows(
    tmp_path, homophily, low, high
):
    """synthetic-hetero-tiny with `writes` the target relation and every other relation
    kept: featureless authors learn their class from the other papers they write, and
    RGCN ranks held-out `writes` edges well when an author writes papers of its class
    (measured: validation AUC 0.91), at chance when anyone's (0.50). Full batch trains on
    a graph holding its training edges, so a held-out edge whose `rev_writes` twin stayed
    in the graph would be found at homophily 0 too (measured with the twin kept: 0.74)."""
    summary, _ = train_run(
        tmp_path, "rgcn", "dataset=synthetic-hetero-tiny", f"dataset.author_homophily={homophily}",
        "dataset.feature_noise=0.3", "model=rgcn", "task=link", "task.relation=writes",
        "algorithm=single", "algorithm.mode=full", "train.epochs=10",
    )  # fmt: skip
    auc = summary["final"]["val_auc"]
    print(f"author_homophily={homophily}: validation AUC {auc:.4f}")
    assert low < auc < high, summary["final"]


@pytest.mark.slow  # 200 full-batch epochs, every vertex pair scored: 113 s on a shared CPU
def test_gae_on_cora_reaches_kipf_and_wellings_figures_within_a_point(tmp_path, shared_datasets):
    """`task=gae model=gae` (scripts/bench_published.py's gae-cora recipe), one
    split and seed: test ROC-AUC and AP within a point of the paper's mean, 91.0 and 92.0
    (measured: 91.16 and 91.41; the sampled loss's, 90.64 and 90.63)."""
    recipe = ("dataset=cora", "task=gae", "model=gae", "algorithm=single", "algorithm.mode=full")
    recipe += ("train.epochs=200", "train.eval_every=200")
    summary, _ = train_run(tmp_path, "gae", *recipe)
    final = summary["final"]
    print(final)
    assert final["test_auc"] > 0.90 and final["test_ap"] > 0.91, final
