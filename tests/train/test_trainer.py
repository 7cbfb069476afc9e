"""The trainer: resume continues the same trajectory, a NaN loss stops the run, Cora's number."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from gnnrun.cli import CONFIG_DIR, main
from gnnrun.config import to_objects
from gnnrun.data import prepare_dataset
from gnnrun.errors import GnnrunError
from gnnrun.ops.precision import bf16_matmul_supported
from gnnrun.schemas import register_schemas
from gnnrun.train.trainer import COLLAPSED, stopped_early, train

COMPARED = ("epoch", "lr", "loss", "val_acc", "test_acc")


def config(*overrides: str):
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = to_objects(compose("config", overrides=list(overrides)))
    prepare_dataset(cfg.dataset)
    return cfg


def trajectory(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.rank0.jsonl").read_text().splitlines()
    return [{k: json.loads(line)[k] for k in COMPARED} for line in lines]


# A schedule that changes the rate at every epoch, and clipping that acts at every step.
SCHEDULED = ("optimizer.schedule=cosine", "optimizer.warmup_epochs=2", "optimizer.clip_norm=0.05")


@pytest.mark.parametrize(
    ("mode", "precision", "optimizer"),
    [
        ("full", "fp32", ()),
        ("full", "fp32", SCHEDULED),
        ("minibatch", "fp32", ()),
        pytest.param(
            "minibatch",
            "bf16",
            (),
            marks=pytest.mark.skipif(
                not bf16_matmul_supported(), reason="this CPU has no bfloat16 instructions"
            ),
        ),
    ],
)
def test_resume_continues_the_same_trajectory(tmp_path, mode, precision, optimizer):
    common = [
        *optimizer,
        "dataset=synthetic-tiny",
        "algorithm=single",
        f"algorithm.mode={mode}",
        f"train.precision={precision}",
        "model=sage",
        "model.hidden=32",
        "algorithm.batch_size=256",
        "train.epochs=5",
    ]
    straight = tmp_path / "straight"
    resumed = tmp_path / "resumed"
    for d in (straight, resumed):
        d.mkdir()
    train(config(*common, f"train.checkpoint_dir={straight}/ckpt"), straight)
    train(config(*common, f"train.checkpoint_dir={resumed}/ckpt", "train.stop_after=2"), resumed)
    train(config(*common, f"train.checkpoint_dir={resumed}/ckpt", "train.resume=true"), resumed)
    assert trajectory(resumed) == trajectory(straight)
    assert json.loads((resumed / "summary.json").read_text())["epochs"] == 5
    if optimizer:  # the rate of each epoch, and every step clipped (the norm is far above)
        records = [json.loads(line) for line in (straight / "metrics.rank0.jsonl").open()]
        cosine = [0.003 * 0.5 * (1 + math.cos(math.pi * k / 3)) for k in range(3)]
        assert [r["lr"] for r in records] == pytest.approx([0.0015, 0.003, *cosine])
        assert all(r["clipped_steps"] == r["steps"] and r["grad_norm"] > 0.05 for r in records)


def resumed_trajectories(common: list[str], tmp_path, refused: tuple[str, ...] = ()) -> tuple:
    """(straight, stopped after 2 epochs then resumed) trajectories of one config.

    `refused`: overrides with which a resume is tried first and must be refused.
    """
    assert main([*common, "train.checkpoint_dir=ck-a", "hydra.run.dir=straight"]) == 0
    resumable = [*common, "train.checkpoint_dir=ck-b"]
    assert main([*resumable, "hydra.run.dir=first", "train.stop_after=2"]) == 0
    if refused:
        assert main([*resumable, *refused, "hydra.run.dir=refused", "train.resume=true"]) == 1
    assert main([*resumable, "hydra.run.dir=second", "train.resume=true"]) == 0
    return trajectory(tmp_path / "straight"), trajectory(tmp_path / "first") + trajectory(
        tmp_path / "second"
    )


@pytest.mark.parametrize(
    "algorithm",
    [
        # hec keys its samples as minibatch does and restores more: minibatch is in the slow suite.
        pytest.param(
            ["algorithm=minibatch", "model=sage", "algorithm.batch_size=128"],
            marks=pytest.mark.slow,
        ),
        # Pushes in flight at the checkpoint, and the caches, must be restored.
        ["algorithm=hec", "algorithm.delay_minibatches=2", "model=sage", "algorithm.batch_size=32"],
        # Minibatches built ahead for the epochs after the stop must not shift the resumed run's.
        pytest.param(
            ["algorithm=pipeline", "model=sage", "algorithm.batch_size=64"], marks=pytest.mark.slow
        ),
    ],
    ids=["minibatch", "hec", "pipeline"],
)
def test_distributed_resume_continues_the_same_trajectory(tmp_path, monkeypatch, algorithm):
    monkeypatch.chdir(tmp_path)
    common = ["train", "dataset=synthetic-tiny", *algorithm, "model.hidden=32", "train.epochs=4"]
    straight, resumed = resumed_trajectories([*common, "cluster.nprocs=2"], tmp_path)
    assert resumed == straight


@pytest.mark.slow  # hec's resume, with state in flight, runs by default
def test_cdr_resume_refuses_other_settings_and_continues_the_same_trajectory(
    tmp_path, monkeypatch, capfd
):
    """Delayed and binned: the exchanges in flight at the checkpoint are restored. They
    were shaped by delay, bins and backward, so a resume that changes one is refused,
    naming it, and loses nothing: the right resume afterwards continues the trajectory."""
    monkeypatch.chdir(tmp_path)
    common = [
        "train",
        "dataset=synthetic-tiny",
        "algorithm=cdr",
        "algorithm.delay_epochs=2",
        "algorithm.bins=2",
        "model=sage_gcn",
        "cluster.nprocs=2",
        "model.hidden=32",
        "train.epochs=4",
    ]
    straight, resumed = resumed_trajectories(common, tmp_path, refused=("algorithm.bins=1",))
    err = " ".join(capfd.readouterr().err.split())  # the ranks' output too
    assert "algorithm.bins=2 (now 1)" in err and "without train.resume" in err
    assert "training continues with the new values" not in err  # no warning, then refusal
    assert resumed == straight


def test_stopped_early_once_patience_evaluations_better_nothing():
    cfg = config("dataset=synthetic-tiny", "train.epochs=10", "train.patience=2")

    def history(*figures, collapsed=()):  # one evaluation per epoch; None: no figure
        return [
            {"epoch": e, "eval_bytes": {}}
            | ({"val_acc": f} if f is not None else {})
            | ({COLLAPSED: 1} if e in collapsed else {})
            for e, f in enumerate(figures)
        ]

    assert stopped_early(history(0.5, 0.6, 0.7), cfg) is None
    assert stopped_early(history(0.5, 0.7, 0.6), cfg) is None  # one evaluation since the best
    assert stopped_early(history(0.5, 0.7, 0.6, 0.7), cfg) == {
        "epoch": 3,
        "best_epoch": 1,
        "patience": 2,
    }  # a tie betters nothing
    assert stopped_early(history(0.5, 0.7, 0.6, 0.8), cfg) is None
    # A collapsed evaluation, or one without its figure (NaN), betters nothing.
    assert stopped_early(history(0.5, 0.9, 0.4, collapsed=(1,)), cfg)["best_epoch"] == 0
    assert stopped_early(history(0.5, None, None), cfg)["best_epoch"] == 0
    # Epochs without an evaluation do not count; no validation split: never stopped.
    spaced = [{"epoch": 0, "eval_bytes": {}, "val_acc": 0.5}] + [{"epoch": e} for e in (1, 2, 3)]
    assert stopped_early(spaced, cfg) is None
    assert stopped_early(history(None, None, None), cfg) is None
    assert stopped_early(history(*[0.5] * 10), cfg) is None  # every epoch ran: complete
    unlimited = config("dataset=synthetic-tiny", "train.epochs=10")
    assert stopped_early(history(0.5, 0.4, 0.3), unlimited) is None


def test_every_rank_stops_early_at_the_same_epoch_and_a_resume_trains_no_further(
    tmp_path, monkeypatch, capfd
):
    """Two ranks, patience 2: the run ends at the second evaluation in a row that betters
    nothing, checkpointed; a resume with the same patience trains nothing, one with more
    trains on. Under the plateau schedule rank 1 has rank 0's rates (torch's
    ReduceLROnPlateau's on the same figures) and its gradient norms: the ranks clip the
    gradients they have combined, not their own."""
    monkeypatch.chdir(tmp_path)
    common = [
        "train",
        "dataset=synthetic-tiny",
        "algorithm=minibatch",
        "cluster.nprocs=2",
        "model.hidden=16",
        "algorithm.batch_size=256",
        "train.epochs=30",
        "train.patience=2",
        "optimizer.schedule=plateau",
        "optimizer.plateau_patience=0",
        "optimizer.gamma=0.5",
        "optimizer.clip_norm=0.5",
        "train.checkpoint_dir=ck",
    ]
    assert main([*common, "hydra.run.dir=run"]) == 0
    capfd.readouterr()
    ranks = [
        [json.loads(line) for line in (tmp_path / "run" / f"metrics.rank{r}.jsonl").open()]
        for r in (0, 1)
    ]
    val = [r["val_acc"] for r in ranks[0]]
    # The first epoch that ends two evaluations in a row no better than every one before.
    worse = [e > 0 and val[e] <= max(val[:e]) for e in range(len(val))]
    last = next(e for e in range(1, len(val)) if worse[e] and worse[e - 1])
    assert len(ranks[0]) == len(ranks[1]) == last + 1 < 30
    parameter = torch.nn.Parameter(torch.zeros(1))
    reference = torch.optim.SGD([parameter], lr=0.003)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
        reference, mode="max", factor=0.5, patience=0, threshold=0.0
    )
    rates = []
    for figure in val:
        rates.append(reference.param_groups[0]["lr"])
        plateau.step(figure)
    assert [r["lr"] for r in ranks[0]] == pytest.approx(rates)
    assert rates[-1] < 0.003  # a plateau was met
    for key in ("lr", "grad_norm", "clipped_steps"):
        assert [r[key] for r in ranks[1]] == [r[key] for r in ranks[0]], key
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["complete"] and summary["epochs"] == last + 1
    assert summary["stopped_early"] == {
        "epoch": last,
        "best_epoch": val.index(max(val[: last - 1])),
        "patience": 2,
    }
    assert torch.load(tmp_path / "ck" / "checkpoint.pt", weights_only=True)["epoch"] == last + 1

    assert main([*common, "train.resume=true", "hydra.run.dir=again"]) == 0
    err = " ".join(capfd.readouterr().err.split())
    assert f"the checkpoint's run stopped early after epoch {last + 1}" in err
    assert "raise train.patience" in err
    assert not (tmp_path / "again" / "metrics.rank0.jsonl").exists()  # no epoch trained
    more = ["train.patience=0", "train.stop_after=1", "hydra.run.dir=more"]
    assert main([*common, "train.resume=true", *more]) == 0
    assert torch.load(tmp_path / "ck" / "checkpoint.pt", weights_only=True)["epoch"] == last + 2
    # The resumed epoch's rate: the plateaus of the checkpoint's evaluations.
    resumed = json.loads((tmp_path / "more" / "metrics.rank0.jsonl").read_text())
    assert resumed["lr"] == pytest.approx(reference.param_groups[0]["lr"])


def test_nan_loss_stops_with_a_clear_message(tmp_path):
    rng = np.random.default_rng(0)
    feat = rng.standard_normal((100, 4)).astype(np.float32)
    feat[3, 1] = np.nan
    np.savez(
        tmp_path / "g.npz",
        edges=rng.integers(0, 100, (400, 2)),
        feat=feat,
        label=rng.integers(0, 3, 100),
    )
    cfg = config(
        "dataset=custom",
        f"dataset.path={tmp_path / 'g.npz'}",
        "algorithm=single",
        "model=gcn",
        f"train.checkpoint_dir={tmp_path}/ckpt",
    )
    with pytest.raises(GnnrunError, match="training loss is nan at epoch 1;.*features for NaN"):
        train(cfg, tmp_path)
    assert not (tmp_path / "ckpt" / "checkpoint.pt").exists()


@pytest.mark.parametrize(
    ("task", "empty"),
    [
        (("dataset.split.val=0", "dataset.split.test=0"), "no validation and no test vertices"),
        (("task=link",), "no validation and no test edges"),  # one edge: none held out
    ],
    ids=["node", "link"],
)
def test_empty_validation_and_test_sets_are_said_not_evaluated(
    tmp_path, monkeypatch, capsys, task, empty
):
    """Training goes on without them, says so once at the start and in the summary, and
    no NaN figure or best epoch appears anywhere."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    one_edge = "link" in task[0]
    vertices = 2 if one_edge else 60
    np.savez(
        tmp_path / "g.npz",
        edges=np.array([[0, 1]]) if one_edge else rng.integers(0, vertices, (300, 2)),
        feat=rng.standard_normal((vertices, 4)),
        label=np.arange(vertices) % 2,
    )
    args = ["train", "dataset=custom", f"dataset.path={tmp_path / 'g.npz'}", "algorithm=single"]
    run_dir = tmp_path / "run"
    assert main([*args, *task, "train.epochs=2", f"hydra.run.dir={run_dir}"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if empty in line]
    assert len(warnings) == 1 and "not evaluated" in warnings[0]
    assert "nan" not in captured.out.lower() and "best" not in captured.out
    assert "not evaluated" in captured.out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best"] == {"epoch": None} and summary["final"] == {}
    assert summary["not_evaluated"] == ["val", "test"]
    assert "NaN" not in (run_dir / "metrics.rank0.jsonl").read_text()


def test_a_partition_for_another_world_size_is_refused(tmp_path, monkeypatch, capsys):
    """Before the dataset is partitioned (into parts the run could not use)."""
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            "train",
            "dataset=synthetic-tiny",
            "algorithm=minibatch",
            "cluster.nprocs=2",
            "partitioner.num_parts=3",
            "train.epochs=1",
        ]
    )
    assert code == 1
    assert (
        "partitioner.num_parts=3 but the run has 2 ranks: algorithm=minibatch trains one part "
        "per rank; leave partitioner.num_parts out (it follows cluster.nprocs), or use "
        "cluster.nprocs=3"
    ) in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "data" / "partitions").exists()


