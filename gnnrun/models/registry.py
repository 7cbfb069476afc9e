"""`model.name` -> the builder of one layer: (in_dim, out_dim, cfg, is_last) -> a module
with forward(block, x_src) -> x_dst."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gnnrun.config import ModelConfig
from gnnrun.registry import Registry

LAYERS: Registry[Callable[[int, int, ModelConfig, bool], torch.nn.Module]] = Registry("model")
