"""seqlab.nn.smoothed_cross_entropy: the softmax-once loss == F.cross_entropy (values, NLL,
gradients; float64 exactly, bf16 within bf16 rounding), padding, extremes, dispatch."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.nn import smoothed_cross_entropy as sce_mod
from seqlab.nn.smoothed_cross_entropy import (
    SmoothedCrossEntropy,
    smoothed_cross_entropy,
    torch_cross_entropy,
)
from seqlab.tasks.base import token_cross_entropy


def _case(N=9, V=13, dtype=torch.float64, ignore=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (3 * torch.randn(N, V, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    y[y == ignore] = 1 if ignore != 1 else 2
    y[2 % N] = ignore
    if N > 5:
        y[5] = ignore
    return x, y


def _reference(x, y, ignore, eps):
    loss = F.cross_entropy(x, y, ignore_index=ignore, label_smoothing=eps, reduction="none")
    nll = F.cross_entropy(x, y, ignore_index=ignore, reduction="none")
    return loss, nll


@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("ignore", [0, -100])
def test_equals_torch_cross_entropy_float64(eps, ignore):
    x, y = _case(ignore=ignore)
    loss, nll = SmoothedCrossEntropy.apply(x, y, ignore, eps)
    ref_loss, ref_nll = _reference(x, y, ignore, eps)
    assert loss.dtype == nll.dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(nll, ref_nll.detach(), atol=1e-12, rtol=0)
    w = torch.rand(x.size(0), dtype=torch.float64)  # a different upstream gradient per token
    (g,) = torch.autograd.grad((loss * w).sum(), x)
    (g_ref,) = torch.autograd.grad((ref_loss * w).sum(), x)
    torch.testing.assert_close(g, g_ref, atol=1e-12, rtol=0)
    assert not nll.requires_grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradcheck(eps):
    x, y = _case(N=5, V=7)
    assert torch.autograd.gradcheck(lambda x: SmoothedCrossEntropy.apply(x, y, 0, eps)[0], (x,))


def test_ignored_rows_get_zero_loss_nll_and_gradient():
    x, y = _case(ignore=-100)
    loss, nll = SmoothedCrossEntropy.apply(x, y, -100, 0.1)
    keep = y != -100
    assert loss[~keep].abs().max() == 0 and nll[~keep].abs().max() == 0
    (g,) = torch.autograd.grad(loss.sum(), x)
    assert g[~keep].abs().max() == 0
    assert g[keep].abs().min() > 0


def test_far_below_the_maximum_the_loss_stays_finite_and_exact():
    # x_y 200 nats under the row maximum: p_y underflows float32; lse comes from p_max
    x = torch.zeros(3, 6)
    x[:, 0] = 200.0
    y = torch.tensor([1, 2, 0])
    x64 = x.double().requires_grad_()
    for eps in (0.0, 0.1):
        loss, nll = SmoothedCrossEntropy.apply(x.requires_grad_(), y, -100, eps)
        ref_loss, ref_nll = _reference(x64, y, -100, eps)
        assert torch.isfinite(loss).all()
        torch.testing.assert_close(loss.double(), ref_loss.detach(), atol=1e-4, rtol=1e-6)
        torch.testing.assert_close(nll.double(), ref_nll.detach(), atol=1e-4, rtol=1e-6)


def test_bf16_under_autocast_is_as_close_as_bf16_allows():
    torch.manual_seed(0)
    N, V = 300, 2000
    x32 = 3 * torch.randn(N, V)
    y = torch.randint(1, V, (N,))
    y[::10] = 0
    x16 = x32.bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, nll = SmoothedCrossEntropy.apply(x16, y, 0, 0.1)
    assert loss.dtype == nll.dtype == torch.float32
    x64 = x16.detach().double().requires_grad_()
    ref_loss, ref_nll = _reference(x64, y, 0, 0.1)
    # lse from the bf16-rounded max p: 2⁻⁹ nats; the bf16 row sum adds ε·|mean x|·2⁻⁸
    torch.testing.assert_close(loss.double(), ref_loss.detach(), atol=2**-8, rtol=0)
    torch.testing.assert_close(nll.double(), ref_nll.detach(), atol=2**-8, rtol=0)
    (g16,) = torch.autograd.grad(loss.sum(), x16)
    assert g16.dtype == torch.bfloat16
    (g64,) = torch.autograd.grad(ref_loss.sum(), x64)
    err = (g16.double() - g64).norm() / g64.norm()
    rounding = (g64.bfloat16().double() - g64).norm() / g64.norm()
    assert err < 1.25 * rounding, (float(err), float(rounding))


def test_token_cross_entropy_on_the_softmax_once_path_equals_the_readable_path():
    # (4, 160, 1000) = 640,000 logits: the fused path takes the softmax-once function
    torch.manual_seed(0)
    logits = torch.randn(4, 160, 1000, dtype=torch.float64, requires_grad=True)
    assert logits.numel() >= sce_mod.SOFTMAX_ONCE_MIN_LOGITS
    target = torch.randint(1, 1000, (4, 160))
    target[1, 100:] = 0
    fast = token_cross_entropy(logits, target, 0, 0.1, fused=True)
    slow = token_cross_entropy(logits, target, 0, 0.1, fused=False)
    assert fast.n_tokens == slow.n_tokens == 4 * 160 - 60
    # token_cross_entropy sums in float32 (its LossOutput contract)
    torch.testing.assert_close(fast.loss_sum, slow.loss_sum.float(), atol=0, rtol=1e-6)
    torch.testing.assert_close(fast.nll_sum, slow.nll_sum.float(), atol=0, rtol=1e-6)
    (g_fast,) = torch.autograd.grad(fast.loss_sum, logits)
    (g_slow,) = torch.autograd.grad(slow.loss_sum, logits)
    torch.testing.assert_close(g_fast, g_slow, atol=1e-12, rtol=0)


def test_auto_path_by_size(monkeypatch):
    calls = []
    real = SmoothedCrossEntropy.apply
    monkeypatch.setattr(SmoothedCrossEntropy, "apply", lambda *a: calls.append("once") or real(*a))
    monkeypatch.setattr(sce_mod, "SOFTMAX_ONCE_MIN_LOGITS", 100)
    x, y = _case(N=9, V=11)  # 99 logits: below
    smoothed_cross_entropy(x, y, 0, 0.1)
    assert calls == []
    x, y = _case(N=10, V=10)  # 100: from here on
    smoothed_cross_entropy(x, y, 0, 0.1)
    assert calls == ["once"]
    smoothed_cross_entropy(x, y, 0, 0.1, path="torch")
    assert calls == ["once"]
    smoothed_cross_entropy(*_case(N=2, V=3), 0, 0.1, path="softmax_once")
    assert calls == ["once", "once"]


def test_auto_path_takes_torch_off_the_cpu(monkeypatch):
    """On an H100 torch's fused CUDA loss was faster (perf-notes-gpu.md §35): "auto" keeps
    the softmax-once path for CPUs. The meta device stands in for any other device."""
    calls = []
    real = SmoothedCrossEntropy.apply
    monkeypatch.setattr(SmoothedCrossEntropy, "apply", lambda *a: calls.append("once") or real(*a))
    monkeypatch.setattr(sce_mod, "SOFTMAX_ONCE_MIN_LOGITS", 100)
    x, y = _case(N=10, V=10)
    loss, nll = smoothed_cross_entropy(x.to("meta"), y.to("meta"), 0, 0.1)
    assert calls == [] and loss.shape == nll.shape == (10,)
    smoothed_cross_entropy(x, y, 0, 0.1)
    assert calls == ["once"]


def test_torch_path_returns_the_same_quantities():
    x, y = _case()
    for eps in (0.0, 0.1):
        a = torch_cross_entropy(x, y, 0, eps)
        b = SmoothedCrossEntropy.apply(x, y, 0, eps)
        torch.testing.assert_close(a[0], b[0], atol=1e-12, rtol=0)
        torch.testing.assert_close(a[1], b[1], atol=1e-12, rtol=0)


def test_bad_input_is_refused():
    x, y = _case()
    with pytest.raises(ValueError, match=r"expected x \(N, V\) and target \(N,\)"):
        smoothed_cross_entropy(x.unsqueeze(0), y)
    with pytest.raises(ValueError, match=r"expected x \(N, V\) and target \(N,\)"):
        smoothed_cross_entropy(x, y[:-1])
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        smoothed_cross_entropy(x, y, 0, 1.5)
    with pytest.raises(ValueError, match="path must be one of"):
        smoothed_cross_entropy(x, y, 0, 0.1, path="fast")
