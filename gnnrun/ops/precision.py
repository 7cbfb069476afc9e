"""bfloat16 training: dense layers and the features between them in bf16, sums in float32.

With `train.precision=bf16` the trainer runs each forward pass under torch's
CPU (or CUDA) autocast: matrix products (`nn.Linear`, `@`, `addmm`) compute in
bfloat16 with float32 accumulation, which on CPUs with AVX-512 BF16 or AMX runs
the GEMMs 2-3x faster than float32; parameters, gradients and the
optimizer state stay float32. A GEMM's bfloat16 output stays bfloat16 through
gnnrun's dropout and aggregation kernels, which read and write half the bytes
of float32 and compute in float32 (an aggregation sums a row's edges in float32
and rounds once); per-row factors (degree normalisations) stay float32
(`factor_dtype`). Where a kernel takes no bfloat16 (aggregation rows outside 16
to 256 columns, vertex-cut and edge-cut parts, attention), the input is
widened to float32 on entry (`widened`). The model's output is float32 for the
loss and the metrics.
"""

from __future__ import annotations

import contextlib

import torch


def widened(x: torch.Tensor) -> torch.Tensor:
    """x as float32 when it is bfloat16 (differentiable: the gradient flows back in bf16)."""
    return x.float() if x.dtype == torch.bfloat16 else x


def factor_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype of per-row factors (degree normalisations) for rows of x: float32 for
    bfloat16 rows, which the kernels scale in float32."""
    return torch.float32 if x.dtype == torch.bfloat16 else x.dtype


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
