"""The config of an inference: the run's overrides, then the user's."""

from __future__ import annotations

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.infer.overrides import merge_overrides, run_overrides


def test_a_given_key_replaces_the_runs_value_and_its_subkeys():
    run = ["dataset=cora", "dataset.reorder=rcm", "cluster.nprocs=4", "+sweep=lr_tune"]
    given = ["dataset=custom", "dataset.path=g.npz", "cluster.nprocs=2"]
    assert merge_overrides(run, given) == ["+sweep=lr_tune", *given]
    assert merge_overrides(run, ["dataset.reorder=none"]) == [
        "dataset=cora",
        "cluster.nprocs=4",
        "+sweep=lr_tune",
        "dataset.reorder=none",
    ]


def test_the_runs_overrides_are_read_and_checked(tmp_path):
    (tmp_path / ".hydra").mkdir()
    overrides = tmp_path / ".hydra" / "overrides.yaml"
    overrides.write_text("- dataset=cora\n- hydra.run.dir=x\n- train.epochs=3\n")
    assert run_overrides(tmp_path) == ["dataset=cora", "train.epochs=3"]
    overrides.write_text("dataset: cora\n")
    with pytest.raises(GnnrunError, match="is not a list of overrides: it is damaged"):
        run_overrides(tmp_path)
    with pytest.raises(GnnrunError, match="no such directory"):
        run_overrides(tmp_path / "absent")
