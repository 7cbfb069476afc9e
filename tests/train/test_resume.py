"""`train.resume=true` with settings other than the checkpoint's: refused, applied or announced."""

from __future__ import annotations

import json

import pytest
import torch

from gnnrun.cli import main
from gnnrun.train.resume import SettingChanges, change_messages, compare_settings

BASE = ["train", "dataset=synthetic-tiny", "algorithm=single", "train.epochs=4"]


@pytest.fixture
def stopped_run(tmp_path, monkeypatch, capsys):
    """A run of `BASE` stopped after 2 of its 4 epochs: its checkpoint directory."""
    monkeypatch.chdir(tmp_path)
    checkpoint_dir = tmp_path / "ckpt"
    base = [*BASE, f"train.checkpoint_dir={checkpoint_dir}"]
    assert main([*base, "train.stop_after=2"]) == 0
    capsys.readouterr()
    return base, checkpoint_dir


def resume(capsys, base: list[str], *overrides: str) -> tuple[int, str]:
    code = main([*base, "train.resume=true", *overrides])
    return code, " ".join(capsys.readouterr().err.split())


def test_a_new_learning_rate_is_applied_and_announced(stopped_run, capsys):
    base, checkpoint_dir = stopped_run
    code, err = resume(capsys, base, "optimizer.lr=0.5", "train.stop_after=1")
    assert code == 0, err
    assert "resuming after epoch 2 with optimizer.lr=0.5 (the checkpoint had 0.003)" in err
    state = torch.load(checkpoint_dir / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 3
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == [0.5]


@pytest.mark.parametrize(
    ("override", "saved"),
    [("model.hidden=64", "model.hidden=256"), ("model=gat", "model.name=sage")],
)
def test_another_model_shape_is_refused_naming_the_checkpoints_values(
    stopped_run, capsys, override, saved
):
    base, checkpoint_dir = stopped_run
    code, err = resume(capsys, [*base, override])
    assert code == 1
    assert f"cannot resume from {checkpoint_dir}: its model was trained with" in err
    assert saved in err.split("this run asks")[0]
    assert torch.load(checkpoint_dir / "checkpoint.pt", weights_only=True)["epoch"] == 2


@pytest.mark.parametrize("override", ["task.val_fraction=0.1", "task.split_seed=1"])
def test_a_link_run_with_other_held_out_edges_is_refused(tmp_path, monkeypatch, capsys, override):
    """Under another edge split, the model has trained on edges the run would evaluate on."""
    monkeypatch.chdir(tmp_path)
    base = [*BASE, "task=link", f"train.checkpoint_dir={tmp_path / 'ckpt'}"]
    assert main([*base, "train.stop_after=1"]) == 0
    capsys.readouterr()
    code, err = resume(capsys, [*base, override])
    assert code == 1
    assert "cannot resume from" in err
    assert override.split("=")[0] in err
    assert "MB sent" not in err  # refused before the table of epochs starts
    # Evaluating against other negatives trains on, saying the figures do not compare.
    code, err = resume(capsys, [*base, "task.eval_negatives=50", "train.stop_after=1"])
    assert code == 0, err
    assert "task.eval_negatives=50 (checkpoint: 1000): training is unchanged" in err
    assert err.index("training is unchanged") < err.index("MB sent")  # the notes, then epochs


def test_a_resume_with_nothing_left_to_train_says_so(stopped_run, capsys):
    base, _ = stopped_run
    code, err = resume(capsys, base, "train.epochs=2")
    assert code == 0, err
    assert "the checkpoint is after epoch 2, at or past train.epochs=2: nothing is left" in err


def test_other_training_settings_are_used_with_a_warning(stopped_run, capsys):
    base, _ = stopped_run
    code, err = resume(capsys, base, "algorithm.fanouts=[5,5]", "model.dropout=0.1")
    assert code == 0, err
    assert "model.dropout=0.1 (checkpoint: 0.5)" in err
    assert "algorithm.fanouts=[5, 5] (checkpoint: [10, 25])" in err
    assert "follows neither" in err


def test_the_same_settings_resume_without_a_word(stopped_run, capsys):
    base, _ = stopped_run
    code, err = resume(capsys, base)
    assert code == 0 and "resuming after" not in err


def test_no_checkpoint_says_so_and_names_the_ones_there_are(stopped_run, capsys, tmp_path):
    base, checkpoint_dir = stopped_run
    other = checkpoint_dir.parent / "elsewhere"
    code, err = resume(capsys, base, f"train.checkpoint_dir={other}", "train.epochs=1")
    assert code == 0, err
    assert f"no checkpoint in {other} (checkpoints of this dataset: ckpt" in err
    assert "training from epoch 1" in err


def losses(run_dir) -> list[tuple[int, float]]:
    lines = (run_dir / "metrics.rank0.jsonl").read_text().splitlines()
    return [(r["epoch"], r["loss"]) for r in map(json.loads, lines)]


def test_a_run_resumed_in_its_own_directory_continues_it(tmp_path, monkeypatch, capsys):
    """The same command with train.resume=true, in the directory of a run that stopped:
    its metrics go on from the checkpoint, as one uninterrupted run's."""
    monkeypatch.chdir(tmp_path)
    run = [*BASE, f"hydra.run.dir={tmp_path / 'run'}", f"train.checkpoint_dir={tmp_path / 'c'}"]
    assert main([*run, "train.stop_after=2"]) == 0
    assert main(run) != 0  # a second run there would mix with the first
    assert "or add train.resume=true to continue that run there" in capsys.readouterr().err
    assert main([*run, "train.resume=true"]) == 0
    whole = [*BASE, f"hydra.run.dir={tmp_path / 'whole'}", f"train.checkpoint_dir={tmp_path}/w"]
    assert main(whole) == 0
    assert losses(tmp_path / "run") == losses(tmp_path / "whole")
    assert [e for e, _ in losses(tmp_path / "run")] == [0, 1, 2, 3]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 4 and summary["complete"]


def test_a_run_is_not_continued_from_another_runs_checkpoint(tmp_path, monkeypatch, capsys):
    """Runs sharing a checkpoint directory replace each other's file there: resuming the
    first in its directory after the second wrote it is refused, naming both epochs; and
    so is one that stopped before its first checkpoint."""
    monkeypatch.chdir(tmp_path)
    shared = f"train.checkpoint_dir={tmp_path / 'shared'}"
    first = [*BASE, f"hydra.run.dir={tmp_path / 'first'}", shared]
    assert main([*first, "train.stop_after=2"]) == 0
    assert main([*BASE, f"hydra.run.dir={tmp_path / 'second'}", shared, "train.stop_after=3"]) == 0
    capsys.readouterr()
    assert main([*first, "train.resume=true"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot continue the run in" in err and "after epoch 2" in err, err
    assert "holds one after epoch 3, another run's" in err, err
    # Under another model the shared directory is another one too: the model is the reason.
    assert main([*first, "train.resume=true", "model.hidden=8", "train.checkpoint_dir=x"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"cannot resume from {tmp_path / 'first'}: its model was trained with" in err, err
    assert "model.hidden=8" in err and "own copy" not in err, err
    # The fix it names: the run's own copy, in its directory.
    assert main([*first, "train.resume=true", f"train.checkpoint_dir={tmp_path / 'first'}"]) == 0
    assert [e for e, _ in losses(tmp_path / "first")] == [0, 1, 2, 3]
    (tmp_path / "first" / "checkpoint.pt").unlink()  # as if stopped before its first one
    assert main([*first, "train.resume=true"]) != 0
    assert "stopped before its first checkpoint" in capsys.readouterr().err


def test_a_restarted_attempt_resumes_its_own_copy_not_the_shared_file(
    tmp_path, monkeypatch, capsys
):
    """A requeued SLURM job or a restarted group resumes from its run directory's copy:
    meanwhile another run sharing train.checkpoint_dir (a sweep's next point) has
    replaced the shared file, and resuming that would train on another run's model."""
    from gnnrun.attempt import ATTEMPT_ENV, RUN_ID_ENV

    monkeypatch.chdir(tmp_path)
    shared = f"train.checkpoint_dir={tmp_path / 'shared'}"
    first = [*BASE, f"hydra.run.dir={tmp_path / 'first'}", shared, "train.resume=true"]
    monkeypatch.setenv(RUN_ID_ENV, "first")
    monkeypatch.setenv(ATTEMPT_ENV, "0")
    assert main([*first, "train.stop_after=2"]) == 0  # then it is preempted
    monkeypatch.setenv(RUN_ID_ENV, "second")
    second = [*BASE, f"hydra.run.dir={tmp_path / 'second'}", shared, "optimizer.lr=0.05"]
    assert main([*second, "train.stop_after=3"]) == 0  # the shared file is now its epoch 3
    monkeypatch.setenv(RUN_ID_ENV, "first")
    monkeypatch.setenv(ATTEMPT_ENV, "1")  # requeued
    capsys.readouterr()
    assert main(first) == 0
    assert "optimizer.lr" not in capsys.readouterr().err  # not the second run's checkpoint
    monkeypatch.delenv(RUN_ID_ENV)
    monkeypatch.delenv(ATTEMPT_ENV)
    whole = [*BASE, f"hydra.run.dir={tmp_path / 'whole'}", f"train.checkpoint_dir={tmp_path}/w"]
    assert main(whole) == 0
    assert losses(tmp_path / "first") == losses(tmp_path / "whole")


def test_settings_recorded_under_old_names_compare_under_the_new_ones():
    saved = {"algorithm.name": "hec", "model.lr": 0.003, "algorithm.delay": 1}
    now = {
        "algorithm.name": "hec",
        "optimizer.name": "adam",
        "optimizer.lr": 0.003,
        "algorithm.delay_minibatches": 1,
    }
    assert compare_settings(saved, now) == SettingChanges()
    changes = compare_settings(saved, {**now, "algorithm.delay_minibatches": 2})
    assert changes.diverging == {"algorithm.delay_minibatches": (1, 2)}
    assert compare_settings(saved, {**now, "optimizer.name": "adamw"}).refused == {
        "optimizer.name": ("adam", "adamw")
    }


def test_sampling_settings_recorded_under_the_models_names_compare_under_the_algorithms():
    saved = {"algorithm.name": "minibatch", "model.fanouts": [10, 25], "model.batch_size": 1000}
    now = {"algorithm.name": "minibatch", "algorithm.fanouts": [5, 5], "algorithm.batch_size": 1000}
    assert compare_settings(saved, now).diverging == {"algorithm.fanouts": ([10, 25], [5, 5])}
    # Full batch has no sampling settings: a checkpoint's are no change of this run's.
    full = {"algorithm.name": "minibatch"}
    assert compare_settings(saved, full) == SettingChanges()


def test_another_task_is_refused_by_its_name_alone():
    """A vertex classification checkpoint records no task settings: it was task=node."""
    now = {"task.name": "link", "task.scorer": "dot", "task.split_seed": 0, "model.hidden": 16}
    changes = compare_settings({"model.hidden": 16}, now)
    assert changes.refused == {"task.name": ("node", "link")}
    assert not changes.diverging and not changes.evaluation


def test_setting_kinds():
    changes = compare_settings(
        {"model.hidden": 256, "optimizer.lr": 0.1, "algorithm.fanouts": [10], "train.seed": 0},
        {"model.hidden": 64, "optimizer.lr": 0.2, "algorithm.fanouts": [5], "train.seed": 0},
    )
    assert changes.refused == {"model.hidden": (256, 64)}
    assert changes.applied == {"optimizer.lr": (0.1, 0.2)}
    assert changes.diverging == {"algorithm.fanouts": ([10], [5])}


def test_options_around_the_layers_are_part_of_the_models_shape():
    from gnnrun.train.resume import compare_settings

    old = {"model.name": "sage", "model.hidden": 16}  # a checkpoint from before the options
    now = old | {"model.residual": False, "model.norm": "none", "model.jk": "none"}
    assert not compare_settings(old, now).refused
    changed = compare_settings(old, now | {"model.residual": True, "model.norm": "layer"})
    assert set(changed.refused) == {"model.residual", "model.norm"}
    # The block too: a checkpoint without it had the post-normalised stack.
    assert not compare_settings(old, now | {"model.block": "post_norm"}).refused
    changed = compare_settings(old, now | {"model.block": "pre_norm_ffn"})
    assert changed.refused == {"model.block": ("post_norm", "pre_norm_ffn")}


def test_a_schedule_is_applied_from_the_resumed_epoch_and_old_checkpoints_had_none():
    old = {"optimizer.name": "adam", "optimizer.lr": 0.01}  # from before schedules
    now = old | {"optimizer.schedule": "constant", "optimizer.warmup_epochs": 0}
    now |= {"optimizer.clip_norm": 0.0, "optimizer.gamma": 0.1}
    assert compare_settings(old, now) == SettingChanges()
    cosine = now | {"optimizer.schedule": "cosine", "train.epochs": 100}
    assert compare_settings(old, cosine).applied == {
        "optimizer.schedule": ("constant", "cosine")  # (train.epochs: the schedule's own)
    }
    longer = compare_settings(cosine, cosine | {"train.epochs": 200})
    assert longer.applied == {"train.epochs": (100, 200)}
    assert (
        "with train.epochs=200 (the checkpoint had 100): applied" in change_messages(longer, 5)[0]
    )
    assert compare_settings(cosine, now).applied == {"optimizer.schedule": ("cosine", "constant")}


def test_only_a_schedule_over_the_epochs_records_them():
    from gnnrun.train.resume import settings_of

    from .test_trainer import config

    assert "train.epochs" not in settings_of(config("dataset=synthetic-tiny"))
    cosine = settings_of(config("dataset=synthetic-tiny", "optimizer.schedule=cosine"))
    assert cosine["train.epochs"] == 10 and cosine["optimizer.schedule"] == "cosine"
