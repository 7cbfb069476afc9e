"""The stack of layers every model is: input dropout, then activation and dropout between layers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gnnrun.data.hetero import HeteroSchema
from gnnrun.models.hetero import TypedInput, TypedInputEncoder
from gnnrun.models.link import LinkModel, build_scorer
from gnnrun.models.registry import ACTIVATIONS, LAYERS, ModelConfig
from gnnrun.ops.block import Block
from gnnrun.ops.dropout import dropout, relu_dropout
from gnnrun.ops.precision import widened

# What a layer is about to consume may be replaced: (layer, block, rows) -> (block, rows).
LayerInput = Callable[[int, Block, torch.Tensor], tuple[Block, torch.Tensor]]


class Dropout(torch.nn.Module):
    """gnnrun.ops.dropout as a module: a hashed mask in one fused pass."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


class GNN(torch.nn.Module):
    """A stack of message-passing layers: input dropout, then activation and dropout between
    them. On a heterogeneous graph (`schema`) a TypedInputEncoder turns the typed input into
    the first layer's rows (gnnrun.models.hetero); `in_dim` is then unused."""

    def __init__(
        self, cfg: ModelConfig, in_dim: int, num_classes: int, schema: HeteroSchema | None = None
    ) -> None:
        super().__init__()
        build = LAYERS.get(cfg.name)
        self.encoder = None
        if schema is not None:
            in_dim = TypedInputEncoder.width_for(schema, cfg.hidden, cfg.input_projection)
            self.encoder = TypedInputEncoder(schema, in_dim, cfg.input_projection)
        dims = layer_widths(cfg, in_dim, num_classes)
        self.layers = torch.nn.ModuleList(
            build(dims[i], dims[i + 1], cfg, i == cfg.layers - 1, schema) for i in range(cfg.layers)
        )
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(
                f"model.activation {cfg.activation!r}: choose one of {sorted(ACTIVATIONS)}"
            )
        self.activation = ACTIVATIONS[cfg.activation]
        self.input_dropout = Dropout(cfg.input_dropout)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self,
        blocks: list[Block],
        x: torch.Tensor | TypedInput,
        layer_input: LayerInput | None = None,
    ) -> torch.Tensor:
        """`layer_input(i, block, h)`, when given, sees what layer i is about to consume
        (after dropout) and may replace it: the block and the source rows (DistGNN-MB's
        halo embeddings come in this way)."""
        if len(blocks) != len(self.layers):
            raise ValueError(
                f"{len(self.layers)} layers need {len(self.layers)} blocks, got {len(blocks)}"
            )
        if self.encoder is not None:
            x = self.encoder(x)
        h = self.input_dropout(x)
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            if layer_input is not None:
                block, h = layer_input(i, block, h)
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self._activate_and_drop(h)
        return widened(h)  # float32 logits for the loss and the metrics under bf16

    @staticmethod
    def dims_of(state: dict[str, torch.Tensor], layers: int) -> tuple[int, int]:
        """(input features, classes) of a `layers`-layer model's state dict: the first layer's
        weights take the input (rows of [out, in]), the last layer's biases are [classes]."""
        first = [t for k, t in state.items() if k.startswith("layers.0.") and k.endswith("weight")]
        last = [
            t
            for k, t in state.items()
            if k.startswith(f"layers.{layers - 1}.") and k.endswith("bias")
        ]
        if not first or not last:
            raise KeyError(f"no weights of layers 0 and {layers - 1}")
        return int(first[0].shape[1]), int(last[0].numel())

    def transforms(self, i: int) -> bool:
        """Whether layer i maps each vertex's row by itself first (gnnrun.models.registry)."""
        return bool(getattr(self.layers[i], "project_first", False))

    def transform(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Layer i's per-vertex step (for a layer that `transforms`), in float32."""
        return widened(self.layers[i].transform(h))

    def propagate(self, i: int, block: Block, rows: torch.Tensor) -> torch.Tensor:
        """The rest of layer i as `forward` applies it, from the transformed rows (or the
        input rows of a layer that does not `transform`), with the activation and
        dropout after a hidden layer, in float32. Layer-wise inference runs the stack a
        layer at a time: layer i over every vertex, then layer i + 1."""
        layer = self.layers[i]
        h = layer.propagate(block, rows) if self.transforms(i) else layer(block, rows)
        if i < len(self.layers) - 1:
            h = self._activate_and_drop(h)
        return widened(h)

    def _activate_and_drop(self, h: torch.Tensor) -> torch.Tensor:
        if self.activation is torch.relu:  # the common case, fused into one pass each way
            return relu_dropout(h, self.dropout.p, self.training)
        return self.dropout(self.activation(h))


def layer_widths(cfg: ModelConfig, in_dim: int, num_classes: int) -> list[int]:
    """The width of the input, then of every layer's output."""
    return [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]


def build_model(
    cfg: ModelConfig,
    in_dim: int,
    num_classes: int,
    schema: HeteroSchema | None = None,
    scorer: str | None = None,
) -> torch.nn.Module:
    """The GNN; with a `scorer` (task=link), the GNN embedding vertices `num_classes` wide
    and the scorer of vertex pairs on top (gnnrun.models.link)."""
    model = GNN(cfg, in_dim, num_classes, schema)
    if scorer is None:
        return model
    return LinkModel(model, build_scorer(scorer, num_classes))
