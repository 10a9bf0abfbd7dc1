"""The cheap-mask dropout: unbiased, the right drop rate, identity in eval, exact gradient,
seeded, and a drop-in where nn.Dropout was."""

import pytest
import torch

from seqlab.nn.dropout import Dropout, dropout, keep_mask, quantised_drop_probability


def test_quantised_probability():
    assert quantised_drop_probability(0.1) == 6554 / 65536
    assert quantised_drop_probability(0.5) == 0.5


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_drop_rate_and_unbiased_mean(p):
    torch.manual_seed(0)
    n = 1_000_003  # not a multiple of 4: the last 64-bit word is only partly used
    m = keep_mask(torch.Size([n]), p, torch.device("cpu"))
    rate = 1 - m.float().mean().item()
    # binomial standard deviation sqrt(p(1-p)/n) ≤ 5e-4: 6 sigma
    assert abs(rate - quantised_drop_probability(p)) < 3e-3
    x = torch.ones(n)
    assert abs(dropout(x, p).mean().item() - 1.0) < 6e-3 / (1 - p)


def test_masks_differ_between_calls_and_positions_are_independent():
    torch.manual_seed(0)
    a = keep_mask(torch.Size([4, 10000]), 0.5, torch.device("cpu"))
    b = keep_mask(torch.Size([4, 10000]), 0.5, torch.device("cpu"))
    assert not torch.equal(a, b)
    # the 4 int16 slices of one 64-bit word feed 4 neighbouring elements: no correlation
    flat = a.flatten().float()
    corr = torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1].item()
    assert abs(corr) < 0.03


def test_eval_identity_and_zero_p():
    x = torch.randn(3, 5)
    layer = Dropout(0.3).eval()
    assert layer(x) is x
    assert dropout(x, 0.0) is x


def test_values_and_gradient_are_mask_times_scale():
    torch.manual_seed(1)
    x = torch.randn(64, 33, dtype=torch.float64, requires_grad=True)
    y = dropout(x, 0.25)
    kept = y != 0
    scale = 1 / (1 - quantised_drop_probability(0.25))
    torch.testing.assert_close(y[kept], x[kept] * scale, atol=1e-12, rtol=0)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.double() * scale, atol=1e-12, rtol=0)


def test_seeded_and_dtype_preserved():
    x = torch.randn(8, 16).bfloat16()
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    assert torch.equal(a, b) and a.dtype == torch.bfloat16


def test_rejects_bad_p():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bit_identical_to_the_product_and_only_a_bool_mask_is_saved(dtype):
    """The autograd function gives exactly x * m * s and its autograd gradient, and keeps
    one bool per element for the backward (not the mask in x's dtype)."""
    x = torch.randn(32, 48, dtype=dtype, requires_grad=True)
    g = torch.randn(32, 48, dtype=dtype)
    torch.manual_seed(5)
    saved: list[torch.Tensor] = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = dropout(x, 0.3)
    (grad,) = torch.autograd.grad(y, x, g)
    torch.manual_seed(5)
    keep = keep_mask(x.shape, 0.3, x.device)
    scale = 1.0 / (1.0 - quantised_drop_probability(0.3))
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = x_ref * keep.to(dtype) * scale  # the expression it replaces
    (grad_ref,) = torch.autograd.grad(y_ref, x_ref, g)
    assert torch.equal(y, y_ref) and torch.equal(grad, grad_ref)
    assert [(t.dtype, t.shape) for t in saved] == [(torch.bool, x.shape)]
