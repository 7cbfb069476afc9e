"""Datasets: a registry of sources (`registry`), one module per source, the prepared
on-disk format (`dataset`), and preparing it once (`prepare`, which explains how a
prepared copy stays current)."""

from gnnrun.data.prepare import (
    build_dataset,
    dataset_identity,
    load_prepared,
    prepare_dataset,
)
from gnnrun.data.registry import DATASET_SOURCES, DatasetSource, register_source

# Importing a source module registers it. Sources import pandas and scipy inside
# their readers: every rank imports this package, and those two cost 0.3-0.45 s
# of each start.
from gnnrun.data import chunked, custom, heterophilous, musae, ogb, planetoid  # noqa: E402, F401  isort: skip
from gnnrun.data import synthetic, synthetic_hetero  # noqa: E402, F401  isort: skip

__all__ = [
    "DATASET_SOURCES",
    "DatasetSource",
    "build_dataset",
    "dataset_identity",
    "load_prepared",
    "prepare_dataset",
    "register_source",
]
