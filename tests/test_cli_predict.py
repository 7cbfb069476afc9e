"""`gnnrun predict` / `gnnrun embed` from a run directory, as a user types them."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnrun.cli import main
from gnnrun.data import load_prepared
from gnnrun.infer import read_output
from gnnrun.infer.run import KILL_AFTER_LAYER_ENV

sys.path.insert(0, str(Path(__file__).parent / "infer"))
from trained_models import full_graph_layers, make_config  # noqa: E402


def _train(tmp_path: Path, capsys, *overrides: str) -> Path:
    run_dir = tmp_path / "outputs" / "train" / "run"
    args = ["train", "dataset=synthetic-tiny", "train.epochs=4", f"hydra.run.dir={run_dir}"]
    assert main([*args, *overrides]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return run_dir


def _errors(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def _accuracy(output: dict[str, np.ndarray], split: str, *dataset: str) -> float:
    """The accuracy on `split` recomputed from written predictions (sorted by id)."""
    data = load_prepared(make_config(*dataset).dataset)
    ids = np.asarray(getattr(data, f"{split}_idx"))
    source_ids = data.source_ids(ids)
    predicted = output["class"][np.searchsorted(output["ids"], source_ids)]
    return float(np.mean(predicted == np.asarray(data.label)[ids]))


@pytest.mark.parametrize(
    "training",
    [
        ("algorithm=single", "algorithm.mode=full", "cluster.nprocs=1"),
        pytest.param(  # on a vertex cut's clones; make test-slow
            ("algorithm=cd0", "model=sage_gcn", "cluster.nprocs=2"), marks=pytest.mark.slow
        ),
    ],
)
def test_predicted_accuracy_equals_the_trainers_exact_evaluation(
    tmp_path, monkeypatch, capsys, training
):
    monkeypatch.chdir(tmp_path)
    run_dir = _train(tmp_path, capsys, *training)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert main(["predict", f"run={run_dir}", "cluster.nprocs=2"]) == 0, _errors(capsys)
    printed = capsys.readouterr().out
    output = read_output(run_dir / "predict" / "synthetic-tiny")
    for split in ("val", "test"):
        trained = summary["final"][f"{split}_acc"]
        assert _accuracy(output, split, "dataset=synthetic-tiny") == pytest.approx(trained)
        assert f"{trained:.4f}" in printed
    manifest = json.loads((run_dir / "predict" / "synthetic-tiny" / "manifest.json").read_text())
    assert manifest["metrics"]["val_acc"] == pytest.approx(summary["final"]["val_acc"])
    assert manifest["epoch"] == 4 and manifest["ranks"] == 2 and manifest["vertices"] == 2000
    assert manifest["node_type"] is None  # homogeneous: every vertex


def test_the_best_model_kept_predicts_the_best_evaluations_figures(tmp_path, monkeypatch, capsys):
    """train.keep_best: best.pt holds the model of the best evaluation, which an early
    stop has left behind; predict.checkpoint=best predicts with it, the last one without."""
    monkeypatch.chdir(tmp_path)
    run_dir = _train(
        tmp_path,
        capsys,
        "algorithm=single",
        "algorithm.mode=full",
        "train.epochs=40",
        "train.patience=3",
        "train.keep_best=true",
        "optimizer.lr=0.05",  # a noisy climb: the best is not the last
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    best_epoch = summary["stopped_early"]["best_epoch"]
    assert summary["best"]["epoch"] == best_epoch < summary["epochs"] - 1
    assert summary["best"]["val_acc"] > summary["final"]["val_acc"]
    one = "cluster.nprocs=1"
    assert main(["predict", f"run={run_dir}", one, "predict.checkpoint=best"]) == 0
    capsys.readouterr()
    assert main(["predict", f"run={run_dir}", one]) == 0
    capsys.readouterr()
    for name, kind, epoch in (
        ("synthetic-tiny-best", "best", best_epoch + 1),
        ("synthetic-tiny", "final", summary["epochs"]),
    ):
        output = read_output(run_dir / "predict" / name)
        for split in ("val", "test"):
            trained = summary[kind][f"{split}_acc"]
            assert _accuracy(output, split, "dataset=synthetic-tiny") == pytest.approx(trained)
        manifest = json.loads((run_dir / "predict" / name / "manifest.json").read_text())
        assert manifest["epoch"] == epoch, name

    (run_dir / "best.pt").unlink()
    assert main(["embed", f"run={run_dir}", one, "predict.checkpoint=best"]) == 1
    assert "kept no best model (train it with train.keep_best=true;" in _errors(capsys)
    assert main(["predict", f"run={run_dir}", "predict.checkpoint=first"]) == 1
    assert "predict.checkpoint=first: choose last" in _errors(capsys)


def test_a_heterogeneous_run_predicts_its_labelled_type_as_it_evaluated(
    tmp_path, monkeypatch, capsys
):
    """The labelled type's rows, by their id within the type; the trainer's figures."""
    monkeypatch.chdir(tmp_path)
    hetero = ("dataset=synthetic-hetero-tiny", "model=rgcn")
    run_dir = _train(tmp_path, capsys, *hetero, "algorithm=single", "cluster.nprocs=1")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert main(["predict", f"run={run_dir}", "cluster.nprocs=2"]) == 0, _errors(capsys)
    output = read_output(run_dir / "predict" / "synthetic-hetero-tiny")
    data = load_prepared(make_config(*hetero).dataset)
    assert np.array_equal(output["ids"], np.arange(data.hetero.type_counts[0]))  # papers
    # The rows written are the papers', and the summary says so.
    printed = " ".join(capsys.readouterr().out.split())
    assert f"│ vertices (paper) │ {data.hetero.type_counts[0]:,} │" in printed, printed
    assert "│ vertices (paper) per second │" in printed
    manifest = json.loads(
        (run_dir / "predict" / "synthetic-hetero-tiny" / "manifest.json").read_text()
    )
    assert manifest["node_type"] == "paper"
    for split in ("val", "test"):
        ids = np.asarray(getattr(data, f"{split}_idx"))  # papers come first: ids in the type
        accuracy = np.mean(output["class"][ids] == np.asarray(data.label)[ids])
        assert accuracy == pytest.approx(summary["final"][f"{split}_acc"])
    assert main(["embed", f"run={run_dir}", "embed.layer=0", "cluster.nprocs=1"]) == 0
    embedded = read_output(run_dir / "embed" / "synthetic-hetero-tiny-layer0")
    hidden = make_config(*hetero).model.hidden
    assert embedded["embedding"].shape == (data.hetero.type_counts[0], hidden)
    refusals = [
        (
            ["embed", "embed.node_type=writer"],
            "embed.node_type=writer is not a vertex type of "
            "synthetic-hetero-tiny: choose one of paper, author, institution, field",
        ),
        (
            ["predict", "embed.node_type=author"],
            "embed.node_type=author: embed.* chooses what `gnnrun embed` writes",
        ),
    ]
    for (command, *overrides), message in refusals:
        assert main([command, f"run={run_dir}", *overrides]) == 1
        assert message in _errors(capsys)


def test_a_heterogeneous_link_run_scores_pairs_of_its_relation_as_its_model_does(
    tmp_path, monkeypatch, capsys
):
    """`task.relation=writes` (author -> paper) on 2 ranks: a pair is an author's id within
    its type and a paper's within its type; its score is the scorer's of their embeddings
    in the full-graph forward pass, and the shards hold the authors' embeddings."""
    import torch

    from gnnrun.infer.run import load_trained_model
    from gnnrun.tasks import load_for_task

    monkeypatch.chdir(tmp_path)
    link = ("dataset=synthetic-hetero-tiny", "model=rgcn", "task=link", "task.relation=writes")
    run_dir = _train(tmp_path, capsys, *link, "algorithm=single", "train.epochs=1")
    cfg = make_config(*link, "algorithm=single")
    dataset = load_for_task(cfg.dataset, cfg.task)
    schema = dataset.hetero
    author, paper = schema.type_index("author"), schema.type_index("paper")
    counts = schema.type_counts
    rng = np.random.default_rng(0)
    pairs = np.stack([rng.integers(0, counts[author], 50), rng.integers(0, counts[paper], 50)])
    pairs[:, 0] = counts[author] - 1, counts[paper] - 1  # the last id of each end's type
    np.save(tmp_path / "pairs.npy", pairs)
    predict = ["predict", f"run={run_dir}", "predict.candidates=pairs.npy", "cluster.nprocs=2"]
    assert main(predict) == 0, _errors(capsys)
    output = run_dir / "predict" / "synthetic-hetero-tiny"
    np.testing.assert_array_equal(np.load(output / "candidates.npy"), pairs)

    h = full_graph_layers(cfg)[-1]
    checkpoint = Path(cfg.train.checkpoint_dir) / "checkpoint.pt"
    scorer = load_trained_model(cfg, checkpoint, dataset.feat_dim, h.shape[1], schema).scorer
    u = torch.from_numpy(pairs[0] + schema.offsets[author])
    v = torch.from_numpy(pairs[1] + schema.offsets[paper])
    with torch.no_grad():
        expected = scorer(h[u], h[v]).numpy()
    np.testing.assert_allclose(np.load(output / "scores.npy"), expected, rtol=1e-4, atol=1e-5)
    written = read_output(output)
    assert np.array_equal(written["ids"], np.arange(counts[author]))
    first = int(schema.offsets[author])
    np.testing.assert_allclose(
        written["embedding"], h[first : first + counts[author]].numpy(), rtol=1e-5, atol=1e-5
    )

    np.save(tmp_path / "swapped.npy", pairs[::-1].copy())  # a paper id past the authors'
    assert main([*predict[:2], "predict.candidates=swapped.npy", "predict.output_dir=x"]) == 1
    assert (
        f"names a destination outside [0, {counts[paper]}): a pair's ids are its source's "
        "within type author and its destination's within type paper" in _errors(capsys)
    )
    np.save(tmp_path / "none.npy", np.zeros((2, 0), dtype=np.int64))
    assert main([*predict[:2], "predict.candidates=none.npy", "predict.output_dir=x"]) == 1
    assert "none.npy holds no pairs" in _errors(capsys)
    embed = ["embed", f"run={run_dir}", "embed.node_type=paper", "cluster.nprocs=1"]
    assert main(embed) == 0, _errors(capsys)


