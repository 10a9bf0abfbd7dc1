"""token_cross_entropy: the readable formula == F.cross_entropy, and the fused fast path ==
the readable path (values and gradients; float64 exactly, bf16 within bf16 rounding)."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.tasks.base import token_cross_entropy


def _batch(dtype=torch.float64, V=11):
    logits = torch.randn(3, 5, V, dtype=dtype, requires_grad=True)
    target = torch.randint(1, V, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    return logits, target


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_readable_path_equals_torch_cross_entropy(eps):
    logits, target = _batch()
    out = token_cross_entropy(logits, target, pad_id=0, label_smoothing=eps, fused=False)
    ref = F.cross_entropy(
        logits.flatten(0, 1), target.flatten(), ignore_index=0, reduction="sum", label_smoothing=eps
    )
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0, reduction="sum")
    torch.testing.assert_close(out.loss_sum, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(out.nll_sum, nll.detach(), atol=1e-10, rtol=0)
    assert out.n_tokens == int((target != 0).sum()) == 9
    (g,) = torch.autograd.grad(out.loss_sum, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=0)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_path_equals_readable_path_float64(eps):
    logits, target = _batch()
    fast = token_cross_entropy(logits, target, 0, eps, fused=True)
    slow = token_cross_entropy(logits, target, 0, eps, fused=False)
    torch.testing.assert_close(fast.loss_sum, slow.loss_sum.float(), atol=1e-5, rtol=0)
    torch.testing.assert_close(fast.nll_sum, slow.nll_sum.float(), atol=1e-5, rtol=0)
    assert fast.n_tokens == slow.n_tokens
    (g_fast,) = torch.autograd.grad(fast.loss_sum, logits)
    (g_slow,) = torch.autograd.grad(slow.loss_sum, logits)
    torch.testing.assert_close(g_fast, g_slow, atol=1e-12, rtol=0)
    assert g_fast[target == 0].abs().max() == 0  # padding rows get no gradient


def test_fused_path_in_bf16_matches_fp32_reference_to_bf16_rounding():
    torch.manual_seed(0)
    logits32, target = _batch(torch.float32, V=1000)
    with torch.no_grad():
        logits32.mul_(3.0)
    logits16 = logits32.detach().bfloat16().requires_grad_()
    ref = token_cross_entropy(logits16.detach().float().requires_grad_(), target, 0, 0.1, False)
    fast = token_cross_entropy(logits16, target, 0, 0.1, fused=True)
    assert fast.loss_sum.dtype == fast.nll_sum.dtype == torch.float32
    # per-token losses are rounded to bf16 (8 bits) before the fp32 sum: relative 2⁻⁸ each
    torch.testing.assert_close(fast.loss_sum, ref.loss_sum, rtol=2**-8, atol=0)
    torch.testing.assert_close(fast.nll_sum, ref.nll_sum, rtol=2**-8, atol=0)
    (g16,) = torch.autograd.grad(fast.loss_sum, logits16)
    x = logits16.detach().float().requires_grad_()
    (g32,) = torch.autograd.grad(token_cross_entropy(x, target, 0, 0.1, False).loss_sum, x)
    # the gradient is as close to fp32 as bf16 can hold it: relative error ≈ that of rounding
    err = (g16.float() - g32).norm() / g32.norm()
    rounding = (g32.bfloat16().float() - g32).norm() / g32.norm()
    assert err < 2 * rounding + 1e-6, (float(err), float(rounding))


def test_bf16_logits_give_fp32_loss_on_both_paths():
    logits = torch.randn(2, 4, 7).bfloat16()
    for fused in (True, False):
        out = token_cross_entropy(logits, torch.randint(1, 7, (2, 4)), 0, 0.1, fused=fused)
        assert out.loss_sum.dtype == torch.float32
