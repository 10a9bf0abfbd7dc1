"""GLU (Dauphin 2017) and the ConvS2S block (Gehring 2017)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqlab.nn.glu import GLU, ConvGLUBlock, glu, residual_scale

D64 = torch.float64


def test_glu_golden_value():
    # x = [A B] = [1, −2 | 0, ln 3]: σ(0) = 1/2, σ(ln 3) = 3/4
    x = torch.tensor([1.0, -2.0, 0.0, math.log(3.0)], dtype=D64)
    expected = torch.tensor([0.5, -1.5], dtype=D64)
    torch.testing.assert_close(glu(x), expected, atol=1e-15, rtol=0)
    torch.testing.assert_close(GLU()(x), expected, atol=1e-15, rtol=0)


@pytest.mark.parametrize("dim", [-1, 1])
def test_glu_fused_equals_readable_values_and_grads(dim):
    x = torch.randn(2, 6, 4, dtype=D64, requires_grad=True)
    y_fast, y_read = GLU(dim)(x), glu(x, dim)
    assert y_fast.shape[dim] == x.shape[dim] // 2
    torch.testing.assert_close(y_fast, y_read, atol=1e-12, rtol=0)
    g = torch.randn_like(y_read)
    (gx_fast,) = torch.autograd.grad(y_fast, x, g)
    (gx_read,) = torch.autograd.grad(y_read, x, g)
    torch.testing.assert_close(gx_fast, gx_read, atol=1e-12, rtol=0)


def test_glu_linear_path_has_no_down_scaling():
    # notes 002: ∇[A ⊗ σ(B)] w.r.t. A is σ(B) exactly (no σ′ or tanh′ factor on that path)
    A = torch.randn(5, dtype=D64, requires_grad=True)
    B = torch.randn(5, dtype=D64)
    (gA,) = torch.autograd.grad(glu(torch.cat([A, B])).sum(), A)
    torch.testing.assert_close(gA, torch.sigmoid(B), atol=1e-15, rtol=0)


def _block(C=4, k=3, causal=False, dropout=0.0) -> ConvGLUBlock:
    return ConvGLUBlock(C, k, dropout=dropout, causal=causal).double().eval()


@pytest.mark.parametrize("causal", [False, True])
def test_block_equals_window_formula(causal):
    """h_i = (v(W ĥ_i + b) + x_i)·√0.5 with ĥ_i the concatenated k-window (notes 002)."""
    C, k, T = 3, 3, 5
    block = _block(C, k, causal)
    x = torch.randn(2, T, C, dtype=D64)
    W = block.conv.weight.permute(0, 2, 1).reshape(2 * C, k * C)  # (2C, k·C), W[o, τ·C + c]
    left = k - 1 if causal else (k - 1) // 2
    x_pad = F.pad(x, (0, 0, left, k - 1 - left))  # (B, T + k − 1, C)
    rows = []
    for i in range(T):
        h_hat = x_pad[:, i : i + k].reshape(2, k * C)  # (B, k·C) window [x_{i−…}, …]
        Y = h_hat @ W.T + block.conv.bias  # (B, 2C) = [A B]
        A, B = Y[:, :C], Y[:, C:]
        rows.append((A * torch.sigmoid(B) + x[:, i]) * math.sqrt(0.5))
    torch.testing.assert_close(block(x), torch.stack(rows, 1), atol=1e-12, rtol=0)


def test_residual_scaling_present():
    assert residual_scale == math.sqrt(0.5)
    block = _block()
    with torch.no_grad():
        block.conv.weight.zero_()
        block.conv.bias.zero_()
    x = torch.randn(2, 5, 4, dtype=D64)
    torch.testing.assert_close(block(x), x * math.sqrt(0.5), atol=1e-15, rtol=0)  # A = 0


def test_causal_block_ignores_future_encoder_does_not():
    x = torch.randn(2, 8, 4, dtype=D64)
    x2 = x.clone()
    x2[:, 5:] += 1.0
    dec, enc = _block(causal=True), _block(causal=False)
    torch.testing.assert_close(dec(x2)[:, :5], dec(x)[:, :5], atol=0, rtol=0)
    assert not torch.allclose(dec(x2)[:, 5:], dec(x)[:, 5:])
    assert not torch.allclose(enc(x2)[:, 4], enc(x)[:, 4])  # encoder position 4 sees x_5


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_step_equals_full_causal_forward(k):
    block = ConvGLUBlock(4, k, dropout=0.2, causal=True).double().eval()
    x = torch.randn(2, 7, 4, dtype=D64)
    full = block(x)
    buffer, steps = None, []
    for t in range(7):
        y_t, buffer = block.step(x[:, t], buffer)
        assert buffer.shape == (2, k - 1, 4)
        steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-12, rtol=0)
    torch.testing.assert_close(buffer, x[:, 7 - (k - 1) :], atol=0, rtol=0)  # last k − 1 inputs


def test_step_needs_causal_and_encoder_needs_odd_kernel():
    with pytest.raises(RuntimeError, match="causal"):
        _block(causal=False).step(torch.randn(2, 4, dtype=D64))
    with pytest.raises(ValueError, match="odd kernel"):
        ConvGLUBlock(4, 2, causal=False)


@pytest.mark.parametrize("causal", [False, True])
def test_block_gradcheck(causal):
    block = _block(3, 3, causal)
    x = torch.randn(2, 4, 3, dtype=D64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))


def test_paper_init():
    C, k, dropout = 64, 5, 0.2
    block = ConvGLUBlock(C, k, dropout=dropout)
    std = math.sqrt(4 * (1 - dropout) / (k * C))  # Gehring §3.5
    w = block.conv.weight
    assert w.shape == (2 * C, C, k)
    assert abs(w.std().item() / std - 1) < 0.03  # 40 960 samples: sampling error ≈ 0.35 %
    assert abs(w.mean().item()) < 0.03 * std
    assert torch.count_nonzero(block.conv.bias) == 0


def test_dropout_only_in_training():
    block = ConvGLUBlock(4, 3, dropout=0.5)
    x = torch.randn(2, 6, 4)
    block.eval()
    torch.testing.assert_close(block(x), block(x), atol=0, rtol=0)
    block.train()
    assert not torch.allclose(block(x), block(x))
