"""task=multilabel: the loss and metrics by hand, a GNN against a model without neighbours on
the synthetic multi-label graph, two ranks against one process, and predict against the
trainer's evaluation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn import metrics as sklearn_metrics

from gnnrun.cli import main
from gnnrun.comm import Communicator
from gnnrun.data import load_prepared
from gnnrun.infer import read_output
from gnnrun.tasks import TASKS, TaskConfig
from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parent))
import multilabel_checks  # noqa: E402

SMALL = ("dataset=synthetic-multilabel", "dataset.num_nodes=1000", "task=multilabel")


def _task():
    return TASKS.get("multilabel")(TaskConfig(name="multilabel"))


def test_the_loss_leaves_unknown_labels_out():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    labels = torch.tensor([[1, 0, -1], [-1, -1, -1]])
    per_vertex = _task().vertex_loss(logits, labels, reduction="none")
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expected = (
        bce(torch.tensor(2.0), torch.tensor(1.0)) + bce(torch.tensor(-1.0), torch.tensor(0.0))
    ) / 2
    assert per_vertex[0] == pytest.approx(float(expected)) and per_vertex[1] == 0
    assert _task().vertex_loss(logits, labels) == pytest.approx(float(per_vertex.mean()))


def test_micro_f1_and_mean_auc_are_sklearns_over_the_known_labels():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((60, 5)).astype(np.float32)
    labels = (rng.random((60, 5)) < 0.4).astype(np.int64)
    labels[rng.random((60, 5)) < 0.1] = -1
    labels[:, 4] = np.where(labels[:, 4] >= 0, 1, -1)  # one class only: left out of the AUC
    figures = _task().metrics(
        {"val": (torch.from_numpy(logits), torch.from_numpy(labels))}, Communicator()
    )
    known = labels >= 0
    f1 = sklearn_metrics.f1_score(labels[known], (logits > 0)[known].astype(np.int64))
    aucs = [
        sklearn_metrics.roc_auc_score(labels[known[:, j], j], logits[known[:, j], j])
        for j in range(4)
    ]
    assert figures["val_f1"] == pytest.approx(f1)
    assert figures["val_auc"] == pytest.approx(np.mean(aucs))


def test_node_classification_refuses_a_multi_label_dataset_and_the_reverse():
    from gnnrun.errors import GnnrunError

    cfg = multilabel_checks.prepared(*SMALL[:2], "algorithm=single")
    dataset = load_prepared(cfg.dataset)
    with pytest.raises(GnnrunError, match="task=multilabel"):
        TASKS.get("node")(TaskConfig(name="node")).check_dataset(dataset)
    tiny = multilabel_checks.prepared("dataset=synthetic-tiny", "algorithm=single")
    with pytest.raises(GnnrunError, match="one class per vertex"):
        _task().check_dataset(load_prepared(tiny.dataset))


@pytest.mark.slow
def test_a_gnn_beats_a_model_without_neighbours(tmp_path):
    """The synthetic labels follow the neighbours' communities: GraphSAGE, reading them,
    must beat the same model on the same features, labels and split without edges (an
    MLP of the same width) by a clear margin in micro-F1."""
    common = ("algorithm=single", "algorithm.mode=full", "model=sage", "model.hidden=32")
    gnn_cfg = multilabel_checks.prepared(*SMALL, *common)
    dataset = load_prepared(gnn_cfg.dataset)
    alone = tmp_path / "no-edges.npz"
    np.savez(
        alone,
        feat=np.asarray(dataset.feat),
        label=np.asarray(dataset.label),
        edge_index=np.zeros((2, 0), dtype=np.int64),
        train_idx=np.asarray(dataset.train_idx),
        val_idx=np.asarray(dataset.val_idx),
        test_idx=np.asarray(dataset.test_idx),
    )
    mlp_cfg = multilabel_checks.prepared(
        "dataset=custom", f"dataset.path={alone}", "dataset.name=no-edges", "task=multilabel",
        *common,
    )  # fmt: skip
    gnn = multilabel_checks.trained_figures(gnn_cfg, epochs=40)
    mlp = multilabel_checks.trained_figures(mlp_cfg, epochs=40)
    assert gnn["test_f1"] > mlp["test_f1"] + 0.04, (gnn, mlp)
    assert gnn["test_auc"] > mlp["test_auc"] + 0.1, (gnn, mlp)


@pytest.mark.slow
def test_two_ranks_build_one_process_minibatches_and_losses():
    cfg = multilabel_checks.prepared(
        *SMALL, "dataset.num_labels=12", "algorithm=minibatch", "cluster.nprocs=2",
        "algorithm.fanouts=[5,5]", "algorithm.batch_size=128",
    )  # fmt: skip
    results = run_on_ranks(multilabel_checks.minibatch_steps_against_one_process, 2, cfg)
    assert results[0]["steps"] == results[1]["steps"] >= 2
    assert all(np.isfinite(r["losses"]).all() for r in results)
    assert any(r["remote_inputs"] > 0 for r in results), "the test must involve remote vertices"


@pytest.mark.slow  # a run and a 2-rank predict: about a minute on 2 shared cores
def test_predicted_probabilities_give_the_trainers_evaluation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "outputs" / "train" / "run"
    train = ["train", *SMALL, "algorithm=single", "algorithm.mode=full", "train.epochs=3"]
    assert main([*train, "model.hidden=16", f"hydra.run.dir={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_metric"] == "val_f1" and summary["task"] == "multilabel"
    capsys.readouterr()
    assert main(["predict", f"run={run_dir}", "cluster.nprocs=2"]) == 0, capsys.readouterr().err
    output = read_output(run_dir / "predict" / "synthetic-multilabel")
    assert output["prob"].shape == (1000, 16) and output["prob"].dtype == np.float32
    dataset = load_prepared(multilabel_checks.prepared(*SMALL[:2], "algorithm=single").dataset)
    for split in ("val", "test"):
        ids = np.asarray(getattr(dataset, f"{split}_idx"))
        prob = output["prob"][np.searchsorted(output["ids"], dataset.source_ids(ids))]
        labels = np.asarray(dataset.label)[ids]
        known = labels >= 0
        f1 = sklearn_metrics.f1_score(labels[known], (prob > 0.5)[known].astype(np.int64))
        assert f1 == pytest.approx(summary["final"][f"{split}_f1"], abs=1e-9)
    manifest = json.loads(
        (run_dir / "predict" / "synthetic-multilabel" / "manifest.json").read_text()
    )
    assert manifest["columns"] == ["prob"]
    for key in ("val_f1", "val_auc", "test_f1", "test_auc"):
        assert manifest["metrics"][key] == pytest.approx(summary["final"][key], abs=1e-6)
