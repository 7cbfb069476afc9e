"""bfloat16 training: dense layers in bf16, gnnrun's own ops in float32.

With `train.precision=bf16` the trainer runs each forward pass under torch's
CPU (or CUDA) autocast: matrix products (`nn.Linear`, `@`, `addmm`) compute in
bfloat16 with float32 accumulation, which on CPUs with AVX-512 BF16 or AMX runs
the GEMMs 2-3x faster than float32; parameters, gradients and the
optimizer state stay float32. gnnrun's own ops (aggregation, attention,
dropout) take float32: a bfloat16 input, a GEMM's output, is widened on entry
(`widened`), so their kernels accumulate and store in float32 exactly as in a
float32 run, and what they hand to the next layer is float32.
"""

from __future__ import annotations

import contextlib

import torch


def widened(x: torch.Tensor) -> torch.Tensor:
    """x as float32 when it is bfloat16 (differentiable: the gradient flows back in bf16)."""
    return x.float() if x.dtype == torch.bfloat16 else x


def bf16_matmul_supported() -> bool:
    """Whether this CPU runs bfloat16 GEMMs natively (AVX-512 BF16 or AMX), through oneDNN."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context a forward pass of `precision` runs in (nothing for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