def test_ids_are_the_sources_and_another_graph_takes_the_same_model(tmp_path, monkeypatch, capsys):
    """A model trained on a renumbered graph predicts, by original id, what it predicts on
    the graph in its source order (a dataset given at prediction time)."""
    monkeypatch.chdir(tmp_path)
    run_dir = _train(
        tmp_path, capsys, "algorithm=single", "algorithm.mode=full", "dataset.reorder=degree"
    )
    assert main(["predict", f"run={run_dir}", "cluster.nprocs=2"]) == 0, _errors(capsys)
    reordered = load_prepared(
        make_config("dataset=synthetic-tiny", "dataset.reorder=degree").dataset
    )
    assert not np.array_equal(reordered.input_ids, np.arange(2000))  # renumbered indeed
    args = ["predict", f"run={run_dir}", "cluster.nprocs=1", "dataset.reorder=none"]
    assert main([*args, "predict.output_dir=source_order"]) == 0, _errors(capsys)
    renumbered = read_output(run_dir / "predict" / "synthetic-tiny")
    source = read_output(tmp_path / "source_order")
    assert np.array_equal(renumbered["ids"], np.arange(2000))
    assert np.array_equal(source["ids"], renumbered["ids"])
    np.testing.assert_allclose(renumbered["prob"], source["prob"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # make test-slow (the default suite keeps under 10 minutes)
def test_an_interrupted_run_resumes_at_the_next_layer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = _train(tmp_path, capsys, "algorithm=single", "algorithm.mode=full")
    predict = ["predict", f"run={run_dir}", "cluster.nprocs=2", "predict.chunk_vertices=128"]
    output = run_dir / "predict" / "synthetic-tiny"
    monkeypatch.setenv(KILL_AFTER_LAYER_ENV, "1:1")  # rank 1 dies once layer 1 is written
    assert main(predict) == 1
    assert "rank 1 failed: killed by signal 9" in _errors(capsys)
    assert not output.exists()  # nothing that looks finished
    work = output.with_name("synthetic-tiny.partial")
    layer1 = sorted(work.glob("h1.rank*.npy"))
    assert len(layer1) == 2 and not list(work.glob("h2.rank*.npy"))

    monkeypatch.delenv(KILL_AFTER_LAYER_ENV)
    assert main(predict) == 0
    assert "resuming at layer 2: layers 1-1 were computed by an interrupted run" in _errors(capsys)
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["layers_reused"] == 1 and not work.exists()
    assert main([*predict, "predict.output_dir=uninterrupted"]) == 0
    resumed, whole = read_output(output), read_output(tmp_path / "uninterrupted")
    assert all(np.array_equal(resumed[k], whole[k]) for k in ("ids", "class", "prob"))


def test_embed_writes_the_chosen_layer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = _train(tmp_path, capsys, "algorithm=single", "cluster.nprocs=1")
    args = ["embed", f"run={run_dir}", "embed.layer=-2", "cluster.nprocs=1"]  # 2: tests/infer
    assert main(args) == 0, _errors(capsys)
    output = read_output(run_dir / "embed" / "synthetic-tiny-layer0")
    assert output["embedding"].shape == (2000, 256) and output["embedding"].dtype == np.float32
    assert (output["embedding"] >= 0).all()  # after the hidden layer's ReLU
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    table = pandas.read_parquet(run_dir / "embed" / "synthetic-tiny-layer0" / "parquet")
    assert list(table.columns) == ["id", "embedding"] and len(table) == 2000
    row = table.set_index("id").loc[7, "embedding"]
    np.testing.assert_array_equal(row, output["embedding"][7])


def test_bad_input_gets_a_message_that_names_the_problem(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = _train(tmp_path, capsys, "algorithm=single", "algorithm.mode=full")
    run = f"run={run_dir}"
    wrong_features = tmp_path / "wide.npz"
    rng = np.random.default_rng(0)
    np.savez(
        wrong_features,
        edges=rng.integers(0, 50, (200, 2)),
        feat=rng.normal(size=(50, 7)),
        label=rng.integers(0, 3, 50),
    )
    cases = [
        (["predict"], "usage: gnnrun predict run=RUN_DIR"),
        (["predict", str(run_dir)], f"lists the settings); did you mean run={run_dir}?"),
        (["predict", f"rnu={run_dir}"], f"lists the settings); did you mean run={run_dir}?"),
        (["predict", "run=nowhere"], "run=nowhere: no such directory"),
        (["predict", f"run={wrong_features}"], "wide.npz: a file, not a directory"),
        (["predict", run, "embed.layer=0"], "embed.layer=0: embed.* chooses what `gnnrun embed`"),
        (["predict", f"run={tmp_path}"], "is not the directory of a `gnnrun train` run"),
        (
            ["embed", run, "embed.layer=2"],
            "embed.layer=2: the model has 2 layers, choose one of -2..1",
        ),
        (
            ["predict", run, "model.hidden=64"],
            "was trained with model.hidden=256, not model.hidden=64",
        ),
        (["predict", run, "task=link"], "was trained with task=node, not task=link"),
        (["predict", run, "predict.chunk_vertices=0"], "predict.chunk_vertices must be at least 1"),
        (["predict", run, "predict.chunk_vertcies=5"], "Did you mean 'predict.chunk_vertices'?"),
        (
            ["predict", run, "dataset=custom", f"dataset.path={wrong_features}"],
            "takes 32 input features, but dataset 'custom' has 7",
        ),
        (["predict", run, "-m"], "gnnrun predict takes one run"),
        (
            ["predict", run, "partitioner=libra"],
            "partitioner=libra makes vertex_cut partitions but gnnrun predict runs on edge_cut",
        ),
        (
            ["embed", run, "embed.node_type=paper"],
            "embed.node_type=paper is set but synthetic-tiny is homogeneous",
        ),
        (
            ["predict", run, "cluster=slurm"],
            "gnnrun predict run=RUN_DIR cluster=slurm runs as the tasks of a job step",
        ),
        (["embed", run, "cluster=slurm"], "(or give cluster=local to run on this machine)"),
        (["predict", run, "cluster=hosts"], "cluster=hosts runs the same gnnrun command on every"),
    ]
    for args, message in cases:
        assert main(args) != 0, args
        assert message in _errors(capsys), args
    # A setting the checkpoint refuses is refused before its dataset is prepared.
    assert sorted(p.name for p in (tmp_path / "data" / "prepared").glob("[!.]*")) == [
        "custom",
        "synthetic-tiny",
    ]
    assert main(["embed", "--help"]) == 0
    assert "embed.layer" in capsys.readouterr().out

    assert main(["predict", run, "cluster.nprocs=1"]) == 0
    capsys.readouterr()
    # Another algorithm's partitioner (cd0: Libra's vertex cut) is not inference's.
    assert main(["predict", run, "algorithm=cd0", "predict.output_dir=cd0"]) == 0, _errors(capsys)
    partitions = tmp_path / "data" / "partitions" / "synthetic-tiny"
    assert sorted(p.name for p in partitions.glob("[!.]*")) == ["metis-2"]
    assert main(["predict", run, "cluster.nprocs=1"]) == 1
    assert "already holds a finished output: move it away" in _errors(capsys)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["predict", run, "cluster.nprocs=1", "predict.output_dir=taken"]) == 1
    assert "taken exists and is not an empty directory" in _errors(capsys)
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"

    later = ["train", "dataset=synthetic-tiny", "algorithm=single", "algorithm.mode=full"]
    assert main([*later, "train.epochs=2", f"hydra.run.dir={tmp_path / 'later'}"]) == 0
    capsys.readouterr()  # the later run has replaced the shared checkpoint, not run_dir's
    one = "cluster.nprocs=1"  # what follows checks the checkpoint read, not the ranks
    assert main(["predict", run, one, "predict.output_dir=again"]) == 0, _errors(capsys)
    assert "(epoch 4)" in capsys.readouterr().out
    assert main(["predict", f"run={tmp_path / 'later'}", one, "predict.output_dir=again1"]) == 0
    assert "(epoch 2)" in capsys.readouterr().out

    kept = run_dir / "checkpoint.pt"
    kept.write_bytes(kept.read_bytes()[:1000])  # cut short
    assert main(["predict", run, "predict.output_dir=again2"]) == 1
    refused = _errors(capsys)
    assert f"{kept} cannot be read as a checkpoint" in refused
    assert "Give an intact checkpoint of this run's model with train.checkpoint_dir=DIR" in refused
    assert "afresh" not in refused  # training's advice
    kept.unlink()  # the shared one is the later run's
    assert main(["predict", run, "predict.output_dir=again2"]) == 1
    assert "was written by another run than the one in" in _errors(capsys)
    shared = (
        Path(
            make_config(
                "dataset=synthetic-tiny", "algorithm=single", "algorithm.mode=full"
            ).train.checkpoint_dir
        )
        / "checkpoint.pt"
    )
    shared.unlink()
    assert main(["predict", run, "predict.output_dir=again2"]) == 1
    assert f"no checkpoint at {shared}" in _errors(capsys)
    assert not (tmp_path / "again2").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "training",
    [
        ("algorithm=minibatch", "model=gcn"),
        ("algorithm=hec",),
        ("algorithm=cdr", "model=sage_gcn"),
        ("algorithm=zero_comm", "model=sage_gcn"),
        ("algorithm=sar", "model=gat"),
        ("algorithm=domain_parallel",),
        ("algorithm=spmm1d", "model=gcn"),
        ("algorithm=pipeline",),
    ],
    ids=lambda t: t[0].split("=")[1],
)
def test_every_algorithms_checkpoint_predicts(tmp_path, monkeypatch, capsys, training):
    """Whatever trained the model, inference runs it on the graph; the algorithms that
    evaluate exactly (full batch, DistGNN's completed aggregates) agree with it."""
    monkeypatch.chdir(tmp_path)
    run_dir = _train(tmp_path, capsys, *training, "cluster.nprocs=2")
    assert main(["predict", f"run={run_dir}", "cluster.nprocs=2"]) == 0, _errors(capsys)
    output = read_output(run_dir / "predict" / "synthetic-tiny")
    assert output["prob"].shape == (2000, 8)
    summary = json.loads((run_dir / "summary.json").read_text())
    exact = ("cdr", "zero_comm", "sar", "domain_parallel", "spmm1d")
    if training[0].removeprefix("algorithm=") in exact:  # evaluated on the whole graph
        trained = summary["final"]["val_acc"]
        assert _accuracy(output, "val", "dataset=synthetic-tiny") == pytest.approx(trained)


@pytest.mark.slow  # 10 s: trains link prediction first
def test_a_link_runs_predict_scores_the_given_pairs_as_its_model_does(
    tmp_path, monkeypatch, capsys
):
    """`gnnrun predict run=... predict.candidates=pairs.npy` of a task=link run, on 2 ranks:
    scores.npy holds the scorer's logits of the full-neighbourhood embeddings of both ends
    over the message-passing graph (recomputed here in one process), in the pairs' order;
    the mistakes a user makes with the file are named."""
    import torch

    from gnnrun.models import build_model
    from gnnrun.ops.block import Block
    from gnnrun.tasks import load_for_task
    from gnnrun.train.checkpoint import load_checkpoint

    monkeypatch.chdir(tmp_path)
    link = ("task=link", "algorithm=single", "task.scorer=mlp", "task.eval_negatives=50")
    run_dir = _train(tmp_path, capsys, *link)
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 2000, (40, 2))  # (P, 2): taken as well as (2, P)
    np.save(tmp_path / "pairs.npy", pairs)
    assert (
        main(["predict", f"run={run_dir}", "predict.candidates=pairs.npy", "cluster.nprocs=2"]) == 0
    ), _errors(capsys)
    assert "vertex pairs scored" in capsys.readouterr().out
    output = run_dir / "predict" / "synthetic-tiny"
    scores = np.load(output / "scores.npy")
    np.testing.assert_array_equal(np.load(output / "candidates.npy"), pairs.T)

    cfg = make_config("dataset=synthetic-tiny", *link)
    dataset = load_for_task(cfg.dataset, cfg.task)
    state = load_checkpoint(Path(cfg.train.checkpoint_dir))
    model = build_model(cfg.model, dataset.feat_dim, cfg.model.hidden, scorer="mlp")
    model.load_state_dict(state["model"])
    model.eval()
    graph = Block.from_csr(dataset.indptr, dataset.indices, symmetric=True)
    with torch.no_grad():
        h = model([graph] * cfg.model.layers, torch.from_numpy(np.array(dataset.feat)))
        expected = model.score(h[pairs[:, 0]], h[pairs[:, 1]]).numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)

    predict = ["predict", f"run={run_dir}", "cluster.nprocs=1", "predict.output_dir=again"]
    assert main(predict) == 1
    assert "give the vertex pairs to score with predict.candidates=PAIRS.npy" in _errors(capsys)
    for name, array, message in (
        ("floats.npy", pairs.astype(np.float32), "holds float32"),
        ("flat.npy", pairs.reshape(-1), "has shape (80,)"),
        ("outside.npy", np.array([[0, 1], [5, 2000]]), "names a vertex outside [0, 2000)"),
        ("negative.npy", np.array([[0, -3], [1, 2]]), "pair 1 of negative.npy, [-3, 2], names a "),
    ):
        np.save(tmp_path / name, array)
        assert main([*predict, f"predict.candidates={name}"]) == 1
        assert message in _errors(capsys), name
    assert main([*predict, "predict.candidates=missing.npy"]) == 1
    assert "missing.npy does not exist" in _errors(capsys)
    # The file is named before the finished output that the default directory holds.
    assert main(["predict", f"run={run_dir}", "predict.candidates=floats.npy"]) == 1
    assert "holds float32" in _errors(capsys)
    (tmp_path / "pairs.csv").write_text("0,5\n1,6\n")
    assert main([*predict, "predict.candidates=pairs.csv"]) == 1
    assert "pairs.csv is not a .npy file (numpy.save writes one)" in _errors(capsys)
    # Refused before any layer is computed: nothing half-written is left behind.
    assert not list(tmp_path.glob("again*")), list(tmp_path.glob("again*"))
    np.save(tmp_path / "square.npy", np.array([[0, 1], [5, 6]]))
    assert main([*predict, "predict.candidates=square.npy"]) == 0, _errors(capsys)
    assert "read as (2, P): pairs (0, 5) and (1, 6)" in capsys.readouterr().err
    node_run = tmp_path / "node"
    node = ["train", "dataset=synthetic-tiny", "algorithm=single", "train.epochs=1"]
    assert main([*node, f"hydra.run.dir={node_run}"]) == 0
    capsys.readouterr()
    assert main(["predict", f"run={node_run}", "predict.candidates=pairs.npy"]) == 1
    assert "predict.candidates scores vertex pairs with a task=link run's model" in _errors(capsys)


