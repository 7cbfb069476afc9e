"""`spmm1d`: MG-GCN's full-batch GCN on 1D row blocks, with planned buffers.

Each rank holds one row block of the renumbered graph (gnnrun.partition.block1d):
its rows of GCN's normalised adjacency Â, cut into P column tiles, and its rows
of the features. A GCN layer is out = Â H W + b. Its sparse product runs in P
broadcast stages (gnnrun.algorithms.spmm1d.staged); weights are replicated and their
gradients summed across ranks by the trainer (each rank's loss is its share of
the global mean). The dense product goes first when it narrows the width that
travels (out_dim < in_dim: Â (H W)), last otherwise ((Â H) W), as GCNConv
orders it.

With `algorithm.buffers=plan` (the default) one autograd node runs the whole
network, forward and backward, in L + 3 dense buffers of about n/P rows for L
layers, reused across layers, steps and between the two passes:

- `out_k`, one per layer: its output, activated and dropped out in place; in the
  backward pass the gradient of its pre-activation replaces it (the last
  layer's output, the logits, is allocated per step: the loss keeps it);
- `hw`: the dense side of the current product, H W or Â H forward, Â^T G
  backward;
- `bc0`, `bc1`: the two receive buffers of the staged product.

The backward pass of layer k, with G the gradient of its pre-activation, is the
paper's: S = Â^T G (a staged product at the layer's output width), dW = S^T H,
db = sum of G's rows, and for k > 0 dH = S W scaled by the activation's and
dropout's derivative, which ReLU after dropout reads off the output it
overwrites (output > 0, times 1 / (1 - p)). The input gradient of the first
layer is not computed. `model.input_dropout` > 0 adds one buffer, the
dropped-out input, which the first layer's weight gradient reads.

Without input dropout the input never changes: Â X is propagated once (purpose
`spmm1d_input`) and replaces X, and the first layer is (Â X) W + b, with
dW = G^T (Â X): the first layer runs no staged product, forward or backward
(MG-GCN skips the first layer's backward product by taking it as the identity,
which changes dW; this skips it exactly).

`algorithm.buffers=fresh` runs the same staged products through autograd, with
fresh tensors for every intermediate and every received block: the memory
baseline. Its backward of a layer that multiplies by W last sends the gradient
at the layer's input width (autograd differentiates (Â H) W as written), the
planned backward at its output width.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnrun.algorithms.base import AlgorithmConfig
from gnnrun.algorithms.full_batch import FullBatch
from gnnrun.algorithms.registry import ALGORITHMS
from gnnrun.algorithms.spmm1d.staged import StagedProduct
from gnnrun.config import check
from gnnrun.errors import GnnrunError
from gnnrun.ops.dropout import dropout, relu_dropout
from gnnrun.ops.spmm import stacked_tiles

BUFFER_MODES = ("plan", "fresh")
# Rows per chunk of the elementwise passes that would otherwise need a whole temporary.
CHUNK_ROWS = 4096


@dataclass
class Spmm1dConfig(AlgorithmConfig):
    mode: str = "full"
    # Broadcast the next stage's block while this stage's tile is multiplied (two
    # receive buffers); false: one stage after the other.
    overlap: bool = True
    # plan: L + 3 dense buffers reused across layers and passes; fresh: autograd with
    # fresh tensors (the memory baseline).
    buffers: str = "plan"

    def validate(self) -> None:
        super().validate()
        check(self.mode == "full", "algorithm.mode: spmm1d trains full batch (mode=full)")
        check(
            self.buffers in BUFFER_MODES,
            f"algorithm.buffers {self.buffers!r}: choose one of {', '.join(BUFFER_MODES)}",
        )


class DenseBuffers:
    """The dense row-block tensors a step allocates, counted while they are alive.

    `slot(name, rows, width)` is a persistent buffer, allocated once at `widths[name]`
    and viewed contiguously at any narrower width; `fresh()` allocates a counted
    tensor that lives as long as its references. A tensor's count ends when it is
    freed (weakref), so `peak` is the most that were alive at once.
    """

    def __init__(self, widths: dict[str, tuple[int, int]], device: torch.device) -> None:
        self.widths, self.device = widths, device
        self.slots: dict[str, torch.Tensor] = {}
        self.alive = self.peak = 0
        self.alive_bytes = self.peak_bytes = 0

    def slot(self, name: str, rows: int, width: int) -> torch.Tensor:
        if name not in self.slots:
            self.slots[name] = self.fresh(int(np.prod(self.widths[name])))
        flat = self.slots[name]
        return flat[: rows * width].view(rows, width)

    def fresh(self, *shape: int) -> torch.Tensor:
        return self.track(torch.empty(shape, dtype=torch.float32, device=self.device))

    def track(self, tensor: torch.Tensor) -> torch.Tensor:
        nbytes = tensor.numel() * tensor.element_size()
        self.alive += 1
        self.alive_bytes += nbytes
        self.peak = max(self.peak, self.alive)
        self.peak_bytes = max(self.peak_bytes, self.alive_bytes)
        weakref.finalize(tensor, self._freed, nbytes)
        return tensor

    def _freed(self, nbytes: int) -> None:
        self.alive -= 1
        self.alive_bytes -= nbytes

    def reset_peak(self) -> dict[str, float]:
        figures = {"dense_buffers_peak": self.peak, "dense_buffer_mb_peak": self.peak_bytes / 2**20}
        self.peak, self.peak_bytes = self.alive, self.alive_bytes
        return figures


class PlannedGCN:
    """The whole GCN forward and backward in the buffers of the module docstring."""

    def __init__(self, product: StagedProduct, dims: list[int], rows: int, device) -> None:
        self.product, self.dims, self.rows = product, dims, rows
        layers = len(dims) - 1
        widest = max(dims[1:])  # every staged product and `hw` are at most this wide
        block = max(product.block_rows)
        shapes = {f"out{k}": (rows, dims[k + 1]) for k in range(layers - 1)}
        shapes |= {"hw": (rows, widest), "bc0": (block, widest), "bc1": (block, widest)}
        self.buffers = DenseBuffers(shapes, device)
        self.inputs: torch.Tensor | None = None
        self.scale = 1.0
        self.propagated = False

    def receive(self, slot: int, rows: int, width: int) -> torch.Tensor:
        return self.buffers.slot(f"bc{slot}", rows, width)

    def output(self, k: int) -> torch.Tensor:
        if k == len(self.dims) - 2:
            return self.buffers.fresh(self.rows, self.dims[-1])
        return self.buffers.slot(f"out{k}", self.rows, self.dims[k + 1])

    def layer_input(self, k: int, x: torch.Tensor) -> torch.Tensor:
        """What layer k consumes: the input, then the previous layer's output buffer."""
        return x if k == 0 else self.output(k - 1)

    def forward(
        self, x: torch.Tensor, params, dropout_p: float, propagated: bool = False
    ) -> torch.Tensor:
        """The logits of this rank's rows; each layer's output stays in its buffer for
        the backward pass. `dropout_p`: between layers (0 when evaluating). `propagated`:
        x is already Â X, and the first layer is a dense product alone."""
        layers = len(self.dims) - 1
        self.scale = 1.0 / (1.0 - dropout_p)
        self.propagated = propagated
        for k in range(layers):
            weight, bias = params[2 * k], params[2 * k + 1]
            out = self.output(k)
            if k == 0 and propagated:
                torch.addmm(bias, x, weight.T, out=out)
            else:
                self._layer_forward(self.layer_input(k, x), weight, bias, out, k)
            if k < layers - 1:
                _relu_dropout_(out, dropout_p)
        return out

    def _layer_forward(self, h, weight, bias, out, k: int) -> None:
        d_in, d_out = self.dims[k], self.dims[k + 1]
        if d_out < d_in:  # Â (H W): W narrows what travels
            hw = self.buffers.slot("hw", self.rows, d_out)
            torch.mm(h, weight.T, out=hw)
            self.product.multiply(hw, out, self.receive, "spmm1d_forward")
            out += bias
        else:  # (Â H) W
            ah = self.buffers.slot("hw", self.rows, d_in)
            self.product.multiply(h, ah, self.receive, "spmm1d_forward")
            torch.addmm(bias, ah, weight.T, out=out)

    def backward(self, grad_logits: torch.Tensor, inputs: list[torch.Tensor], params) -> list:
        """Gradients of every weight and bias (in `params` order) from the logits' gradient;
        `inputs[k]` is what layer k consumed (the input, then the layers' outputs)."""
        layers = len(self.dims) - 1
        grads: list[torch.Tensor | None] = [None] * (2 * layers)
        g = grad_logits.contiguous()
        for k in reversed(range(layers)):
            if k == 0 and self.propagated:  # dW = G^T (Â X): no product
                grads[0], grads[1] = g.T @ inputs[0], g.sum(0)
                break
            s = self.buffers.slot("hw", self.rows, self.dims[k + 1])
            self.product.multiply(g, s, self.receive, "spmm1d_backward", transposed=True)
            grads[2 * k] = s.T @ inputs[k]
            grads[2 * k + 1] = g.sum(0)
            if k > 0:  # the gradient of layer k - 1's pre-activation replaces its output
                _masked_product_(s, params[2 * k], inputs[k], self.scale)
                g = inputs[k]
        return grads


