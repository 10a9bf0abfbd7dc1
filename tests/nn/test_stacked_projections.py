"""Self-attention's q, k, v (and cross-attention's k, v) as one product by the stacked
weights when training (seqlab/nn/multihead.py ``project_qkv``, ``project_kv``): the same
linear maps as the three separate products, values and gradients; the Transformer's
training forward computes what it computes with separate products, and decoding (no grad)
keeps the three products."""

from __future__ import annotations

import pytest
import torch

from seqlab.nn.masks import causal_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention, separate_projections
from tests.nn.test_shared_kv import tiny_transformer

F64 = dict(atol=1e-12, rtol=0)


def randomised(mha: MultiHeadAttention) -> MultiHeadAttention:
    """Non-zero biases (the reference initialisation zeroes them, which would hide a
    dropped or misplaced bias)."""
    with torch.no_grad():
        for p in mha.parameters():
            if p.dim() == 1:
                p.normal_()
    return mha


def _run(fn, leaves, params):
    for t in [*leaves, *params]:
        t.grad = None
    out = fn()
    g = torch.Generator().manual_seed(3)
    (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum().backward()
    return [out.detach(), *(t.grad.clone() for t in [*leaves, *params])]


@pytest.mark.parametrize("bias", [True, False])
def test_project_qkv_is_the_three_projections(bias):
    torch.manual_seed(0)
    mha = randomised(MultiHeadAttention(16, 4, bias=bias).double())
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)  # (B, T, d)
    q, kv = mha.project_qkv(x)
    assert q.shape == kv.k.shape == kv.v.shape == (3, 4, 5, 4)  # (B, H, T, Dh)
    torch.testing.assert_close(q, mha._split_heads(mha.W_q(x)), **F64)
    torch.testing.assert_close(kv.k, mha._split_heads(mha.W_k(x)), **F64)
    torch.testing.assert_close(kv.v, mha._split_heads(mha.W_v(x)), **F64)
    with separate_projections():
        q2, kv2 = mha.project_qkv(x)
    for a, b in ((q, q2), (kv.k, kv2.k), (kv.v, kv2.v)):
        torch.testing.assert_close(a, b, **F64)


@pytest.mark.parametrize("need_weights", [False, True])
def test_self_and_cross_attention_equal_separate_products(need_weights):
    torch.manual_seed(0)
    mha = randomised(MultiHeadAttention(16, 4).double())
    x = torch.randn(2, 6, 16, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 16, dtype=torch.float64, requires_grad=True)
    mask = causal_mask(6)  # (T, T)
    params = list(mha.parameters())

    def self_attn():
        return mha(x, x, x, mask, need_weights)[0]

    def cross_attn():
        return mha(x, memory, memory, None, need_weights)[0]

    for fn in (self_attn, cross_attn):
        stacked = _run(fn, [x, memory] if fn is cross_attn else [x], params)
        with separate_projections():
            separate = _run(fn, [x, memory] if fn is cross_attn else [x], params)
        for a, b in zip(stacked, separate, strict=True):
            torch.testing.assert_close(a, b, **F64)


def test_stacked_projection_is_one_linear_call(monkeypatch):
    """The point of stacking: one F.linear for self-attention's q, k, v, one for k, v."""
    mha = MultiHeadAttention(8, 2)
    x, memory = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: calls.append(1) or real(*a))
    mha.project_qkv(x)
    assert len(calls) == 1
    assert isinstance(mha.project_kv(memory, memory), KVCache) and len(calls) == 2
    with separate_projections():
        mha.project_qkv(x)
    assert len(calls) == 5
    with torch.no_grad():  # decoding and evaluation keep the three products (§31)
        mha.project_qkv(x)
    assert len(calls) == 8


@pytest.mark.parametrize("beam", [1, 3])
def test_transformer_training_and_decoding_equal_separate_products(beam):
    from seqlab.decode import beam_search, greedy

    model = tiny_transformer().double().eval()
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            randomised(m)
    B = 2
    src = torch.randint(4, 40, (B, 6))
    src_mask = torch.ones(B, 6, dtype=torch.bool)
    src_mask[1, 4:] = False
    y_in = torch.randint(4, 40, (B, 5))
    tgt_mask = torch.ones(B, 5, dtype=torch.bool)

    def run():
        logits = model(src, src_mask, y_in, tgt_mask).detach()  # (B, T, V), grad on: stacked
        with torch.no_grad():
            state = model.init_state(model.encode(src, src_mask), src_mask)
            if beam == 1:
                out = greedy(model, state, B, 1, 2, 8, pad_id=0)
            else:
                out = beam_search(model, state, B, 1, 2, 8, beam_size=beam, pad_id=0)
        return logits, out.tokens

    logits, tokens = run()
    with separate_projections():
        logits_sep, tokens_sep = run()
    torch.testing.assert_close(logits, logits_sep, **F64)
    assert torch.equal(tokens, tokens_sep)


def test_a_compiled_graph_stacks_without_grad():
    """Without grad the eager path keeps the three products, a traced graph stacks them
    (its frozen weights' concatenation is a constant; docs/perf-notes-compiled-beam.md
    §53), and ``separate_projections`` turns both off. The compiled step's decode equals
    the eager one in tests/decode/test_compiled.py."""
    from seqlab.nn import multihead

    traced = torch.compile(multihead._stack_projections, backend="eager", fullgraph=True)
    with torch.no_grad():
        assert not multihead._stack_projections()
        assert traced()
        with separate_projections():
            assert not traced()
    assert multihead._stack_projections()