def test_a_run_predicts_with_its_own_model_after_another_run_resumed_from_it(
    tmp_path, monkeypatch, capsys
):
    """A run resumed from R's checkpoint replaces the shared checkpoint with its epoch 3:
    `gnnrun predict run=R` still uses R's model (epoch 2), which R kept in its directory;
    without that copy (a run of an earlier gnnrun) it is refused, not mixed up."""
    monkeypatch.chdir(tmp_path)
    settings = ["algorithm=single", "algorithm.mode=full", "cluster.nprocs=1"]
    first = _train(tmp_path, capsys, *settings, "train.epochs=2")
    resumed = tmp_path / "resumed"
    args = ["train", "dataset=synthetic-tiny", *settings, "train.resume=true", "train.epochs=3"]
    assert main([*args, f"hydra.run.dir={resumed}"]) == 0, _errors(capsys)
    capsys.readouterr()

    assert main(["predict", f"run={first}", "cluster.nprocs=1"]) == 0, _errors(capsys)
    assert "(epoch 2)" in capsys.readouterr().out
    manifest = json.loads((first / "predict" / "synthetic-tiny" / "manifest.json").read_text())
    assert manifest["epoch"] == 2 and manifest["checkpoint"] == str(first / "checkpoint.pt")
    assert main(["predict", f"run={resumed}", "cluster.nprocs=1"]) == 0, _errors(capsys)
    assert "(epoch 3)" in capsys.readouterr().out

    (first / "checkpoint.pt").unlink()  # as a run of an earlier gnnrun left it
    assert main(["predict", f"run={first}", "predict.output_dir=again"]) == 1
    assert "was written by another run than the one in" in _errors(capsys)
    assert not (tmp_path / "again").exists()

    # A run stopped (or refused) before its first epoch: its directory holds its config
    # only, and the shared checkpoint is another run's model.
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    shutil.copytree(first / ".hydra", stopped / ".hydra")
    assert main(["predict", f"run={stopped}", "predict.output_dir=again"]) == 1
    refused = _errors(capsys)
    assert f"{stopped} holds no trained epoch" in refused and "another run's" in refused
    assert not (tmp_path / "again").exists()
    given = f"train.checkpoint_dir={resumed}"  # a checkpoint named on purpose is used
    assert main(["predict", f"run={stopped}", given, "predict.output_dir=again"]) == 0
    assert "(epoch 3)" in capsys.readouterr().out


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "before-the-record"])
def test_predict_from_another_directory_uses_the_runs_data_root(
    tmp_path, monkeypatch, capsys, recorded
):
    """`gnnrun predict run=/abs/run` started elsewhere reads the run's own prepared dataset
    and checkpoint (its data root, relative to where it was trained), prepares nothing."""
    monkeypatch.delenv("GNNRUN_DATA_ROOT")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    run = _train(tmp_path, capsys, "algorithm=single", "cluster.nprocs=1", "train.epochs=2")
    (run / "checkpoint.pt").unlink()  # the shared one in the run's data root is the run's
    if not recorded:  # a run of an earlier gnnrun: its data root from where it started
        (run / ".hydra" / "paths.yaml").unlink()
    monkeypatch.chdir(tmp_path / "b")
    assert main(["predict", f"run={run}", "cluster.nprocs=1"]) == 0, _errors(capsys)
    assert "preparing" not in capsys.readouterr().err
    assert list((tmp_path / "b").iterdir()) == []  # no data/ prepared anew here
    manifest = json.loads((run / "predict" / "synthetic-tiny" / "manifest.json").read_text())
    assert manifest["checkpoint"].startswith(str(tmp_path / "a" / "data" / "checkpoints"))


def test_predict_under_another_data_root_uses_the_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GNNRUN_DATA_ROOT", str(tmp_path / "first"))
    monkeypatch.chdir(tmp_path)
    run = _train(tmp_path, capsys, "algorithm=single", "cluster.nprocs=1", "train.epochs=2")
    (run / "checkpoint.pt").unlink()
    monkeypatch.setenv("GNNRUN_DATA_ROOT", str(tmp_path / "other"))
    assert main(["predict", f"run={run}", "cluster.nprocs=1"]) == 0, _errors(capsys)
    assert not (tmp_path / "other").exists()
    capsys.readouterr()
    # paths given now still win: there, the dataset is prepared and the checkpoint looked for.
    given = f"paths.data_root={tmp_path / 'given'}"
    args = ["predict", f"run={run}", "cluster.nprocs=1", given, "predict.output_dir=out"]
    assert main(args) == 1
    err = _errors(capsys)
    assert f"no checkpoint at {tmp_path / 'given' / 'checkpoints'}" in err
