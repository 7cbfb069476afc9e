"""Hashed dropout: the native kernel equals its reference; rate, scale, gradient, determinism."""

from __future__ import annotations

import pytest
import torch

from gnnrun.ops.dropout import (
    _apply,
    _Dropout,
    _ReluDropout,
    dropout,
    dropout_reference,
    keep_mask,
    relu_dropout,
)
from gnnrun.ops.native import load_kernel_file


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 7007])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_native_equals_reference(dtype, n, p):
    if not load_kernel_file("dropout"):
        pytest.skip("native kernels could not be built here (no compiler)")
    x = torch.randn(n, dtype=dtype)
    assert torch.equal(_apply(x, p, 987654321), dropout_reference(x, p, 987654321))


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
def test_drop_rate_and_scale(p):
    x = torch.rand(400, 500) + 1.0  # no zeros of its own
    y = dropout(x, p)
    dropped = y == 0
    assert dropped.double().mean().item() == pytest.approx(p, abs=0.01)
    torch.testing.assert_close(y[~dropped], x[~dropped] / (1 - p))


def test_gradient_uses_the_forward_mask():
    x = torch.randn(64, 9, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.4)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad == 0, y == 0)
    # With one key (gradcheck calls the function many times).
    assert torch.autograd.gradcheck(lambda t: _Dropout.apply(t, 0.4, 12345), (x,))


def test_seeded_calls_repeat_and_successive_calls_differ():
    x = torch.randn(1000)
    torch.manual_seed(7)
    first, second = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(7)
    assert torch.equal(dropout(x, 0.5), first)
    assert not torch.equal(first, second)


def test_identity_when_off_and_bad_rates_refused():
    x = torch.randn(10)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        dropout(x, 1.0)


def test_reference_fallback_without_native(monkeypatch):
    x = torch.randn(333)
    torch.manual_seed(1)
    native = dropout(x, 0.3)
    monkeypatch.setenv("GNNRUN_NO_NATIVE", "1")
    load_kernel_file.cache_clear()
    try:
        torch.manual_seed(1)
        assert torch.equal(dropout(x, 0.3), native)
    finally:
        monkeypatch.delenv("GNNRUN_NO_NATIVE")
        load_kernel_file.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 5, 7007])
def test_fused_relu_dropout_equals_relu_then_dropout(dtype, n):
    if not load_kernel_file("dropout"):
        pytest.skip("native kernels could not be built here (no compiler)")
    x = torch.randn(n, dtype=dtype, requires_grad=True)
    torch.manual_seed(5)
    fused = relu_dropout(x, 0.3)
    fused.backward(torch.arange(n, dtype=dtype))
    fused_grad, x.grad = x.grad, None
    torch.manual_seed(5)
    plain = dropout(torch.relu(x), 0.3)
    plain.backward(torch.arange(n, dtype=dtype))
    assert torch.equal(fused, plain)
    assert torch.equal(fused_grad, x.grad)
    assert torch.autograd.gradcheck(
        lambda t: _ReluDropout.apply(t, 0.3, 99),
        (torch.randn(40, dtype=torch.float64, requires_grad=True),),
    )
    assert torch.equal(relu_dropout(x, 0.3, training=False), torch.relu(x))


def test_nan_and_inf_propagate_as_through_torch():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0] * 64)
    for p in (0.5, 0.9):
        assert dropout(x, p).isnan().sum() >= 64  # every NaN, dropped or kept
        assert relu_dropout(x, p).isnan().sum() >= 64


@pytest.mark.parametrize("key", [0, 1, 987654321, (1 << 62) - 1])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 7007])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_device_mask_equals_the_reference(key, n, p):
    """GPU ranks draw dropout's mask with torch's int64 operations (here on CPU tensors):
    the same elements as the kernel's hash, so a GPU run drops what a CPU run drops."""
    expected = dropout_reference(torch.ones(n), p, key) != 0
    assert torch.equal(keep_mask(n, p, key, torch.device("cpu")), expected)
