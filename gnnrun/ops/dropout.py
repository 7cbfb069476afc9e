"""Dropout whose mask is a hash of (key, element index): one fused pass, nothing stored.

torch's CPU dropout draws a Bernoulli variable per element from one generator
(about 30 ns per element here) and keeps the mask for the backward pass; it
was the largest single cost of a training step. Here element i is dropped when
its 16-bit lane of splitmix64(key + (i // 4) * golden) falls below
round(p * 65536), so the mask costs a hash per 4 elements, is computed in
parallel, and is recomputed in the backward pass from the key. The key comes
from torch's generator, so seeded runs repeat. A bfloat16 x stays bfloat16
(scaled in float32, rounded once). `dropout_reference` (NumPy) is the oracle
for kernels/dropout.cpp. Off the CPU (GPU ranks), and without a compiler, the
same mask comes from `keep_mask`, the hash in torch's int64 operations on the
tensor's device: a GPU run drops the same elements as a CPU run with the same
seed, so the two train alike.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnrun.ops.native import native_op
from gnnrun.ops.precision import widened

GOLDEN = 0x9E3779B97F4A7C15
KEY_BITS = 62


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element with probability p, scale the rest by 1 / (1 - p)."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must be in [0, 1), not {p}")
    x = _kernel_input(x)
    if not training or p == 0:
        return x
    key = int(torch.randint(0, 1 << KEY_BITS, (1,)))
    return _Dropout.apply(x, p, key)


def relu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """dropout(relu(x), p): one pass forward, one backward (the mask is read off the output)."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must be in [0, 1), not {p}")
    x = _kernel_input(x)
    forward = native_op("relu_dropout_forward", "dropout")
    if not training or p == 0 or forward is None or not _native_dtype(x):
        return dropout(torch.relu(x), p, training)
    key = int(torch.randint(0, 1 << KEY_BITS, (1,)))
    return _ReluDropout.apply(x, p, key)


def _native_dtype(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64, torch.bfloat16)


def _kernel_input(x: torch.Tensor) -> torch.Tensor:
    """bfloat16 kept where the kernels are built; widened to float32 for the NumPy fallback."""
    if x.dtype == torch.bfloat16 and native_op("dropout_apply", "dropout") is None:
        return widened(x)
    return x


def _threshold(p: float) -> int:
    return round(p * 65536)


def _apply(x: torch.Tensor, p: float, key: int) -> torch.Tensor:
    op = native_op("dropout_apply", "dropout")
    scale = 1.0 / (1.0 - p)
    if op is None or not _native_dtype(x):
        keep = keep_mask(x.numel(), p, key, x.device).reshape(x.shape)
        scaled = x * scale
        return torch.where(keep, scaled, scaled * 0)  # NaN and inf propagate
    return op(x, key, _threshold(p), scale)


def _signed(constant: int) -> int:
    """A 64-bit unsigned constant as the int64 of the same bits."""
    return constant - (1 << 64) if constant >= 1 << 63 else constant


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """The logical (unsigned) right shift of int64 bits: >> on int64 is arithmetic."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def keep_mask(n: int, p: float, key: int, device: torch.device) -> torch.Tensor:
    """Which of n elements dropout keeps: the kernel's mask, computed with torch's int64
    operations on `device` (whose products and sums wrap as uint64's do)."""
    groups = torch.arange((n + 3) // 4, dtype=torch.int64, device=device)
    z = (groups + 1) * _signed(GOLDEN) + _signed(key)
    z = (z ^ _shift_right(z, 30)) * _signed(0xBF58476D1CE4E5B9)
    z = (z ^ _shift_right(z, 27)) * _signed(0x94D049BB133111EB)
    z = z ^ _shift_right(z, 31)
    shifts = torch.arange(4, dtype=torch.int64, device=device) * 16
    # The low 16 bits of a shift by at most 48 hold none of the sign's copies.
    lanes = (z[:, None] >> shifts) & 0xFFFF
    return lanes.reshape(-1)[:n] >= _threshold(p)


def dropout_reference(x: torch.Tensor, p: float, key: int) -> torch.Tensor:
    """The same mask as the kernel, in NumPy: slow, obviously right."""
    n = x.numel()
    groups = np.arange((n + 3) // 4, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + groups * np.uint64(GOLDEN) + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    lanes = (z[:, None] >> (np.arange(4, dtype=np.uint64) * np.uint64(16))) & np.uint64(0xFFFF)
    keep = torch.from_numpy(lanes.reshape(-1)[:n] >= _threshold(p)).reshape(x.shape)
    scaled = x * (1.0 / (1.0 - p))
    return torch.where(keep.to(x.device), scaled, scaled * 0)  # NaN and inf propagate


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, key: int) -> torch.Tensor:
        ctx.p, ctx.key = p, key
        return _apply(x, p, key)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _apply(grad, ctx.p, ctx.key), None, None


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, key: int) -> torch.Tensor:
        scale = 1.0 / (1.0 - p)
        out = native_op("relu_dropout_forward", "dropout")(x, key, _threshold(p), scale)
        ctx.scale = scale
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        backward = native_op("relu_dropout_backward", "dropout")
        return backward(grad, out, ctx.scale), None, None
