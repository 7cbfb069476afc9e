"""Writing the gzip csv files of an OGB archive's layout, and cutting one short
(tests/data/test_ogb*.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gnnrun.data import build_dataset
from gnnrun.errors import GnnrunError


def write_csv(path, array, header=False):
    """`array` as a gzip csv at `path`, a DataFrame's column names as the header when `header`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = array if isinstance(array, pd.DataFrame) else pd.DataFrame(np.asarray(array))
    frame.to_csv(path, compression="gzip", header=header, index=False)


def assert_a_cut_file_is_named(victim, cfg, url: str) -> None:
    """Cut `victim` to two thirds: preparing `cfg` fails with one line that names the file,
    says it looks cut short and gives the archive's `url`."""
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(GnnrunError) as failure:
        build_dataset(cfg)
    message = str(failure.value)
    assert message.startswith(f"cannot read {victim} (") and "\n" not in message
    assert "cut short or damaged" in message and url in message
