"""Writing the gzip csv files of an OGB archive's layout (tests/data/test_ogb*.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def write_csv(path, array, header=False):
    """`array` as a gzip csv at `path`, a DataFrame's column names as the header when `header`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = array if isinstance(array, pd.DataFrame) else pd.DataFrame(np.asarray(array))
    frame.to_csv(path, compression="gzip", header=header, index=False)
