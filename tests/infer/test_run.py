"""`gnnrun predict` / `embed` against the single-process full-graph forward pass, on real ranks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnrun.data import load_prepared
from gnnrun.infer import read_output
from gnnrun.job import run_inference

sys.path.insert(0, str(Path(__file__).parent))
from trained_models import full_graph_layers  # noqa: E402

TINY = ("dataset=synthetic-tiny",)


@pytest.mark.parametrize(
    ("ranks", "model", "chunk"),
    [
        (1, "sage", 7),  # chunks far smaller than the graph
        (2, "gcn", 50),  # GCN reads the graph's out-degrees of remote vertices
        (2, "sage_gcn", 100_000),  # one chunk per rank
        pytest.param(4, "gat", 33, marks=pytest.mark.slow),  # 5 s
        # Every option around the layers: the input linear layer and the skip rows go
        # with the transform, jumping knowledge reads the earlier layers' files.
        (2, "gcn model.residual=true model.norm=batch model.input_mlp=true model.jk=cat", 50),
        # The pre-normalised block: the input linear layer is the transform, each block is
        # run whole on a chunk, the output normalisation and linear layer after the last
        # (in one process, layer by layer: tests/models/test_models.py).
        pytest.param(
            2, "sage model.block=pre_norm_ffn model.norm=layer", 50, marks=pytest.mark.slow
        ),
    ],
)
def test_predictions_equal_the_full_graph_forward_pass(trained, ranks, model, chunk):
    cfg, run_dir = trained(
        *TINY,
        *f"model={model}".split(),
        f"cluster.nprocs={ranks}",
        f"predict.chunk_vertices={chunk}",
    )
    summary = run_inference(cfg, "predict", run_dir)
    logits = full_graph_layers(cfg)[-1]
    written = read_output(summary["output_dir"])
    assert np.array_equal(written["ids"], np.arange(logits.shape[0]))
    expected = torch.softmax(logits, 1).numpy()
    np.testing.assert_allclose(written["prob"], expected, rtol=1e-5, atol=1e-6)
    # The class is the argmax of what was written, and the reference agrees away from ties.
    assert np.array_equal(written["class"], written["prob"].argmax(1))
    top2 = np.sort(expected, 1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4
    assert np.array_equal(written["class"][clear], logits.argmax(1).numpy()[clear])
    assert summary["ranks"] == ranks and summary["vertices"] == logits.shape[0]
    assert sum(r["rows"] for r in summary["per_rank"]) == logits.shape[0]


@pytest.mark.parametrize(
    ("ranks", "model"),
    [
        (1, "rgcn"),
        (2, "rgcn model.decomposition=basis"),  # halo rows and the partition's relations
        (2, "hetero_sage model.input_mlp=true model.residual=true"),
    ],
)
def test_heterogeneous_predictions_equal_the_full_graph_forward_pass(trained, ranks, model):
    """The encoder's typed input, the relations of every chunk's edges, and rows of the
    labelled type only, named by their id within it."""
    cfg, run_dir = trained(
        "dataset=synthetic-hetero-tiny",
        *f"model={model}".split(),
        f"cluster.nprocs={ranks}",
        "predict.chunk_vertices=300",
    )
    summary = run_inference(cfg, "predict", run_dir)
    schema = load_prepared(cfg.dataset).hetero
    first = int(schema.offsets[schema.target_type])
    count = schema.type_counts[schema.target_type]
    logits = full_graph_layers(cfg)[-1][first : first + count]
    written = read_output(summary["output_dir"])
    assert np.array_equal(written["ids"], np.arange(count))
    expected = torch.softmax(logits, 1).numpy()
    np.testing.assert_allclose(written["prob"], expected, rtol=1e-5, atol=1e-6)
    assert summary["vertices"] == count
    assert 0 < summary["metrics"]["test_acc"] < 1


def test_embeddings_of_another_vertex_type_equal_the_forward_pass(trained):
    """embed.node_type: the rows of a featureless type (learned embeddings at the input)."""
    cfg, run_dir = trained(
        "dataset=synthetic-hetero-tiny",
        "model=rgcn",
        "cluster.nprocs=2",
        "embed.layer=0",
        "embed.node_type=author",
        "predict.chunk_vertices=400",
    )
    summary = run_inference(cfg, "embed", run_dir)
    schema = load_prepared(cfg.dataset).hetero
    author = schema.type_index("author")
    first, count = int(schema.offsets[author]), schema.type_counts[author]
    expected = full_graph_layers(cfg)[0][first : first + count].numpy()
    written = read_output(summary["output_dir"])
    assert np.array_equal(written["ids"], np.arange(count))
    np.testing.assert_allclose(written["embedding"], expected, rtol=1e-5, atol=1e-5)
    assert summary["output_dir"].endswith("embed/synthetic-hetero-tiny-author-layer0")


def test_embeddings_equal_the_chosen_layer_of_the_forward_pass(trained):
    cfg, run_dir = trained(*TINY, "cluster.nprocs=2", "embed.layer=0", "predict.chunk_vertices=300")
    summary = run_inference(cfg, "embed", run_dir)
    expected = full_graph_layers(cfg)[0].numpy()  # the hidden layer, after its ReLU
    written = read_output(summary["output_dir"])
    np.testing.assert_allclose(written["embedding"], expected, rtol=1e-5, atol=1e-5)
    assert summary["layer"] == 0
    assert summary["output_dir"].endswith("embed/synthetic-tiny-layer0")


def test_a_directed_graph_uses_the_graphs_out_degrees(trained, tmp_path):
    """GCN normalises by each source's out-degree in the whole graph: on a directed graph a
    part sees only some of a halo vertex's out-edges, and the ranks must add them up."""
    rng = np.random.default_rng(0)
    n = 300
    src, dst = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    path = tmp_path / "directed.npz"
    np.savez(
        path,
        edge_index=np.stack([src, dst]),
        feat=rng.normal(size=(n, 12)),
        label=rng.integers(0, 4, n),
    )
    cfg, run_dir = trained(
        "dataset=custom",
        f"dataset.path={path}",
        "dataset.to_undirected=false",
        "model=gcn",
        "cluster.nprocs=2",
        "predict.chunk_vertices=40",
    )
    summary = run_inference(cfg, "predict", run_dir)
    expected = torch.softmax(full_graph_layers(cfg)[-1], 1).numpy()
    np.testing.assert_allclose(
        read_output(summary["output_dir"])["prob"], expected, rtol=1e-5, atol=1e-6
    )