def _relu_dropout_(h: torch.Tensor, p: float) -> None:
    """h = dropout(relu(h)) in place, one chunk of rows at a time."""
    if p == 0:
        h.relu_()
        return
    for rows in h.split(CHUNK_ROWS):
        rows.copy_(relu_dropout(rows, p, True))


def _masked_product_(s: torch.Tensor, weight: torch.Tensor, h: torch.Tensor, scale: float):
    """h = (s @ weight) where h > 0 (scaled by `scale`), else 0: the gradient through ReLU
    and dropout, whose kept entries are exactly the positive outputs; in place of h."""
    for s_rows, h_rows in zip(s.split(CHUNK_ROWS), h.split(CHUNK_ROWS), strict=True):
        kept = h_rows > 0
        torch.mm(s_rows, weight, out=h_rows)
        h_rows.mul_(kept).mul_(scale)


class _PlannedPass(torch.autograd.Function):
    """The planned network as one autograd node: the trainer's loss.backward() runs
    the planned backward pass."""

    @staticmethod
    def forward(ctx, net: PlannedGCN, dropout_p: float, propagated: bool, x: torch.Tensor, *params):
        ctx.net, ctx.x, ctx.params = net, x, params
        return net.forward(x, params, dropout_p, propagated)

    @staticmethod
    def backward(ctx, grad_logits):
        net = ctx.net
        inputs = [net.layer_input(k, ctx.x) for k in range(len(net.dims) - 1)]
        return (None, None, None, None, *net.backward(grad_logits, inputs, ctx.params))


