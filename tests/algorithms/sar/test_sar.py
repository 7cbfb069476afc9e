"""`sar` and `domain_parallel` on real ranks: exact against `single` full batch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gnnrun.testing import run_on_ranks

sys.path.insert(0, str(Path(__file__).parents[1]))  # the checks all families share
sys.path.insert(0, str(Path(__file__).parent))
import sar_checks  # noqa: E402
import shard_checks  # noqa: E402

EPOCHS = 2
SMALL_MODEL = ("model.hidden=16", "model.dropout=0", "model.input_dropout=0")
# rgcn and hetero_sage: layers that read their block through relation_rows / relation_blocks.
MODELS = (
    "sage",
    "sage_gcn",
    "gcn",
    "gat",
    "rgcn",
    "hetero_sage",
    # Every option around the layers (model.norm=batch is refused on several ranks).
    "gat model.residual=true model.norm=layer model.input_mlp=true model.output_mlp=true "
    "model.jk=max",
    # Platonov et al.'s pre-normalised residual block (its GAT message attends to shards too).
    "gat model.block=pre_norm_ffn model.norm=layer",
)
# (algorithm, prefetch)
VARIANTS = (("sar", False), ("sar", True), ("domain_parallel", False))


def sharded_config(configure, algorithm: str, prefetch: bool, *overrides: str):
    prefetching = (f"algorithm.prefetch={str(prefetch).lower()}",) if algorithm == "sar" else ()
    return configure(*overrides, f"algorithm={algorithm}", *prefetching)


def _assert_matches_single(per_rank: list[dict], single: dict, name: str) -> None:
    for epoch, reference in enumerate(single["epochs"]):
        for rank in per_rank:
            got = rank["epochs"][epoch]
            assert got["loss"] == pytest.approx(reference["loss"], rel=1e-5, abs=1e-6), name
            # After the trainer's all-reduce every rank holds the summed gradients.
            for g, expected in zip(got["grads"], reference["grads"], strict=True):
                torch.testing.assert_close(
                    g, expected, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}"
                )
    for rank in per_rank:
        torch.testing.assert_close(
            rank["logits"],
            single["logits"][rank["nodes"]],
            rtol=1e-4,
            atol=1e-5,
            msg=lambda m: f"{name}: {m}",
        )


@pytest.mark.parametrize(
    "nprocs", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)  # 1 and 4 ranks: make test-slow
def test_sar_and_domain_parallel_equal_single_full_batch(configure, nprocs):
    """Losses, summed parameter gradients and logits of single full batch, for SAGE (mean,
    gcn), GCN, GAT, RGCN and heterogeneous SAGE (on a homogeneous graph), with and without
    prefetch, on 1, 2 and 4 ranks."""
    cfgs, names, singles = [], [], {}
    for model in MODELS:
        common = ("dataset=synthetic-tiny", *f"model={model}".split(), *SMALL_MODEL)
        single_cfg = configure(*common, "algorithm=single", "algorithm.mode=full")
        singles[model] = sar_checks.single_trajectory(single_cfg, EPOCHS)
        for algorithm, prefetch in VARIANTS:
            cfgs.append(
                sharded_config(configure, algorithm, prefetch, *common, f"cluster.nprocs={nprocs}")
            )
            names.append((model, algorithm, prefetch))
    if nprocs == 1:
        per_rank = [sar_checks.sharded_trajectories(0, 1, cfgs, EPOCHS)]
    else:
        per_rank = run_on_ranks(sar_checks.sharded_trajectories, nprocs, cfgs, EPOCHS)
    peak_bytes = {}
    for c, (model, algorithm, prefetch) in enumerate(names):
        results = [rank_results[c] for rank_results in per_rank]
        name = f"{model} {algorithm} prefetch={prefetch} on {nprocs}"
        _assert_matches_single(results, singles[model], name)
        if nprocs == 1:
            continue
        for rank in results:
            stats = rank["epochs"][-1]
            ring = stats["shard_rows"]  # rows of each peer's shard, in ring order
            assert sum(ring) == stats["remote_rows"], name
            # Remote rows alive at once, measured from the received tensors' lifetimes.
            expected = {
                ("sar", False): max(ring),
                ("sar", True): shard_checks.prefetch_peak(ring),
                ("domain_parallel", False): stats["remote_rows"],
            }[(algorithm, prefetch)]
            layers = len(stats["remote_rows_peak"])  # one per layer (2 or 3)
            assert layers >= 2 and stats["remote_rows_peak"] == [expected] * layers, name
            if algorithm == "sar":
                assert stats["bytes"]["sar_forward"] > 0, name
        peak_bytes[model, algorithm, prefetch] = max(
            rank["epochs"][-1]["remote_bytes_peak"] for rank in results
        )
    # domain_parallel keeps a layer's remote rows until its backward pass (where its input
    # needs gradients: not RGCN's first layer, which aggregates the input features), so
    # every such layer's at once; sar one shard (on 2 ranks: one layer's rows) at a time.
    for model in MODELS if nprocs > 1 else ():
        sar, baseline = peak_bytes[model, "sar", False], peak_bytes[model, "domain_parallel", False]
        assert sar < baseline or (model == "rgcn" and sar == baseline), model


def test_a_rank_without_training_vertices_trains(configure):
    """Rank 1 has no training vertex: it still runs every exchange (no rank waits forever),
    and the gradients are those of single trained on rank 0's training vertices."""
    runs = [("sage", False), ("gat", True)]
    commons = [("dataset=synthetic-tiny", f"model={model}", *SMALL_MODEL) for model, _ in runs]
    cfgs = [
        sharded_config(configure, "sar", prefetch, *common, "cluster.nprocs=2")
        for common, (_, prefetch) in zip(commons, runs, strict=True)
    ]
    per_rank = run_on_ranks(sar_checks.sharded_trajectories, 2, cfgs, EPOCHS, 1, timeout_s=60)
    for c, common in enumerate(commons):
        results = [rank_results[c] for rank_results in per_rank]
        assert results[1]["train_nodes"].numel() == 0 < results[0]["train_nodes"].numel()
        single_cfg = configure(*common, "algorithm=single", "algorithm.mode=full")
        single = sar_checks.single_trajectory(single_cfg, EPOCHS, results[0]["train_nodes"])
        _assert_matches_single(results, single, f"{runs[c]} without training vertices on rank 1")
