"""What the launcher refuses before any rank starts: train.precision per algorithm and CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gnnrun.algorithms import check_runnable, checks
from gnnrun.errors import GnnrunError

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_config  # noqa: E402


@pytest.mark.parametrize("algorithm", ["single", "minibatch", "pipeline"])
def test_sampled_training_runs_in_bf16_where_the_cpu_has_bf16(monkeypatch, algorithm):
    monkeypatch.setattr(checks, "bf16_matmul_supported", lambda: True)
    check_runnable(
        make_config("dataset=synthetic-tiny", f"algorithm={algorithm}", "train.precision=bf16")
    )


@pytest.mark.parametrize("algorithm", ["hec", "cd0", "sar", "spmm1d"])
def test_the_other_algorithms_refuse_bf16(monkeypatch, algorithm):
    monkeypatch.setattr(checks, "bf16_matmul_supported", lambda: True)
    overrides = ["model=gcn", "partitioner=block1d"] if algorithm == "spmm1d" else []
    with pytest.raises(
        GnnrunError,
        match=f"algorithm={algorithm} trains in train.precision=fp32, not bf16: use train.precision=fp32",
    ):
        check_runnable(
            make_config(
                "dataset=synthetic-tiny",
                f"algorithm={algorithm}",
                *overrides,
                "train.precision=bf16",
            )
        )


def test_bf16_is_refused_on_a_cpu_without_bf16_instructions(monkeypatch):
    monkeypatch.setattr(checks, "bf16_matmul_supported", lambda: False)
    with pytest.raises(GnnrunError, match="needs a CPU with bfloat16 instructions"):
        check_runnable(make_config("dataset=synthetic-tiny", "train.precision=bf16"))


def test_fanouts_are_asked_for_only_where_blocks_are_sampled():
    """Full batch takes every neighbour: a third layer needs no third fanout there."""
    full = ("dataset=synthetic-tiny", "algorithm=single", "algorithm.mode=full", "model.layers=3")
    check_runnable(make_config(*full))
    for sampled in (("algorithm=single", "algorithm.mode=minibatch"), ("algorithm=minibatch",)):
        cfg = make_config("dataset=synthetic-tiny", "model.layers=3", *sampled)
        with pytest.raises(GnnrunError, match=r"algorithm.fanouts=\[10, 25\] has 2 entries and "):
            check_runnable(cfg)


@pytest.mark.parametrize("algorithm", ["cd0", "sar"])
def test_batch_norm_is_refused_where_a_full_batch_spans_ranks(algorithm):
    overrides = ("dataset=synthetic-tiny", f"algorithm={algorithm}", "model.norm=batch")
    with pytest.raises(GnnrunError, match=f"model.norm=batch: algorithm={algorithm} spreads"):
        check_runnable(make_config(*overrides, "cluster.nprocs=2"))
    check_runnable(make_config(*overrides, "cluster.nprocs=1"))  # one rank: the whole batch


def test_sampled_algorithms_take_batch_norm_on_every_rank():
    check_runnable(make_config("algorithm=minibatch", "model.norm=batch", "cluster.nprocs=2"))


def test_spmm1d_refuses_the_options_around_the_layers_naming_them():
    with pytest.raises(
        GnnrunError,
        match=r"without model.residual=true model.jk=cat: leave them out, or train with",
    ):
        check_runnable(
            make_config(
                "algorithm=spmm1d",
                "model=gcn",
                "partitioner=block1d",
                "model.residual=true",
                "model.jk=cat",
            )
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ("model.norm=group", "model.norm 'group': choose one of none, layer, batch"),
        ("model.jk=sum", "model.jk 'sum': choose one of none, cat, max"),
    ],
)
def test_a_wrong_option_is_one_line_naming_the_choices(overrides, message):
    with pytest.raises(Exception, match=message):
        make_config(overrides)


@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_the_heterophilous_benchmark_presets_are_platonovs_recipe(name):
    cfg = make_config(f"model=hetero_bench_{name}", "dataset=tolokers")
    model = cfg.model
    assert (model.name, model.hidden, model.activation, model.dropout) == (name, 512, "gelu", 0.2)
    assert model.block == "pre_norm_ffn" and model.norm == "layer" and model.jk == "none"
    assert (
        model.input_dropout == 0
        and model.aggregator == "mean"
        and model.heads == (8 if name == "gat" else 1)
    )
    optimizer = cfg.optimizer
    assert (optimizer.name, optimizer.lr, optimizer.weight_decay) == ("adamw", 3e-5, 0.0)


def test_spmm1d_refuses_the_pre_normalised_block():
    with pytest.raises(GnnrunError, match=r"without model.block=pre_norm_ffn: leave them out"):
        check_runnable(
            make_config(
                "algorithm=spmm1d", "model=gcn", "partitioner=block1d", "model.block=pre_norm_ffn"
            )
        )


def test_the_gae_preset_is_kipf_and_wellings():
    cfg = make_config("model=gae", "task=gae", "dataset=cora")
    model = cfg.model
    assert (model.name, model.layers, model.hidden, model.link_width) == ("gcn", 2, 32, 16)
    assert model.dropout == model.input_dropout == 0
    assert (cfg.optimizer.lr, cfg.optimizer.weight_decay) == (0.01, 0.0)
    task = cfg.task
    assert (task.name, task.loss, task.self_pairs, task.scorer) == (
        "link",
        "reconstruction",
        True,
        "dot",
    )
    assert (task.eval_negatives, task.eval_sampler) == (1, "uniform")
    assert (task.val_fraction, task.test_fraction) == (0.05, 0.1)


def test_the_reconstruction_loss_is_refused_outside_one_full_batch_process():
    link = ("dataset=synthetic-tiny", "task=link", "task.loss=reconstruction")
    with pytest.raises(GnnrunError, match="use algorithm=single algorithm.mode=full"):
        check_runnable(make_config(*link, "algorithm=minibatch"))
    check_runnable(make_config(*link, "algorithm=single", "algorithm.mode=full"))


@pytest.mark.parametrize("task", ["node", "multilabel"])
def test_an_embedding_width_is_refused_where_the_model_ends_in_classes(task):
    """model=gae (embedding 16) trains the link task; a node task would ignore the width."""
    with pytest.raises(GnnrunError, match=f"model.embedding=16 .* task={task}'s model ends"):
        check_runnable(make_config("dataset=synthetic-tiny", f"task={task}", "model=gae"))
    whole = ("algorithm=single", "algorithm.mode=full")  # task=gae's reconstruction loss
    check_runnable(make_config("dataset=synthetic-tiny", "task=gae", "model=gae", *whole))


def test_a_warm_up_longer_than_the_run_is_refused():
    check_runnable(make_config("dataset=synthetic-tiny", "optimizer.warmup_epochs=10"))  # = epochs
    with pytest.raises(
        GnnrunError, match="optimizer.warmup_epochs=11 is longer than train.epochs=10"
    ):
        check_runnable(make_config("dataset=synthetic-tiny", "optimizer.warmup_epochs=11"))


def test_gpus_left_idle_by_default_are_named_and_not_when_cpu_is_chosen(monkeypatch):
    """A local run on CPU ranks by default, on a machine whose torch sees GPUs, is told so;
    not when cluster.device is given (cpu on purpose), nor elsewhere, nor without GPUs."""
    monkeypatch.setattr(checks, "visible_gpus", lambda: 2)
    local = make_config("dataset=synthetic-tiny").cluster
    note = checks.idle_gpus(local, ["dataset=synthetic-tiny"])
    assert note is not None and note.startswith("this torch sees 2 GPUs and the run trains on CPU")
    assert "cluster.device=cuda trains on the GPUs" in note
    assert checks.idle_gpus(local, ["cluster.device=cpu"]) is None
    hosts = make_config(
        "cluster=hosts", "cluster.node_rank=0", "cluster.rdzv_endpoint=127.0.0.1:29400"
    ).cluster
    assert checks.idle_gpus(hosts, []) is None
    monkeypatch.setattr(checks, "visible_gpus", lambda: 0)
    assert checks.idle_gpus(local, []) is None
