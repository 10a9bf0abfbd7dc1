"""token_cross_entropy == F.cross_entropy (with label smoothing and padding), in fp32."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.tasks.base import token_cross_entropy


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_equals_torch_cross_entropy(eps):
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    out = token_cross_entropy(logits, target, pad_id=0, label_smoothing=eps)
    ref = F.cross_entropy(
        logits.flatten(0, 1),
        target.flatten(),
        ignore_index=0,
        reduction="sum",
        label_smoothing=eps,
    )
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0, reduction="sum")
    torch.testing.assert_close(out.loss_sum, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(out.nll_sum, nll.detach(), atol=1e-10, rtol=0)
    assert out.n_tokens == int((target != 0).sum()) == 9
    (g,) = torch.autograd.grad(out.loss_sum, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=0)


def test_bf16_logits_give_fp32_loss():
    logits = torch.randn(2, 4, 7).bfloat16()
    out = token_cross_entropy(logits, torch.randint(1, 7, (2, 4)), pad_id=0, label_smoothing=0.1)
    assert out.loss_sum.dtype == torch.float32