@pytest.mark.slow
def test_gcn_on_cora_reaches_kipf_and_welling(shared_datasets, tmp_path):
    """Published 81.5%; the bar here is at least 80.0% mean test accuracy over 5 seeds."""
    accuracies = []
    for seed in range(5):
        cfg = config(
            "dataset=cora",
            "model=gcn",
            "algorithm=single",
            "train.epochs=200",
            "train.eval_every=200",
            f"train.seed={seed}",
            f"train.checkpoint_dir={tmp_path}/{seed}",
        )
        run_dir = tmp_path / f"run{seed}"
        run_dir.mkdir()
        accuracies.append(train(cfg, run_dir)["final"]["test_acc"])
    print(f"Cora GCN test accuracy over 5 seeds: {np.mean(accuracies):.4f} ({accuracies})")
    assert np.mean(accuracies) >= 0.80


@pytest.mark.skipif(not bf16_matmul_supported(), reason="this CPU has no bfloat16 instructions")
@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_bf16_training_repeats_itself_and_learns(tmp_path, mode):
    common = [
        "dataset=synthetic-tiny",
        "algorithm=single",
        f"algorithm.mode={mode}",
        "model=sage",
        "model.hidden=32",
        "train.epochs=6",
        "train.precision=bf16",
    ]
    runs = []
    for name in ("first", "second"):
        run_dir = tmp_path / name
        run_dir.mkdir()
        train(config(*common, f"train.checkpoint_dir={run_dir}/ckpt"), run_dir)
        runs.append(trajectory(run_dir))
    assert runs[0] == runs[1]
    fp32_dir = tmp_path / "fp32"
    fp32_dir.mkdir()
    train(config(*common[:-1], f"train.checkpoint_dir={fp32_dir}/ckpt"), fp32_dir)
    bf16, fp32 = runs[0], trajectory(fp32_dir)
    assert bf16 != fp32  # it did train in bf16
    # ... along float32's path: the loss falls as far, epoch by epoch.
    for low, exact in zip(bf16, fp32, strict=True):
        assert abs(low["loss"] - exact["loss"]) <= 0.05 * exact["loss"], (bf16, fp32)
    assert bf16[-1]["loss"] < 0.8 * bf16[0]["loss"]