class _StagedAutograd(torch.autograd.Function):
    """One staged product with fresh tensors; its gradient is the transposed product."""

    @staticmethod
    def forward(ctx, product: StagedProduct, h: torch.Tensor) -> torch.Tensor:
        ctx.product = product
        out = torch.empty_like(h)
        return product.multiply(h.contiguous(), out, _fresh_receive(h), "spmm1d_forward")

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return None, None
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        receive = _fresh_receive(grad)
        return None, ctx.product.multiply(grad, out, receive, "spmm1d_backward", transposed=True)


def _fresh_receive(like: torch.Tensor):
    def receive(slot: int, rows: int, width: int) -> torch.Tensor:
        return like.new_empty((rows, width))

    return receive


# Models whose layer is Â H W + b with GCN's normalisation, which the partition stores.
SUPPORTED_MODELS = ("gcn",)


def _options_around_layers(model) -> list[str]:
    """The model options around the layers (gnnrun.models.gnn) that `model` turns on."""
    defaults = {
        "residual": False,
        "norm": "none",
        "input_mlp": False,
        "output_mlp": False,
        "block": "post_norm",
    }
    on = [
        f"model.{k}={str(getattr(model, k)).lower()}"
        for k, off in defaults.items()
        if getattr(model, k) != off
    ]
    return on + ([f"model.jk={model.jk}"] if model.jk != "none" else [])


