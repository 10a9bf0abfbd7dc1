"""A CPU training step's attention through the readable path's matmuls (``_matmul``).

docs/perf-notes-training.md §37: with grad on, CPU attention runs ``_readable``'s
softmax(q kᵀ / √d_k), seqlab's dropout on α, then α v, instead of SDPA's kernels. These
tests pin where that path is taken, that it equals SDPA (values and gradients, float64),
that its dropout is seqlab's mask on the weights with the 1/(1 − p) rescaling, and that in
bf16 it stays within SDPA's error grade.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from seqlab.nn import multihead
from seqlab.nn.dropout import keep_mask, quantised_drop_probability
from seqlab.nn.masks import attention_mask, causal_mask, padding_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention, always_sdpa

F64 = dict(atol=1e-10, rtol=0)


def _heads(B, H, T, S, Dh, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = scale * torch.randn(B, H, T, Dh, dtype=dtype, generator=g)
    k = scale * torch.randn(B, H, S, Dh, dtype=dtype, generator=g)
    v = torch.randn(B, H, S, Dh, dtype=dtype, generator=g)
    return q, k, v


def _mask(B, T, S):
    pad = padding_mask(torch.tensor([S, 2, 0][:B]), max_len=S)  # batch row 2: no key at all
    causal = causal_mask(T, S)
    causal[0] = False  # query 0 sees nothing in every batch row
    return attention_mask(pad, causal)  # (B, 1, T, S)


def _value_and_grads(q, k, v, mask, p, sdpa):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    g = torch.Generator().manual_seed(9)
    with always_sdpa() if sdpa else contextlib.nullcontext():
        z = MultiHeadAttention._kernel(q, KVCache(k, v), mask, p, step=False)
    z.backward(torch.randn(z.shape, dtype=torch.float64, generator=g).to(z.dtype))
    return z.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("masked", [True, False], ids=["mask", "no-mask"])
def test_matmul_path_equals_sdpa_values_and_gradients(masked):
    q, k, v = _heads(3, 2, 4, 5, 8, torch.float64)
    mask = _mask(3, 4, 5) if masked else None
    ours = _value_and_grads(q, k, v, mask, 0.0, sdpa=False)
    ref = _value_and_grads(q, k, v, mask, 0.0, sdpa=True)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, **F64)
    if masked:  # rows that see no key: z = 0 and no gradient, as on the readable path
        z, dq = ours[0], ours[1]
        assert (z[2] == 0).all() and (z[:, :, 0] == 0).all()
        assert (dq[2] == 0).all() and (dq[:, :, 0] == 0).all()


def test_matmul_path_dropout_is_seqlabs_mask_on_the_weights():
    """z = (α ⊙ m / (1 − p)) v with m drawn by ``keep_mask`` from the torch generator."""
    p = 0.3
    q, k, v = _heads(3, 2, 4, 5, 8, torch.float64)
    mask = _mask(3, 4, 5)
    torch.manual_seed(5)
    with torch.enable_grad():
        z = MultiHeadAttention._kernel(q, KVCache(k, v), mask, p, step=False)
    torch.manual_seed(5)
    alpha = MultiHeadAttention._readable(q, KVCache(k, v), mask)  # (B, H, T, S)
    m = keep_mask(alpha.shape, p, alpha.device).to(alpha.dtype)
    expected = (alpha * m / (1 - quantised_drop_probability(p))) @ v
    torch.testing.assert_close(z, expected, **F64)
    no_drop = alpha @ v
    assert (z - no_drop).abs().max() > 0.05  # the mask really drops weights


def _count_matmul(monkeypatch):
    calls = []
    real = MultiHeadAttention._matmul

    def spy(*args):
        calls.append(args[1].length)
        return real(*args)

    monkeypatch.setattr(MultiHeadAttention, "_matmul", staticmethod(spy))
    return calls


def test_where_the_matmul_path_is_taken(monkeypatch):
    calls = _count_matmul(monkeypatch)
    limit = multihead.MATMUL_MAX_KEYS

    def run(S, p, grad=True, sdpa=False, step=False):
        q, k, v = _heads(2, 2, 1 if step else 3, S, 4, torch.float32)
        with torch.set_grad_enabled(grad), always_sdpa() if sdpa else contextlib.nullcontext():
            MultiHeadAttention._kernel(q, KVCache(k, v), None, p, step=step)
        taken = bool(calls)
        calls.clear()
        return taken

    assert run(limit, 0.0)  # training without dropout, up to the limit
    assert not run(limit + 1, 0.0)  # past it SDPA's flash kernel keeps no (T, S) matrix
    assert run(limit + 1, 0.1)  # with dropout SDPA would build one anyway
    assert not run(8, 0.1, grad=False)  # evaluation, decoding: SDPA (or _single_query)
    assert not run(8, 0.0, grad=False, step=True)
    assert not run(8, 0.1, sdpa=True)  # always_sdpa() turns it off


def test_a_transformer_layer_trains_through_it(monkeypatch):
    calls = _count_matmul(monkeypatch)
    mha = MultiHeadAttention(16, 4, dropout=0.1).train()
    x = torch.randn(2, 6, 16)
    out, _ = mha(x, x, x)
    out.sum().backward()
    assert calls == [6]
    with torch.no_grad():
        mha.eval()(x, x, x)
    assert calls == [6]


def test_bf16_autocast_stays_in_sdpas_error_grade():
    """Under bf16 autocast the two matmuls are bf16 (the readable path's; SDPA's math path
    computes them in float32): values and gradients within 2x SDPA's error against float64.
    """
    q, k, v = _heads(32, 4, 21, 21, 64, torch.float64, scale=2.0, seed=3)
    mask = causal_mask(21, 21)
    exact = _value_and_grads(q, k, v, mask, 0.0, sdpa=True)
    results = {}
    for sdpa in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[sdpa] = _value_and_grads(
                q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, 0.0, sdpa=sdpa
            )
    assert results[False][0].dtype == torch.bfloat16
    for i, ref in enumerate(exact):
        err = {s: ((r[i].double() - ref).norm() / ref.norm()).item() for s, r in results.items()}
        assert err[False] <= 2 * err[True], (i, err)
        assert err[False] < 3e-2, (i, err)
