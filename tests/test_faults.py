"""The fault hook's spec: what it accepts, what it refuses, when it fires."""

from __future__ import annotations

import pytest

from gnnrun.errors import GnnrunError
from gnnrun.faults import Fault, inject_fault, parse_fault


def test_a_spec_names_kind_rank_epoch_and_step():
    assert parse_fault("kill:rank=1:epoch=3") == Fault("kill", 1, 3, 1)
    assert parse_fault("stop:rank=0:epoch=0:step=4") == Fault("stop", 0, 0, 4)


@pytest.mark.parametrize(
    "text",
    ["boom:rank=1:epoch=3", "kill:rank=x:epoch=3", "kill:epoch=3", "kill:rank=1:epoch=3:when=2"],
)
def test_a_bad_spec_says_how_to_write_one(text):
    with pytest.raises(GnnrunError, match=r"GNNRUN_FAULT=.*<kind>:rank=<r>:epoch=<e>"):
        parse_fault(text)


def test_it_fires_only_where_and_when_asked_and_only_on_the_first_attempt(monkeypatch):
    monkeypatch.setenv("GNNRUN_FAULT", "raise:rank=1:epoch=2:step=3")
    monkeypatch.setenv("GNNRUN_ATTEMPT", "0")
    inject_fault(0, 2, 3)  # another rank
    inject_fault(1, 2, 2)  # another step
    with pytest.raises(RuntimeError, match="injected fault on rank 1 at epoch 2, step 3"):
        inject_fault(1, 2, 3)
    monkeypatch.setenv("GNNRUN_ATTEMPT", "1")  # a restarted run goes past it
    inject_fault(1, 2, 3)
