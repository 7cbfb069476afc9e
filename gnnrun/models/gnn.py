"""The stack of layers every model is: input dropout, then activation and dropout between layers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gnnrun.data.hetero import HeteroSchema
from gnnrun.models.hetero import TypedInput, TypedInputEncoder
from gnnrun.models.link import LinkModel, build_scorer
from gnnrun.models.registry import ACTIVATIONS, BLOCK_MESSAGES, LAYERS, ModelConfig
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
    the first layer's rows (gnnrun.models.hetero); `in_dim` is then unused.

    The options around the layers (ModelConfig), in the order they apply:

    - `input_mlp`: a linear layer to `hidden` (then activation and dropout) before the first
      message-passing layer;
    - each hidden layer's output: `norm` (layer or batch normalisation), then activation
      and dropout (PyG's BasicGNN order);
    - `residual`: each layer's output plus its input rows (of its destinations), through a
      linear map (no bias) where the widths differ;
    - `jk`: the hidden layers' outputs concatenated (`cat`) or maxed (`max`) per vertex
      (jumping knowledge, Xu et al. 2018), into
    - `output_mlp` (implied by `jk`): a linear layer to the output width after the last
      message-passing layer, which is then a hidden one (`hidden` wide, normalised and
      activated).

    `block=pre_norm_ffn` makes each layer a PreNormBlock instead (Platonov et al.'s
    residual block: normalisation first, a feed-forward network after the message),
    with the input linear layer before the first and `norm` then the output linear
    layer after the last; `residual` and `input_mlp` / `output_mlp` are then implied."""

    def __init__(
        self, cfg: ModelConfig, in_dim: int, num_classes: int, schema: HeteroSchema | None = None
    ) -> None:
        super().__init__()
        build = LAYERS.get(cfg.name)
        self.encoder = None
        if schema is not None:
            in_dim = TypedInputEncoder.width_for(schema, cfg.hidden, cfg.input_projection)
            self.encoder = TypedInputEncoder(schema, in_dim, cfg.input_projection)
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(
                f"model.activation {cfg.activation!r}: choose one of {sorted(ACTIVATIONS)}"
            )
        self.activation = ACTIVATIONS[cfg.activation]
        self.input_dropout = Dropout(cfg.input_dropout)
        self.dropout = Dropout(cfg.dropout)
        self.pre_norm = cfg.pre_norm
        self.input_linear = torch.nn.Linear(in_dim, cfg.hidden) if cfg.stem else None
        self.widths = dims = conv_widths(cfg, in_dim, num_classes)
        if self.pre_norm:  # each layer normalises, activates and adds its input itself
            self.num_hidden, self.skips = 0, None
            message = BLOCK_MESSAGES.get(cfg.name)
            self.layers = torch.nn.ModuleList(
                PreNormBlock(message(cfg.hidden, cfg), cfg, self.activation)
                for _ in range(cfg.layers)
            )
        else:
            self.num_hidden = cfg.layers if cfg.head else cfg.layers - 1  # normalised, activated
            self.layers = torch.nn.ModuleList(
                build(dims[i], dims[i + 1], cfg, i >= self.num_hidden, schema)
                for i in range(cfg.layers)
            )
            self.skips = (
                torch.nn.ModuleList(
                    torch.nn.Identity()
                    if dims[i] == dims[i + 1]
                    else torch.nn.Linear(dims[i], dims[i + 1], bias=False)
                    for i in range(cfg.layers)
                )
                if cfg.residual
                else None
            )
        self.norms = torch.nn.ModuleList(
            NORMALISATIONS[cfg.norm](dims[i + 1]) for i in range(self.num_hidden)
        )
        # A pre-normalised stack's residual stream is normalised once more at its end.
        self.output_norm = (
            NORMALISATIONS[cfg.norm](cfg.hidden) if self.pre_norm else torch.nn.Identity()
        )
        self.jk = cfg.jk
        head_in = cfg.hidden * cfg.layers if cfg.jk == "cat" else cfg.hidden
        self.output_linear = torch.nn.Linear(head_in, num_classes) if cfg.head else None

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
        h = self._input(self.input_dropout(x))
        outputs = []
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            if layer_input is not None:
                block, h = layer_input(i, block, h)
            out = layer(block, h)
            skip = None if self.skips is None else self.skips[i](h[: out.shape[0]])
            h = self._after(i, out, skip)
            if self.jk != "none":  # kept only for jumping knowledge
                outputs.append(h)
        return widened(self._head(outputs or [h]))  # float32 logits for the loss and metrics

    @staticmethod
    def dims_of(state: dict[str, torch.Tensor], layers: int) -> tuple[int, int]:
        """(input features, classes) of a `layers`-layer model's state dict: the first layer's
        weights take the input (rows of [out, in]), the last layer's biases are [classes]
        (the input and output linear layers' where the model has them)."""
        if "input_linear.weight" in state:
            first = [state["input_linear.weight"]]
        else:
            first = [
                t for k, t in state.items() if k.startswith("layers.0.") and k.endswith("weight")
            ]
        if "output_linear.bias" in state:
            last = [state["output_linear.bias"]]
        else:
            last = [
                t
                for k, t in state.items()
                if k.startswith(f"layers.{layers - 1}.") and k.endswith("bias")
            ]
        if not first or not last:
            raise KeyError(f"no weights of layers 0 and {layers - 1}")
        return int(first[0].shape[1]), int(last[0].numel())

    @property
    def around_layers(self) -> bool:
        """Whether any option around the layers is on (residual, norm, input or output
        linear layer, jumping knowledge)."""
        plain = isinstance(self.norms[0], torch.nn.Identity) if len(self.norms) else True
        return (
            self.skips is not None
            or not plain
            or self.input_linear is not None
            or self.output_linear is not None
        )

    def transforms(self, i: int) -> bool:
        """Whether layer i maps each vertex's row by itself first (gnnrun.models.registry):
        the layer's own linear map, or the input linear layer before layer 0."""
        return bool(getattr(self.layers[i], "project_first", False)) or (
            i == 0 and self.input_linear is not None
        )

    def transform(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Layer i's per-vertex step (for a layer that `transforms`), in float32. With
        `residual` and a layer that projects first, the rows carry each vertex's skip
        term after the projected ones (a vertex's own row is its destination's input)."""
        h = self._input(h) if i == 0 else h
        layer = self.layers[i]
        if not getattr(layer, "project_first", False):
            return widened(h)
        rows = layer.transform(h)
        if self.skips is not None:
            rows = torch.cat([rows, self.skips[i](h).to(rows.dtype)], dim=1)
        return widened(rows)

    def propagate(
        self,
        i: int,
        block: Block,
        rows: torch.Tensor,
        earlier: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The rest of layer i as `forward` applies it, from the transformed rows (or the
        input rows of a layer that does not `transform`), with the activation and
        dropout after a hidden layer, in float32. Layer-wise inference runs the stack a
        layer at a time: layer i over every vertex, then layer i + 1. With `jk`, the last
        layer also takes `earlier`: the outputs of layers 0 .. i - 1 at its destinations."""
        layer = self.layers[i]
        if i == 0 and self.input_linear is not None and not self.transforms(i):
            rows = self._input(rows)
        if getattr(layer, "project_first", False):
            skip = None
            if self.skips is not None:
                width = rows.shape[1] - self.widths[i + 1]  # the skip rows are the output's width
                rows, skip = rows[:, :width].contiguous(), rows[: block.num_dst, width:]
            out = layer.propagate(block, rows)
        else:
            out = layer(block, rows)
            skip = None if self.skips is None else self.skips[i](rows[: out.shape[0]])
        h = self._after(i, out, skip)
        if i < len(self.layers) - 1:
            return widened(h)
        if self.jk != "none" and (earlier is None or len(earlier) != i):
            raise ValueError(f"model.jk={self.jk}: the last layer needs the {i} earlier outputs")
        return widened(self._head([*(earlier or []), h]))

    def _input(self, h: torch.Tensor) -> torch.Tensor:
        """The input linear layer, activated and dropped out (`input_mlp`); in a
        pre-normalised stack dropped out, then activated (PreNormBlock's order)."""
        if self.input_linear is None:
            return h
        if self.pre_norm:
            return self.activation(self.dropout(self.input_linear(h)))
        return self._activate_and_drop(self.input_linear(h))

    def _after(self, i: int, out: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        """Layer i's output: a hidden layer's normalised, activated and dropped out; plus
        the skip term of its input (`residual`)."""
        if i < self.num_hidden:
            out = self._activate_and_drop(self.norms[i](out))
        return out if skip is None else out + skip.to(out.dtype)

    def _head(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        """Jumping knowledge over the layers' outputs (at the last layer's destinations,
        the first rows of every earlier output), then the output linear layer."""
        h = outputs[-1]
        if self.jk != "none":
            rows = [o[: h.shape[0]] for o in outputs]
            h = torch.cat(rows, dim=1) if self.jk == "cat" else torch.stack(rows).amax(dim=0)
        return h if self.output_linear is None else self.output_linear(self.output_norm(h))

    def _activate_and_drop(self, h: torch.Tensor) -> torch.Tensor:
        if self.activation is torch.relu:  # the common case, fused into one pass each way
            return relu_dropout(h, self.dropout.p, self.training)
        return self.dropout(self.activation(h))


class PreNormBlock(torch.nn.Module):
    """One layer of a pre-normalised stack (`model.block=pre_norm_ffn`; Platonov et al.,
    ICLR 2023, their ResidualModuleWrapper around a GNN module):

        h + dropout(W2 activation(dropout(W1 message(norm(h)) + b1)) + b2)

    where `message` is the model's aggregation without weights (BLOCK_MESSAGES: GCN's
    normalised sum, SAGE's own row beside its neighbours' mean, GAT's attention) and W1,
    W2 are a feed-forward network's linear maps to `hidden`. W1 after GCN's sum is
    GCNConv's linear map, after SAGE's pair SAGEConv's two; GAT's message has a
    projection of its own before the attention. Dropout comes before the activation, as
    in their feed-forward network (the same for ReLU, not for GELU)."""

    def __init__(self, message: torch.nn.Module, cfg: ModelConfig, activation) -> None:
        super().__init__()
        self.norm = NORMALISATIONS[cfg.norm](cfg.hidden)
        self.message = message
        self.linear_1 = torch.nn.Linear(message.out_dim, cfg.hidden)
        self.linear_2 = torch.nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = Dropout(cfg.dropout)
        self.activation = activation

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        m = self.message(block, self.norm(h))
        out = self.dropout(self.linear_2(self.activation(self.dropout(self.linear_1(m)))))
        return h[: out.shape[0]] + out.to(h.dtype)


# `model.norm` -> the normalisation of a hidden layer's output of the given width.
NORMALISATIONS: dict[str, Callable[[int], torch.nn.Module]] = {
    "none": lambda width: torch.nn.Identity(),
    "layer": torch.nn.LayerNorm,
    "batch": torch.nn.BatchNorm1d,
}


def layer_widths(cfg: ModelConfig, in_dim: int, num_classes: int) -> list[int]:
    """The width of the input, then of every layer's output as the stack passes it on (the
    last one after the output linear layer, where there is one)."""
    return [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]


def conv_widths(cfg: ModelConfig, in_dim: int, num_classes: int) -> list[int]:
    """The message-passing layers' widths: the first one's input (`hidden` after an input
    linear layer), then every layer's output (the last one `hidden` before an output
    linear layer)."""
    first = cfg.hidden if cfg.stem else in_dim
    last = cfg.hidden if cfg.head else num_classes
    return [first] + [cfg.hidden] * (cfg.layers - 1) + [last]


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