@ALGORITHMS.register("spmm1d", Spmm1dConfig)
class Spmm1d(FullBatch):
    partition_kind = "block1d"

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.model.name not in SUPPORTED_MODELS:
            raise GnnrunError(
                f"algorithm=spmm1d trains GCN (its partition stores GCN's normalised adjacency), "
                f"not model.name={cfg.model.name!r}: use model=gcn"
            )
        around = _options_around_layers(cfg.model)
        if around:
            raise GnnrunError(
                f"algorithm=spmm1d computes a plain GCN stack by hand, without "
                f"{' '.join(around)}: leave them out, or train with algorithm=single, sar or "
                "cd0, which take them"
            )
        if cfg.model.activation != "relu":
            raise GnnrunError(
                f"algorithm=spmm1d computes GCN's gradients by hand for ReLU, not "
                f"model.activation={cfg.model.activation}: use model.activation=relu"
            )

    def __init__(self, cfg, comm, timer) -> None:
        super().__init__(cfg, comm, timer)
        _, book, part = self.open_part(cfg, comm)
        block_rows = [figures["rows"] for figures in book.manifest["parts"]]
        tiles = stacked_tiles(
            part["tile_indptr"], part["tile_indices"], part["tile_values"], block_rows, self.device
        )
        transposed = tiles
        if "tile_t_indptr" in part.arrays:
            transposed = stacked_tiles(
                part["tile_t_indptr"],
                part["tile_t_indices"],
                part["tile_t_values"],
                block_rows,
                self.device,
            )
        self.product = StagedProduct(
            tiles, transposed, block_rows, comm, timer, cfg.algorithm.overlap
        )
        self.rows = block_rows[comm.rank]
        self.nodes = torch.from_numpy(np.array(part["nodes"], dtype=np.int64))
        self.planned = cfg.algorithm.buffers == "plan"
        self.net: PlannedGCN | None = None
        # Â X, computed once where the input never changes (no input dropout); it then
        # replaces X, which nothing reads again.
        self.propagated_x: torch.Tensor | None = None
        self.fixed_input = cfg.model.input_dropout == 0

    def logits(self, model: torch.nn.Module) -> torch.Tensor:
        """This rank's rows' logits, in its local order (`self.nodes` gives original ids)."""
        if self.fixed_input and self.propagated_x is None:
            x = self.x.contiguous()
            out = torch.empty_like(x)
            with torch.no_grad():
                self.product.multiply(x, out, _fresh_receive(x), "spmm1d_input")
            self.propagated_x, self.x = out, None
        if self.planned:
            return self._planned_logits(model)
        return self._fresh_logits(model)

    def _planned_logits(self, model) -> torch.Tensor:
        if self.net is None:
            dims = [self.in_dim] + [layer.linear.out_features for layer in model.layers]
            self.net = PlannedGCN(self.product, dims, self.rows, self.device)
        propagated = self.propagated_x is not None
        x = self.propagated_x if propagated else self.x
        if model.training and self.cfg.model.input_dropout > 0:
            x = self.net.buffers.track(dropout(x, self.cfg.model.input_dropout))
        p = self.cfg.model.dropout if model.training else 0.0
        params = [t for layer in model.layers for t in (layer.linear.weight, layer.bias)]
        return _PlannedPass.apply(self.net, p, propagated, x, *params)

    def _fresh_logits(self, model) -> torch.Tensor:
        propagated = self.propagated_x is not None
        h = self.propagated_x if propagated else model.input_dropout(self.x)
        for k, layer in enumerate(model.layers):
            if k == 0 and propagated:  # (Â X) W + b: autograd runs no product for it
                h = torch.addmm(layer.bias, h, layer.linear.weight.T)
            elif layer.project_first:
                h = _StagedAutograd.apply(self.product, layer.linear(h)) + layer.bias
            else:
                h = torch.addmm(
                    layer.bias, _StagedAutograd.apply(self.product, h), layer.linear.weight.T
                )
            if k < len(model.layers) - 1:
                h = relu_dropout(h, model.dropout.p, model.training)
        return h

    def epoch_figures(self) -> dict[str, Any]:
        return self.net.buffers.reset_peak() if self.net is not None else {}

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        logits = self.logits(model).cpu()
        label = self.label.cpu()
        return {split: (logits[ids], label[ids]) for split, ids in self.eval_ids.items()}
