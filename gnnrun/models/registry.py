"""`model.name` -> the builder of one layer: (in_dim, out_dim, cfg, is_last, schema) -> a
module with forward(block, x_src) -> x_dst; and the settings every model shares
(`ModelConfig`; a model with settings of its own registers a subclass). `schema` is the
heterogeneous graph's types (gnnrun.data.hetero; None for a homogeneous graph): relational
layers (gnnrun.models.rgcn) read it, the others ignore the relations.

A layer whose first step maps each vertex's row by itself (a linear map before the
aggregation) says so with `project_first = True` and splits its forward pass in two:
`transform(x)`, the rows computed per vertex, and `propagate(block, rows)`, the rest,
with forward(block, x) == propagate(block, transform(x)). Layer-wise inference
(gnnrun.infer) then computes the transform once per vertex rather than once per
block that reads the vertex. A layer without `project_first` is run whole."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from omegaconf import MISSING

from gnnrun.config import check
from gnnrun.registry import Registry

# `model.activation` -> the function between layers.
ACTIVATIONS = {"relu": torch.relu, "elu": torch.nn.functional.elu, "gelu": torch.nn.functional.gelu}
# `model.norm` and `model.jk` choices (gnnrun.models.gnn).
NORMS = ("none", "layer", "batch")
JUMPING_KNOWLEDGE = ("none", "cat", "max")
# `model.block` choices (gnnrun.models.gnn): what each layer of the stack is.
BLOCKS = ("post_norm", "pre_norm_ffn")


@dataclass
class ModelConfig:
    name: str = MISSING  # a key of LAYERS
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.5  # on hidden features, after each activation
    # On the input features. Kipf & Welling's GCN and DGL's full-batch examples
    # drop inputs; DGL's minibatch examples (and the papers' presets) do not.
    input_dropout: float = 0.0
    activation: str = "relu"
    aggregator: str = "mean"  # sage: mean | gcn (gnnrun.models.sage)
    heads: int = 1  # gat (gnnrun.models.gat)
    # Heterogeneous graphs (gnnrun.models.hetero): whether each featured type's features
    # are projected to `hidden` first.
    input_projection: bool = True
    # Around the layers (gnnrun.models.gnn): a residual connection over each layer (a
    # linear map where the widths differ), a normalisation of each hidden layer's output,
    # a linear layer before the first one and after the last one, and jumping knowledge
    # (the hidden layers' outputs concatenated or maxed into the output layer).
    residual: bool = False
    norm: str = "none"  # none | layer | batch
    input_mlp: bool = False
    output_mlp: bool = False
    jk: str = "none"  # none | cat | max (implies an output linear layer)
    # What each layer of the stack is (gnnrun.models.gnn): `post_norm`, the graph layer
    # and then the options above; `pre_norm_ffn`, Platonov et al.'s (ICLR 2023) residual
    # block h + FFN(message(norm(h))), with the input and output linear layers.
    block: str = "post_norm"  # post_norm | pre_norm_ffn
    # task=link: the width of the vertex embeddings (0: model.hidden).
    embedding: int = 0

    @property
    def pre_norm(self) -> bool:
        """Whether each layer is the pre-normalised residual block with a feed-forward
        network (`block=pre_norm_ffn`), which implies the input and output linear layers."""
        return self.block == "pre_norm_ffn"

    @property
    def head(self) -> bool:
        """Whether an output linear layer follows the last message-passing layer."""
        return self.output_mlp or self.jk != "none" or self.pre_norm

    @property
    def stem(self) -> bool:
        """Whether an input linear layer comes before the first message-passing layer."""
        return self.input_mlp or self.pre_norm

    @property
    def link_width(self) -> int:
        """task=link's embedding width."""
        return self.embedding or self.hidden

    def validate(self) -> None:
        check(self.layers >= 1, "model.layers must be at least 1")
        check(self.hidden >= 1, "model.hidden must be positive")
        check(0 <= self.dropout < 1, "model.dropout must be in [0, 1)")
        check(0 <= self.input_dropout < 1, "model.input_dropout must be in [0, 1)")
        check(
            self.activation in ACTIVATIONS,
            f"model.activation {self.activation!r}: choose one of {', '.join(ACTIVATIONS)}",
        )
        check(self.heads >= 1, f"model.heads must be at least 1 (got {self.heads})")
        check(self.norm in NORMS, f"model.norm {self.norm!r}: choose one of {', '.join(NORMS)}")
        check(
            self.jk in JUMPING_KNOWLEDGE,
            f"model.jk {self.jk!r}: choose one of {', '.join(JUMPING_KNOWLEDGE)}",
        )
        check(
            self.block in BLOCKS,
            f"model.block {self.block!r}: choose one of {', '.join(BLOCKS)}",
        )
        if self.pre_norm:
            check(
                self.name in BLOCK_MESSAGES.names(),
                f"model.block=pre_norm_ffn has no message for model.name={self.name}: use "
                f"model.name {' or '.join(BLOCK_MESSAGES.names())}, or model.block=post_norm",
            )
            check(
                self.jk == "none",
                f"model.jk={self.jk} reads hidden layers' outputs, which model.block="
                "pre_norm_ffn does not have (one residual stream): use model.jk=none",
            )
        check(self.embedding >= 0, "model.embedding must be positive (or 0: model.hidden)")

    def check_widths(self, widths: list[int]) -> None:
        """Refuse layer widths (the input, then every layer's output) the model cannot
        take, once the dataset says what they are; a model with such limits overrides it."""


# Settings ModelConfig had until 2026-11-27, now the sampled algorithms' (SampledConfig,
# `algorithm.*`; CHANGELOG.md). Programs outside the project still build
# ModelConfig(..., fanouts=..., batch_size=...) for full-batch models, which never read
# them: the constructor takes them, says where they went, and drops them. Hydra's
# composition does not pass through here (`model.fanouts=` on the command line is
# translated by gnnrun.cli).
MOVED_TO_ALGORITHM = ("fanouts", "batch_size", "relation_fanouts")


def _taking_moved_settings(init: Callable) -> Callable:
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        moved = [key for key in MOVED_TO_ALGORITHM if key in kwargs]
        for key in moved:
            del kwargs[key]
        if moved:
            warnings.warn(
                f"ModelConfig's {' and '.join(moved)} moved to the sampled algorithms' "
                f"settings ({', '.join(f'algorithm.{k}' for k in moved)}, SampledConfig): "
                "the model ignores them",
                DeprecationWarning,
                stacklevel=2,
            )
        init(self, *args, **kwargs)

    return __init__


ModelConfig.__init__ = _taking_moved_settings(ModelConfig.__init__)


LAYERS: Registry[Callable[[int, int, ModelConfig, bool], torch.nn.Module]] = Registry(
    "model", group="model", base_schema=ModelConfig
)

# `model.name` -> the message of the pre-normalised block (`model.block=pre_norm_ffn`,
# gnnrun.models.gnn): (width, cfg) -> a module with forward(block, x_src) -> the rows the
# block's feed-forward network reads at the destinations, and `out_dim`, their width. A
# message has no linear map of its own after the aggregation: the feed-forward network's
# first one follows it. A model without one refuses the block at startup.
BLOCK_MESSAGES: Registry[Callable[[int, ModelConfig], torch.nn.Module]] = Registry("block message")
