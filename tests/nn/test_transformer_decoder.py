"""Transformer decoder: equality with torch.nn, cached step decoding, leaks, padding, beams.

``torch.nn.TransformerDecoderLayer`` has no inference fast path, but we still compare
with autograd enabled, as in test_transformer.py. Invariants use float64 and eval mode
(dropout 0.1 is set so eval() is what turns it off).
"""

import pytest
import torch
from torch import nn

from seqlab.nn.masks import attention_mask, causal_mask, padding_mask
from seqlab.nn.transformer_decoder import TransformerDecoder, TransformerDecoderLayer
from seqlab.nn.tree_kv_cache import TreeKVCache
from tests.nn.test_transformer import (
    D_FF,
    DTYPES,
    D,
    H,
    assert_grads_match,
    copy_from_reference,
    module_pairs,
)

B, T, S = 3, 5, 6
TOL64 = 1e-10  # atol = rtol for float64 invariants


def target_and_memory(dtype=torch.float64):
    y = torch.randn(B, T, D, dtype=dtype, requires_grad=True)  # (B, T, D)
    memory = torch.randn(B, S, D, dtype=dtype, requires_grad=True)  # (B, S, D)
    tgt_mask = padding_mask(torch.tensor([T, T - 1, 2]))  # (B, T)
    memory_mask = padding_mask(torch.tensor([S, 3, S - 1]))  # (B, S)
    return y, memory, tgt_mask, memory_mask


def decoder(norm_first: bool, n_layers: int = 2, dropout: float = 0.1) -> TransformerDecoder:
    return TransformerDecoder(n_layers, D, H, D_FF, dropout, norm_first=norm_first).double().eval()


