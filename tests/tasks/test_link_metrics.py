"""Link-prediction metrics: hand-computed ranks, and OGB's own evaluators on random scores."""

from __future__ import annotations

import sys

import pytest
import torch

from gnnrun.tasks.link_metrics import hits_against_shared, ranking_metrics, ranks


def test_ranks_by_hand_with_ties_halved():
    positives = torch.tensor([0.9, 0.5, 0.1])
    negatives = torch.tensor(
        [
            [0.1, 0.2, 0.3],  # above all: rank 1
            [0.5, 0.7, 0.1],  # one above, one tied: 1 + (1 + 2) / 2 = 2.5
            [0.2, 0.3, 0.4],  # below all: rank 4
        ]
    )
    assert ranks(positives, negatives).tolist() == [1.0, 2.5, 4.0]
    metrics = ranking_metrics(positives, negatives, hits_at=(1, 3))
    assert metrics["mrr"] == pytest.approx((1 + 1 / 2.5 + 1 / 4) / 3)
    assert metrics["hits@1"] == pytest.approx(1 / 3)
    assert metrics["hits@3"] == pytest.approx(2 / 3)


def test_shared_negatives_by_hand():
    negatives = torch.tensor([0.1, 0.8, 0.4, 0.6])
    positives = torch.tensor([0.7, 0.6, 0.9, 0.2])
    assert hits_against_shared(positives, negatives, 2) == 0.5  # above 0.6 strictly: 0.7, 0.9
    assert hits_against_shared(positives, negatives, 5) == 1.0  # fewer negatives than K


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="negatives must be"):
        ranks(torch.zeros(3), torch.zeros(2, 4))


def test_equal_to_ogbs_evaluators_on_random_scores(monkeypatch):
    # Without the `outdated` package ogb skips its PyPI version check (no network in tests).
    monkeypatch.setitem(sys.modules, "outdated", None)
    linkproppred = pytest.importorskip("ogb.linkproppred")
    generator = torch.Generator().manual_seed(0)
    # Rounded scores, so that ties occur and their convention is tested too.
    positives = torch.round(torch.rand(500, generator=generator) * 50) / 50
    negatives = torch.round(torch.rand(500, 120, generator=generator) * 50) / 50
    ours = ranking_metrics(positives, negatives, hits_at=(1, 3, 10))
    theirs = linkproppred.Evaluator("ogbl-citation2").eval(
        {"y_pred_pos": positives, "y_pred_neg": negatives}
    )
    assert ours["mrr"] == pytest.approx(float(theirs["mrr_list"].mean()), rel=1e-6)
    for k in (1, 3, 10):
        assert ours[f"hits@{k}"] == pytest.approx(float(theirs[f"hits@{k}_list"].mean()))
    shared = negatives.reshape(-1)[:3000]
    for name, k in (("ogbl-collab", 50), ("ogbl-ddi", 20)):
        evaluator = linkproppred.Evaluator(name)
        assert k == evaluator.K
        theirs = evaluator.eval({"y_pred_pos": positives, "y_pred_neg": shared})
        assert hits_against_shared(positives, shared, k) == pytest.approx(theirs[f"hits@{k}"])


K = 1000  # negatives per positive, as task.eval_negatives


@pytest.mark.parametrize("spread", [0.0, 1.2e-7, 5e-7])  # 0, 2 and 8 float32 units
def test_scores_equal_up_to_rounding_rank_as_ties(spread):
    """A collapsed model (every score log 2 up to the last bits of a float32 sum) ranks each
    positive in the middle of its negatives: MRR 2 / (k + 2), AUC 0.5. Before, a positive a
    rounding above its negatives ranked first: MRR and AUC 1.0."""
    from gnnrun.tasks.link_metrics import collapsed, pairwise_auc

    g = torch.Generator().manual_seed(0)
    base = torch.tensor(0.6931472, dtype=torch.float32)
    positives = (base + spread).expand(64).clone()
    negatives = base + spread * torch.rand(64, K, generator=g) - spread
    assert (positives[:, None] > negatives).all() or spread == 0  # a strict win, were it not a tie
    metrics = ranking_metrics(positives, negatives, hits_at=(10,))
    assert metrics["mrr"] == pytest.approx(2 / (K + 2))
    assert metrics["hits@10"] == 0.0
    assert pairwise_auc(positives, negatives) == pytest.approx(0.5)
    assert collapsed(positives, negatives)


def test_scores_apart_still_rank_and_do_not_collapse():
    from gnnrun.tasks.link_metrics import collapsed, pairwise_auc

    positives = torch.tensor([0.70, 0.60])
    negatives = torch.tensor([[0.69, 0.50, 0.71], [0.61, 0.62, 0.10]])
    # 0.70: one above (0.71) -> rank 2; 0.60: two above -> rank 3.
    assert ranks(positives, negatives).tolist() == [2.0, 3.0]
    assert pairwise_auc(positives, negatives) == pytest.approx(5 / 6 * 0.5 + 2 / 6 * 0.5)
    assert not collapsed(positives, negatives)


def link_summary(records, eval_negatives=100):
    from types import SimpleNamespace

    from gnnrun.train.trainer import summarize

    cfg = SimpleNamespace(
        dataset=SimpleNamespace(name="d"),
        model=SimpleNamespace(name="gcn"),
        algorithm=SimpleNamespace(name="single"),
        task=SimpleNamespace(name="link", eval_negatives=eval_negatives),
        train=SimpleNamespace(epochs=len(records), target=None, patience=0),
    )
    return summarize(records, cfg, 1)