def test_a_reordered_dataset_trains_the_same_model(tmp_path):
    """Without dropout, full-batch training sees the same graph whatever the vertex order:
    the same losses and accuracies, epoch by epoch (float sums in another order aside)."""
    runs = {}
    for reorder in ("none", "metis"):
        run_dir = tmp_path / reorder
        run_dir.mkdir()
        cfg = config(
            "dataset=synthetic-tiny",
            f"dataset.reorder={reorder}",
            f"dataset.prepared_dir={tmp_path}/prepared-{reorder}",
            "algorithm=single",
            "algorithm.mode=full",
            "model=gcn",
            "model.dropout=0",
            "model.input_dropout=0",
            "train.epochs=4",
            f"train.checkpoint_dir={run_dir}/ckpt",
        )
        train(cfg, run_dir)
        runs[reorder] = trajectory(run_dir)
    for plain, moved in zip(runs["none"], runs["metis"], strict=True):
        assert moved["loss"] == pytest.approx(plain["loss"], rel=1e-5)
        assert moved["val_acc"] == plain["val_acc"] and moved["test_acc"] == plain["test_acc"]


def _history(val_accs: list[float | None], epoch_s: float = 2.0) -> list[dict]:
    return [
        {"epoch": e, "epoch_s": epoch_s, **({} if acc is None else {"val_acc": acc})}
        for e, acc in enumerate(val_accs)
    ]


def test_time_to_target_is_the_first_evaluation_within_one_percent():
    from gnnrun.train.trainer import time_to_target

    history = _history([0.5, None, 0.792, 0.80, 0.79])
    # Given: 0.792 >= 0.99 * 0.80 = 0.792 at epoch 3 (counted from 1), 3 epochs of 2 s.
    assert time_to_target(history, 0.80) == {
        "target": 0.80,
        "target_given": True,
        "epochs": 3,
        "seconds": 6.0,
    }
    # Not given: the run's best validation accuracy (0.80), the same epoch here.
    assert time_to_target(history, None)["epochs"] == 3
    assert time_to_target(_history([0.5, 0.6]), 0.9)["epochs"] is None
    assert time_to_target(_history([None, None]), 0.9) is None