# ------------------------------------------------------------- equality with torch


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_decoder_layer_equals_torch(dtype, tol, norm_first, need_weights):
    ref = nn.TransformerDecoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    ).eval()
    ours = TransformerDecoderLayer(D, H, D_FF, 0.0, norm_first=norm_first).to(dtype).eval()
    copy_from_reference(ours, ref)
    y, memory, tgt_mask, memory_mask = target_and_memory(dtype)
    y_ref = y.detach().clone().requires_grad_(True)
    memory_ref = memory.detach().clone().requires_grad_(True)

    self_mask = attention_mask(tgt_mask, causal_mask(T))  # (B, 1, T, T), True = keep
    out, w = ours(y, memory, self_mask, attention_mask(memory_mask), need_weights)
    out_ref = ref(
        y_ref,
        memory_ref,
        tgt_mask=~causal_mask(T),  # torch: True = not allowed
        tgt_key_padding_mask=~tgt_mask,
        memory_key_padding_mask=~memory_mask,
    )
    torch.testing.assert_close(out, out_ref, atol=tol, rtol=tol)
    assert (w is not None) == need_weights

    g = torch.randn_like(out)
    (out * g).sum().backward()
    (out_ref * g).sum().backward()
    torch.testing.assert_close(y.grad, y_ref.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(memory.grad, memory_ref.grad, atol=tol, rtol=tol)
    assert_grads_match(ours, ref, tol)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_equals_torch_including_final_norm(norm_first):
    dtype = torch.float64
    layer = nn.TransformerDecoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    final = nn.LayerNorm(D, dtype=dtype) if norm_first else None
    ref = nn.TransformerDecoder(layer, 2, norm=final).eval()
    ours = decoder(norm_first)

    def stack_pairs(mine, theirs, get):
        pairs = [p for a, b in zip(mine.layers, theirs.layers) for p in module_pairs(a, b, get)]
        if norm_first:
            pairs += [(get(mine.norm.weight), get(theirs.norm.weight))]
            pairs += [(get(mine.norm.bias), get(theirs.norm.bias))]
        return pairs

    copy_from_reference(ours, ref, stack_pairs)
    y, memory, tgt_mask, memory_mask = target_and_memory(dtype)
    out, _ = ours(y, memory, tgt_mask, memory_mask)
    out_ref = ref(
        y, memory, tgt_mask=~causal_mask(T), tgt_key_padding_mask=~tgt_mask,
        memory_key_padding_mask=~memory_mask,
    )  # fmt: skip
    torch.testing.assert_close(out, out_ref, atol=TOL64, rtol=TOL64)


# -------------------------------------------------------------- incremental decoding


@pytest.mark.parametrize("cache", ["tree", "concat"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_step_decoding_equals_teacher_forcing(norm_first, cache):
    dec = decoder(norm_first)
    y, memory, _, memory_mask = target_and_memory()
    full, full_w = dec(y, memory, None, memory_mask, need_weights=True)  # (B, T, D)

    state = dec.init_state(memory, memory_mask, cache)
    outs = []
    for t in range(T):
        assert state.length == t
        out_t, state = dec.step(y[:, t : t + 1], state, need_weights=True)  # (B, 1, D)
        outs.append(out_t)
        for (a, c), (a_full, c_full) in zip(state.weights, full_w):
            assert a.shape == (B, H, 1, t + 1) and c.shape == (B, H, 1, S)
            torch.testing.assert_close(a[:, :, 0], a_full[:, :, t, : t + 1], atol=TOL64, rtol=0)
            torch.testing.assert_close(c[:, :, 0], c_full[:, :, t], atol=TOL64, rtol=0)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=TOL64, rtol=TOL64)
    own = state.layers[0].self_kv
    if isinstance(own, TreeKVCache):
        assert own.slot.shape == (B, T)
        own = own.flat()  # each row's positions in order
    assert own.k.shape == (B, H, T, D // H)

    # Feeding several known positions at once (a prompt), then one by one, is the same.
    state = dec.init_state(memory, memory_mask, cache)
    first, state = dec.step(y[:, :3], state)  # (B, 3, D)
    fourth, state = dec.step(y[:, 3:4], state)  # (B, 1, D)
    assert state.length == 4
    torch.testing.assert_close(torch.cat([first, fourth], 1), full[:, :4], atol=TOL64, rtol=TOL64)


def test_future_target_tokens_do_not_leak():
    dec = decoder(norm_first=False)
    y, memory, _, memory_mask = target_and_memory()
    t0 = 2
    out, _ = dec(y, memory, None, memory_mask)
    y2 = y.detach().clone()
    y2[:, t0:] = torch.randn(B, T - t0, D, dtype=y.dtype) * 5  # perturb the future
    out2, _ = dec(y2, memory, None, memory_mask)
    torch.testing.assert_close(out2[:, :t0], out[:, :t0], atol=1e-12, rtol=0)
    assert not torch.allclose(out2[:, t0:], out[:, t0:])  # the test can see a change
    # The gradient of earlier outputs w.r.t. later inputs is exactly zero. (Not through
    # .sum(): a post-norm output is LayerNorm(·) with γ = 1, β = 0, whose sum over features
    # is 0 whatever the input, so its gradient is 0 everywhere up to rounding — exactly 0
    # on some CPUs, which made the "!= 0" half fail there.)
    probe = torch.randn(out.shape[-1], dtype=out.dtype)  # (D,) a fixed direction
    (out[:, :t0] @ probe).sum().backward()
    assert (y.grad[:, t0:] == 0).all() and (y.grad[:, :t0] != 0).any()


def test_extra_memory_padding_changes_nothing():
    dec = decoder(norm_first=True)
    y, memory, _, memory_mask = target_and_memory()
    out, _ = dec(y, memory, None, memory_mask)
    # Garbage in the padded memory slots, and 4 more padded slots appended.
    garbage = torch.randn(B, S + 4, D, dtype=memory.dtype) * 10
    memory_long = torch.cat([memory, garbage[:, S:]], 1)  # (B, S+4, D)
    memory_long = torch.where(
        padding_mask(memory_mask.sum(1), S + 4)[..., None], memory_long, garbage
    )
    mask_long = torch.cat([memory_mask, torch.zeros(B, 4, dtype=torch.bool)], 1)  # (B, S+4)
    out_long, _ = dec(y, memory_long, None, mask_long)
    torch.testing.assert_close(out_long, out, atol=TOL64, rtol=TOL64)
    state = dec.init_state(memory_long, mask_long)
    out_step, _ = dec.step(y[:, :1], state)
    torch.testing.assert_close(out_step, out[:, :1], atol=TOL64, rtol=TOL64)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_padded_memory_row_is_finite_forward_and_backward(need_weights):
    dec = decoder(norm_first=False)
    y, memory, tgt_mask, memory_mask = target_and_memory()
    memory_mask[1] = False  # batch row 1 has no source token at all
    out, _ = dec(y, memory, tgt_mask, memory_mask, need_weights=need_weights)
    out_step, _ = dec.step(y[:, :1], dec.init_state(memory, memory_mask), need_weights)
    (out.sum() + out_step.sum()).backward()
    assert torch.isfinite(out).all() and torch.isfinite(out_step).all()
    assert torch.isfinite(y.grad).all() and torch.isfinite(memory.grad).all()
    assert (memory.grad[1] == 0).all()  # nothing flows into a fully masked memory
    assert all(torch.isfinite(p.grad).all() for p in dec.parameters())


def test_reorder_follows_beam_indices():
    dec = decoder(norm_first=False)
    y, memory, _, memory_mask = target_and_memory()
    index = torch.tensor([2, 0, 0, 1])  # B' = 4: row 0 duplicated, as beam search does
    state = dec.init_state(memory, memory_mask)
    outs = []
    for t in range(2):
        out_t, state = dec.step(y[:, t : t + 1], state, need_weights=True)
        outs.append(out_t)
    state = state.reorder(index)
    assert state.memory_mask.shape == (4, S) and state.weights[0][1].shape == (4, H, 1, S)
    outs = [o[index] for o in outs]
    for t in range(2, T):
        out_t, state = dec.step(y[index, t : t + 1], state)
        outs.append(out_t)
    expected, _ = dec(y[index], memory[index], None, memory_mask[index])
    torch.testing.assert_close(torch.cat(outs, 1), expected, atol=TOL64, rtol=TOL64)


def test_decoder_weights_respect_causal_and_memory_masks():
    dec = decoder(norm_first=False)
    y, memory, tgt_mask, memory_mask = target_and_memory()
    out, weights = dec(y, memory, tgt_mask, memory_mask, need_weights=True)
    out_fast, none = dec(y, memory, tgt_mask, memory_mask)
    assert none is None and len(weights) == 2
    torch.testing.assert_close(out, out_fast, atol=TOL64, rtol=TOL64)  # readable == fused
    a, c = weights[0]
    assert a.shape == (B, H, T, T) and c.shape == (B, H, T, S)
    assert (a.masked_select(~attention_mask(tgt_mask, causal_mask(T))) == 0).all()
    assert (c.masked_select(~memory_mask[:, None, None, :]) == 0).all()
    torch.testing.assert_close(c.sum(-1), torch.ones(B, H, T, dtype=c.dtype), atol=TOL64, rtol=0)


# ------------------------------------------------------------------------ gradcheck


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])  # readable path, fused path
def test_decoder_layer_gradcheck(norm_first, need_weights):
    layer = TransformerDecoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first).double()
    y = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)  # (B, T, D)
    memory = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)  # (B, S, D)
    self_mask = causal_mask(3)  # (T, T)
    memory_mask = attention_mask(padding_mask(torch.tensor([4, 2])))  # (B, 1, 1, S)

    def f(y, memory):
        return layer(y, memory, self_mask, memory_mask, need_weights)[0]

    assert torch.autograd.gradcheck(f, (y, memory), eps=1e-6, atol=1e-6)
