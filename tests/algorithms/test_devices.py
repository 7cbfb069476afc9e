"""GPU ranks. Without a GPU (the default suite): the device-independent path, the one GPU
ranks take (sparse CSR aggregation, dropout's mask in torch operations, the reference
GAT), runs on CPU tensors and trains as the native CPU kernels do. With a GPU (marker
`gpu`, `make test-gpu`): every algorithm that runs there trains as on the CPU, bf16
within tolerance, and predict on the GPU equals predict on the CPU. Device checks refuse
what cannot start."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnrun.algorithms.checks import check_runnable
from gnnrun.cli import main
from gnnrun.errors import GnnrunError
from gnnrun.infer import read_output
from gnnrun.ops.native import load_kernel_file
from gnnrun.testing import run_on_ranks

from .conftest import make_config, prepared

sys.path.insert(0, str(Path(__file__).parent))  # the ranks import the checks by name
sys.path.insert(0, str(Path(__file__).parent / "pipeline"))
import pipeline_checks  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")

TINY = ("dataset=synthetic-tiny", "train.epochs=3", "model.hidden=32")
# What each algorithm trains on a GPU, as a user would run it (dropout on: both devices
# draw the same mask).
CASES = {
    "single-full-sage": ("algorithm=single", "algorithm.mode=full", "model=sage"),
    "single-full-gcn": ("algorithm=single", "algorithm.mode=full", "model=gcn"),
    "single-full-gat": ("algorithm=single", "algorithm.mode=full", "model=gat"),
    "single-minibatch-sage": ("algorithm=single", "model=sage", "algorithm.batch_size=256"),
    # With a schedule and clipping (the norm read back once per epoch).
    "minibatch-sage": (
        "algorithm=minibatch",
        "cluster.nprocs=1",
        "algorithm.batch_size=256",
        "optimizer.schedule=cosine",
        "optimizer.warmup_epochs=1",
        "optimizer.clip_norm=0.1",
    ),
    "pipeline-gat": (
        "algorithm=pipeline",
        "cluster.nprocs=1",
        "model=gat",
        "algorithm.batch_size=256",
    ),
    "sar-sage": ("algorithm=sar", "cluster.nprocs=1", "model=sage"),
    "cd0-sage_gcn": ("algorithm=cd0", "cluster.nprocs=1", "model=sage_gcn"),
    # Platonov et al.'s residual block (the Tolokers recipes run on one GPU).
    "single-full-pre_norm_gcn": (
        "algorithm=single",
        "algorithm.mode=full",
        "model=hetero_bench_gcn",
    ),
    "single-full-pre_norm_gat": (
        "algorithm=single",
        "algorithm.mode=full",
        "model=hetero_bench_gat",
        "optimizer.lr=0.01",  # the preset's 3e-5 barely moves the weights in 3 epochs
    ),
    "link-single-full": ("algorithm=single", "algorithm.mode=full", "task=link"),
    "link-minibatch": ("algorithm=minibatch", "cluster.nprocs=1", "task=link"),
    "hec-2ranks": ("algorithm=hec", "cluster.nprocs=2", "algorithm.batch_size=256"),
    "hetero-rgcn": (
        "dataset=synthetic-hetero-tiny",
        "algorithm=single",
        "model=rgcn",
        "algorithm.batch_size=256",
    ),
}
# The cases the default suite runs through the device path on CPU tensors (hec's two
# ranks, 30 s, in the slow suite: its cache's reference equals the kernels in tests/ops).
CPU_CASES = (
    "single-full-sage",
    "single-full-gat",
    "single-full-pre_norm_gat",
    "single-minibatch-sage",
    pytest.param("hec-2ranks", marks=pytest.mark.slow),
    "hetero-rgcn",
)
# Cases whose two paths add in nearly the same order: a tighter bound than the sparse
# product's. The residual stream dilutes the attention's share of the loss (a 1% error
# in one of GAT's 8 heads moves it by 3e-5 in 3 epochs; the two paths agreed to the bit).
RELATIVE_TOLERANCE = {"single-full-pre_norm_gat": 2e-6}


def trained(tmp_path: Path, name: str, *overrides: str) -> list[dict]:
    """The per-epoch records of `gnnrun train` with `overrides` (rank 0)."""
    run_dir = tmp_path / name
    args = ["train", *TINY, *overrides, f"hydra.run.dir={run_dir}"]
    args.append(f"train.checkpoint_dir={run_dir / 'checkpoints'}")
    assert main(args) == 0, f"gnnrun {' '.join(args)} failed"
    lines = (run_dir / "metrics.rank0.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def assert_same_training(a: list[dict], b: list[dict], rel: float) -> None:
    assert [r["epoch"] for r in a] == [r["epoch"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert x["loss"] == pytest.approx(y["loss"], rel=rel), (x["epoch"], x["loss"], y["loss"])


@pytest.fixture
def without_native(monkeypatch):
    """Runs in this process take the path GPU ranks take (the native kernels unloaded)."""

    def switch(off: bool) -> None:
        if off:
            monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
        else:
            monkeypatch.delenv("GNNRUN_NO_NATIVE", raising=False)
        load_kernel_file.cache_clear()

    yield switch
    switch(False)


@pytest.mark.parametrize("case", CPU_CASES)
def test_the_device_path_on_cpu_trains_as_the_native_kernels(tmp_path, without_native, case):
    without_native(False)
    native = trained(tmp_path, "native", *CASES[case])
    without_native(True)
    portable = trained(tmp_path, "portable", *CASES[case])
    # Float32 sums in another order (MKL's sparse product against the kernel's loop).
    assert_same_training(native, portable, rel=RELATIVE_TOLERANCE.get(case, 1e-4))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("cluster.backend=ccl",), "exchanges GPU tensors through NCCL"),
        (
            ("cluster=slurm", "cluster.tasks_per_node=4", "cluster.gpus_per_node=2"),
            "set cluster.gpus_per_node to cluster.tasks_per_node",
        ),
    ],
)
def test_gpu_ranks_that_cannot_start_are_refused(overrides, message):
    cfg = make_config("dataset=synthetic-tiny", "cluster.device=cuda", *overrides)
    with pytest.raises(GnnrunError, match=message):
        check_runnable(cfg)


def test_an_algorithm_that_does_not_declare_cuda_is_refused_naming_those_that_do(monkeypatch):
    from gnnrun.algorithms import ALGORITHMS

    monkeypatch.setattr(ALGORITHMS.get("hec"), "devices", ("cpu",))
    cfg = make_config("dataset=synthetic-tiny", "algorithm=hec", "cluster.device=cuda")
    with pytest.raises(GnnrunError) as refused:
        check_runnable(cfg)
    message = str(refused.value)
    assert "algorithm=hec runs on cluster.device=cpu, not cuda" in message
    assert "algorithms that run on cuda: cd0, cdr, domain_parallel, minibatch" in message
    assert "hec" not in message.split("run on cuda:")[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_gpu_is_refused():
    cfg = make_config("dataset=synthetic-tiny", "algorithm=single", "cluster.device=cuda")
    with pytest.raises(GnnrunError, match="sees no CUDA device"):
        check_runnable(cfg)


@pytest.fixture
def gpus(monkeypatch):
    """Pretend torch sees this many GPUs (the checks and defaults read no more than that)."""

    def set_count(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return set_count


@pytest.mark.parametrize(("count", "ranks"), [(0, 1), (1, 1), (4, 4)])
def test_gpu_ranks_default_to_one_per_gpu(gpus, count, ranks):
    gpus(count)
    cfg = make_config("dataset=synthetic-tiny", "algorithm=minibatch", "cluster.device=cuda")
    assert cfg.cluster.nprocs == ranks and cfg.partitioner.num_parts == ranks
    assert make_config("dataset=synthetic-tiny", "algorithm=minibatch").cluster.nprocs == 2
    given = make_config("dataset=synthetic-tiny", "cluster.device=cuda", "cluster.nprocs=3")
    assert given.cluster.nprocs == 3


def test_a_one_process_algorithm_needs_one_gpu_whatever_cluster_nprocs_says(gpus):
    gpus(1)
    check_runnable(
        make_config(
            "dataset=synthetic-tiny", "algorithm=single", "cluster.device=cuda", "cluster.nprocs=2"
        )
    )
    cfg = make_config(
        "dataset=synthetic-tiny", "algorithm=minibatch", "cluster.device=cuda", "cluster.nprocs=2"
    )
    with pytest.raises(GnnrunError, match="this machine has 1 GPU"):
        check_runnable(cfg)


@needs_gpu
def test_more_ranks_than_gpus_are_refused():
    ranks = torch.cuda.device_count() + 1
    cfg = make_config("dataset=synthetic-tiny", "cluster.device=cuda", f"cluster.nprocs={ranks}")
    with pytest.raises(GnnrunError, match="one rank per GPU"):
        check_runnable(cfg)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_trains_as_the_cpu(tmp_path, case):
    cpu = trained(tmp_path, "cpu", *CASES[case])
    gpu = trained(tmp_path, "gpu", *on_gpus(CASES[case]))
    assert_same_training(cpu, gpu, rel=1e-3)


def on_gpus(overrides: tuple[str, ...]) -> tuple[str, ...]:
    """`overrides` on GPU ranks: over NCCL where there is a GPU per rank, else sharing the
    GPUs over gloo (NCCL refuses two ranks on one GPU)."""
    ranks = next((int(o.split("=")[1]) for o in overrides if o.startswith("cluster.nprocs=")), 1)
    shared = ("cluster.backend=gloo",) if ranks > torch.cuda.device_count() else ()
    return (*overrides, "cluster.device=cuda", *shared)


# Algorithms whose ranks exchange GPU tensors: minibatch's gradients, SAR's remote rows,
# DistGNN's partial aggregates (cd0 at once, cdr delayed: its state in flight), HEC's
# pushes, MG-GCN's staged broadcasts.
TWO_RANKS = {
    "minibatch-sage": ("algorithm=minibatch", "algorithm.batch_size=256"),
    "pipeline-sage": ("algorithm=pipeline", "algorithm.batch_size=256"),
    "cd0-gcn": ("algorithm=cd0", "model=gcn"),
    "cdr-sage_gcn": ("algorithm=cdr", "model=sage_gcn", "train.epochs=4"),
    "hec-sage": ("algorithm=hec", "algorithm.batch_size=256"),
    "spmm1d-gcn": ("algorithm=spmm1d", "model=gcn"),
    "sar-gat": ("algorithm=sar", "model=gat"),
    "domain_parallel-sage": ("algorithm=domain_parallel", "model=sage"),
}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", sorted(TWO_RANKS))
def test_two_gpu_ranks_train_as_two_cpu_ranks(tmp_path, case):
    """Over NCCL with two GPUs; on one GPU both ranks share it over gloo (NCCL refuses)."""
    common = (*TWO_RANKS[case], "cluster.nprocs=2")
    cpu = trained(tmp_path, "cpu", *common)
    gpu = trained(tmp_path, "gpu", *on_gpus(common))
    assert_same_training(cpu, gpu, rel=1e-3)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("nprocs", [1, 2])
def test_the_pipeline_on_the_gpu_hands_the_trainer_minibatch_s_minibatches(nprocs):
    """DistDGLv2 on a GPU against DistDGL-GPU: the pipeline's minibatches (copied from one
    pinned buffer, put in order on the GPU) are minibatch's on the GPU bit for bit; the
    losses equal up to the GPU's nondeterministic sums."""
    common = on_gpus(
        (
            "dataset=synthetic-tiny",
            "model=sage",
            "algorithm.batch_size=20",
            "algorithm.fanouts=[5,5]",
        )
        + (f"cluster.nprocs={nprocs}",)
    )
    minibatch = prepared(*common, "algorithm=minibatch")
    pipelines = {
        "served": prepared(*common, "algorithm=pipeline"),
        "cached": prepared(*common, "algorithm=pipeline", "algorithm.gpu_cache_rows=400"),
    }
    results = run_on_ranks(
        pipeline_checks.pipeline_equals_minibatch, nprocs, minibatch, pipelines, 2
    )
    for rank, result in enumerate(results):
        for name, run in result["results"].items():
            assert run["same_inputs"], f"rank {rank}, {name}: minibatches differ"
            assert run["losses"] == pytest.approx(result["minibatch_losses"], rel=1e-5)
            # Gathered into reused page-locked buffers, copied from there to the GPU; the
            # stage threads keep the trainer's priority on a GPU rank.
            assert run["x_in_its_buffer"] == [True] and run["pinned"] == [True], name
            handover = run["handover"]
            assert handover["buffers"] - handover["grown"] <= handover["most_lent"], handover
            assert run["sample_nice"] == [0], run["sample_nice"]
            # A GPU rank samples with its default workers (up to 4, two of the stage's half
            # of the rank's threads each), each in its thread.
            assert len(run["sample_threads"]) == run["sample_workers"], run["sample_threads"]
            assert run["sample_workers"] == max(1, min(4, result["threads"] // 4)), result[
                "threads"
            ]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", ["single-full-sage", "minibatch-sage"])
def test_bf16_on_the_gpu_trains_close_to_fp32(tmp_path, case):
    fp32 = trained(tmp_path, "fp32", *CASES[case], "cluster.device=cuda")
    bf16 = trained(tmp_path, "bf16", *CASES[case], "cluster.device=cuda", "train.precision=bf16")
    assert_same_training(fp32, bf16, rel=0.05)


@pytest.mark.gpu
@needs_gpu
def test_predict_on_the_gpu_equals_predict_on_the_cpu(tmp_path):
    run_dir = tmp_path / "run"
    trained(tmp_path, "run", *CASES["single-full-sage"])
    outputs = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"predicted-{device}"
        args = ["predict", f"run={run_dir}", f"cluster.device={device}", "cluster.nprocs=1"]
        assert main([*args, f"predict.output_dir={out}"]) == 0
        outputs[device] = read_output(out)
    for key, cpu_rows in outputs["cpu"].items():
        np.testing.assert_allclose(outputs["cuda"][key], cpu_rows, rtol=1e-4, atol=1e-5)


def test_a_minibatch_lists_every_tensor_it_hands_over():
    """What the pipeline's trainer marks as used on its CUDA stream (record_stream): every
    tensor of the blocks, typed inputs and link targets, and none of a block's caches."""
    from gnnrun.algorithms.minibatch.minibatch import Minibatch, tensors_in
    from gnnrun.models.hetero import TypedInput
    from gnnrun.ops.block import Block
    from gnnrun.tasks.link import EdgeTargets

    block = Block(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), 2, torch.tensor([7, 9]))
    block.etypes = torch.tensor([0, 1])
    block.relation_rows(2)  # a cache on the block: not handed over
    x = TypedInput(torch.tensor([0, 1]), torch.tensor([3, 4]), {0: torch.ones(1, 4)})
    targets = EdgeTargets(torch.zeros(2, 1, dtype=torch.int64), torch.zeros(2, 3))
    found = list(tensors_in(Minibatch([block], x, targets)))
    expected = [block.indptr, block.indices, block.src_ids, block.etypes, *vars(x).values()]
    expected = [t for t in expected if isinstance(t, torch.Tensor)]
    expected += [x.feat[0], targets.positives, targets.negatives]
    assert len(found) == len(expected)
    assert all(any(f is e for f in found) for e in expected)