def evaluation(epoch, mrr, auc=None, collapsed=False):
    r = {"epoch": epoch, "epoch_s": 1.0, "bytes": {}, "time": {}, "peak_rss_mb": 1.0}
    r |= {"val_mrr": mrr, "test_mrr": mrr} | ({"val_collapsed": 1.0} if collapsed else {})
    return r | ({"val_auc": auc, "test_auc": auc} if auc is not None else {})


def test_a_collapsed_evaluation_is_never_the_best_and_is_listed():
    records = [evaluation(0, 0.1), evaluation(1, 0.9, collapsed=True), evaluation(2, 0.2)]
    summary = link_summary(records)
    assert summary["best"]["epoch"] == 2
    assert summary["collapsed_epochs"] == [1]  # numbered as best.epoch and the records


def test_against_one_negative_the_best_epoch_is_the_best_validation_auc():
    """One negative per edge: MRR ties (epochs 0 and 1 alike) and misses what ROC-AUC
    sees; against many negatives MRR picks, as before."""
    records = [
        evaluation(0, 0.9, auc=0.91),
        evaluation(1, 0.9, auc=0.95),
        evaluation(2, 0.85, auc=0.93),
    ]
    one = link_summary(records, eval_negatives=1)
    assert (one["best_metric"], one["best"]["epoch"]) == ("val_auc", 1)
    many = link_summary(records, eval_negatives=100)
    assert (many["best_metric"], many["best"]["epoch"]) == ("val_mrr", 0)


def test_average_precision_by_hand_and_with_ties():
    from gnnrun.tasks.link_metrics import average_precision

    # Scores 0.9 (+), 0.8 (-), 0.7 (+), 0.1 (-): precision 1 at the first positive, 2/3 at
    # the second: AP = (1 + 2/3) / 2.
    positives, negatives = torch.tensor([0.9, 0.7]), torch.tensor([0.8, 0.1])
    assert average_precision(positives, negatives) == pytest.approx(5 / 6)
    # A positive tied with a negative (up to rounding) shares one threshold with it:
    # precision 1/2 there, whichever order the sort left them in.
    tied = torch.tensor([0.5, 0.5 + 1e-9])
    assert average_precision(tied[:1], tied[1:]) == pytest.approx(0.5)
    assert average_precision(tied[1:], tied[:1]) == pytest.approx(0.5)
    # A collapsed model scores the positives' share; a perfect one 1.
    assert average_precision(torch.ones(3), torch.ones(9)) == pytest.approx(0.25)
    assert average_precision(torch.tensor([2.0, 3.0]), torch.tensor([1.0, 0.0])) == 1.0


def test_link_metrics_report_average_precision_beside_roc_auc():
    from gnnrun.comm import Communicator
    from gnnrun.tasks.metrics import link_metrics

    positive, negative = torch.tensor([0.9, 0.7]), torch.tensor([[0.8], [0.1]])
    result = link_metrics({"test": (positive, negative)}, Communicator(), [1])
    assert result["test_ap"] == pytest.approx(5 / 6)
    assert result["test_auc"] == pytest.approx(3 / 4)


@pytest.mark.parametrize("grid", [None, 50])  # distinct scores; scores on a grid that tie
def test_average_precision_and_auc_are_sklearns(grid):
    from gnnrun.tasks.link_metrics import average_precision, pairwise_auc

    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(3)
    # Scores 1e-4 apart at least (closer ones tie: link_metrics.tie_tolerance), overlapping.
    distinct = torch.randperm(400 * 31, generator=g).to(torch.float64) / 10_000
    positives, negatives = distinct[:400] + 0.30005, distinct[400:].reshape(400, 30)
    if grid:
        positives, negatives = (positives * grid).round() / grid, (negatives * grid).round() / grid
    scores = torch.cat([positives, negatives.reshape(-1)]).numpy()
    labels = [1] * 400 + [0] * negatives.numel()
    expected_ap = sklearn_metrics.average_precision_score(labels, scores)
    assert average_precision(positives, negatives) == pytest.approx(expected_ap, rel=1e-9)
    expected_auc = sklearn_metrics.roc_auc_score(labels, scores)
    assert pairwise_auc(positives, negatives) == pytest.approx(expected_auc, rel=1e-9)


def test_ranks_in_row_chunks_are_the_ranks_of_all_rows_at_once(monkeypatch):
    import gnnrun.tasks.link_metrics as link_metrics

    g = torch.Generator().manual_seed(6)
    positives = (torch.rand(50, generator=g) * 10).round() / 10
    negatives = (torch.rand(50, 7, generator=g) * 10).round() / 10
    whole = ranks(positives, negatives)
    for chunk in (1, 7 * 3, 7 * 50 + 1):  # a row at a time (at least), 3 rows, all
        monkeypatch.setattr(link_metrics, "RANK_CHUNK", chunk)
        assert torch.equal(ranks(positives, negatives), whole)
    expected = (
        1 + (negatives > positives[:, None]).sum(1) + 0.5 * (negatives == positives[:, None]).sum(1)
    )
    assert torch.equal(whole, expected.to(torch.float64))
