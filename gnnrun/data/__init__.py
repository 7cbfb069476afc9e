"""Datasets: one registry of sources, each producing the prepared on-disk format.

A *source* turns a dataset config into a GraphDataset (reading raw files or
generating a graph) and names the files it reads. `prepare_dataset` runs it
once and caches the result as the prepared format under `dataset.prepared_dir`,
recording the config and those input files (size, modification time, and a
sha256 for files up to 1 GiB); later calls memory-map the prepared copy and
prepare it again when the config or an input's content changed. A file that
was only moved or touched keeps the copy; one that is gone (raw files deleted
after preparing) does too.
"""

from gnnrun.data.prepare import build_dataset, dataset_identity, load_prepared, prepare_dataset
from gnnrun.data.registry import DATASET_SOURCES, DatasetSource, register_source

# Importing a source module registers it. Sources import pandas and scipy inside
# their readers: every rank imports this package, and those two cost 0.3-0.45 s
# of each start.
from gnnrun.data import custom, heterophilous, musae, ogb, planetoid, synthetic  # noqa: E402, F401  isort: skip

__all__ = [
    "DATASET_SOURCES",
    "DatasetSource",
    "build_dataset",
    "dataset_identity",
    "load_prepared",
    "prepare_dataset",
    "register_source",
]
