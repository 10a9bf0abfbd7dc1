"""FFN and Transformer encoder: equality with torch.nn references, masks, gradcheck.

The torch references are compared with autograd enabled (inputs and weights require grad)
so ``torch.nn.TransformerEncoderLayer`` takes its ordinary ("slow") path, the same maths
as ours; its inference fast path (eval + no_grad, a fused C++ kernel) is checked
separately at float32 tolerance. The helpers here are reused by test_transformer_decoder.
"""

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from seqlab.nn.masks import attention_mask, padding_mask
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.nn.transformer import FeedForward, TransformerEncoder, TransformerEncoderLayer

# (dtype, atol = rtol) for comparisons with PyTorch references.
DTYPES = [(torch.float32, 1e-5), (torch.float64, 1e-10)]
D, H, D_FF = 8, 2, 16

Get = Callable[[Tensor], Tensor]


def mha_pairs(ours: MultiHeadAttention, ref: nn.MultiheadAttention, get: Get) -> list:
    """(ours, ref) tensor pairs; ``in_proj_weight`` is [W_q; W_k; W_v] stacked on dim 0."""
    W_q, W_k, W_v = get(ref.in_proj_weight).chunk(3)  # 3 × (D, D)
    b_q, b_k, b_v = get(ref.in_proj_bias).chunk(3)  # 3 × (D,)
    return [
        (get(ours.W_q.weight), W_q),
        (get(ours.W_k.weight), W_k),
        (get(ours.W_v.weight), W_v),
        (get(ours.W_q.bias), b_q),
        (get(ours.W_k.bias), b_k),
        (get(ours.W_v.bias), b_v),
        (get(ours.W_o.weight), get(ref.out_proj.weight)),
        (get(ours.W_o.bias), get(ref.out_proj.bias)),
    ]


def module_pairs(ours: nn.Module, ref: nn.Module, get: Get) -> list:
    """Pairs for an encoder or decoder layer: attention(s), FFN, LayerNorms."""
    pairs = mha_pairs(ours.self_attn, ref.self_attn, get)
    if hasattr(ref, "multihead_attn"):
        pairs += mha_pairs(ours.cross_attn, ref.multihead_attn, get)
    for mine, theirs in [(ours.ffn.W_1, ref.linear1), (ours.ffn.W_2, ref.linear2)]:
        pairs += [(get(mine.weight), get(theirs.weight)), (get(mine.bias), get(theirs.bias))]
    for name in ("norm1", "norm2", "norm3"):
        if hasattr(ref, name):
            mine, theirs = getattr(ours, name), getattr(ref, name)
            pairs += [(get(mine.weight), get(theirs.weight)), (get(mine.bias), get(theirs.bias))]
    return pairs


def copy_from_reference(ours: nn.Module, ref: nn.Module, pairs_fn=module_pairs) -> None:
    """Randomise every reference parameter (torch zero-inits biases, LayerNorm is 1/0) and
    copy it into ours, so that a swapped weight or bias cannot go unnoticed."""
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.3)
        for mine, theirs in pairs_fn(ours, ref, lambda p: p):
            mine.copy_(theirs)


def assert_grads_match(ours: nn.Module, ref: nn.Module, tol: float, pairs_fn=module_pairs):
    for mine, theirs in pairs_fn(ours, ref, lambda p: p.grad):
        torch.testing.assert_close(mine, theirs, atol=tol, rtol=tol)


def source_batch(dtype: torch.dtype, B: int = 3, S: int = 6) -> tuple[Tensor, Tensor]:
    x = torch.randn(B, S, D, dtype=dtype, requires_grad=True)  # (B, S, D)
    src_mask = padding_mask(torch.tensor([S, S - 2, 1]))  # (B, S), True = real token
    return x, src_mask


# --------------------------------------------------------------------------- FFN


def test_feed_forward_is_eq_2_by_hand():
    ffn = FeedForward(d_model=3, d_ff=4, dropout=0.0, activation="relu")
    x = torch.randn(2, 5, 3)
    W_1, b_1 = ffn.W_1.weight.T, ffn.W_1.bias  # (D, d_ff), (d_ff,)
    W_2, b_2 = ffn.W_2.weight.T, ffn.W_2.bias  # (d_ff, D), (D,)
    expected = torch.clamp(x @ W_1 + b_1, min=0) @ W_2 + b_2  # max(0, xW_1 + b_1)W_2 + b_2
    torch.testing.assert_close(ffn(x), expected, atol=1e-6, rtol=1e-6)
    # Position-wise: each position is transformed alone.
    torch.testing.assert_close(ffn(x)[:, 2:3], ffn(x[:, 2:3]), atol=1e-6, rtol=1e-6)


def test_feed_forward_gelu_and_bad_activation():
    ffn = FeedForward(3, 4, activation="gelu")
    x = torch.randn(2, 5, 3)
    expected = ffn.W_2(nn.functional.gelu(ffn.W_1(x)))
    torch.testing.assert_close(ffn(x), expected, atol=0, rtol=0)
    with pytest.raises(ValueError, match="activation"):
        FeedForward(3, 4, activation="tanh")


# ------------------------------------------------------------------ encoder layer


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_encoder_layer_equals_torch(dtype, tol, norm_first, activation, need_weights):
    ref = nn.TransformerEncoderLayer(
        D, H, D_FF, dropout=0.0, activation=activation, batch_first=True,
        norm_first=norm_first, dtype=dtype,
    ).eval()  # fmt: skip
    ours = TransformerEncoderLayer(D, H, D_FF, 0.0, activation, norm_first).to(dtype).eval()
    copy_from_reference(ours, ref)
    x, src_mask = source_batch(dtype)
    x_ref = x.detach().clone().requires_grad_(True)

    out, alpha = ours(x, attention_mask(src_mask), need_weights=need_weights)  # (B, S, D)
    out_ref = ref(x_ref, src_key_padding_mask=~src_mask)  # torch: True = ignore
    torch.testing.assert_close(out, out_ref, atol=tol, rtol=tol)
    assert (alpha is not None) == need_weights

    g = torch.randn_like(out)  # a random cotangent, so every output element matters
    (out * g).sum().backward()
    (out_ref * g).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=tol, rtol=tol)
    assert_grads_match(ours, ref, tol)


def test_torch_inference_fast_path_agrees_at_float32_tolerance():
    # eval + no_grad makes torch use its fused encoder kernel; it is a different
    # computation (fused QKV, fused softmax), so equality is to float32 rounding only.
    ref = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True).eval()
    ours = TransformerEncoderLayer(D, H, D_FF, dropout=0.0).eval()
    copy_from_reference(ours, ref)
    x, src_mask = source_batch(torch.float32)
    with torch.no_grad():
        out_ref = ref(x, src_key_padding_mask=~src_mask)
        out, _ = ours(x, attention_mask(src_mask))
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)


def test_encoder_layer_weights_are_distributions_over_real_tokens():
    layer = TransformerEncoderLayer(D, H, D_FF, dropout=0.0).eval()
    x, src_mask = source_batch(torch.float32)
    out_fast, none = layer(x, attention_mask(src_mask))
    out, alpha = layer(x, attention_mask(src_mask), need_weights=True)
    assert none is None and alpha.shape == (3, H, 6, 6)  # (B, H, S, S)
    torch.testing.assert_close(out, out_fast, atol=1e-6, rtol=1e-6)  # readable == fused
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, H, 6), atol=1e-6, rtol=0)
    assert (alpha.masked_select(~src_mask[:, None, None, :]) == 0).all()


def test_padding_changes_nothing_and_fully_padded_row_is_finite():
    layer = TransformerEncoderLayer(D, H, D_FF, dropout=0.0).eval()
    x, src_mask = source_batch(torch.float32)
    out, _ = layer(x, attention_mask(src_mask))
    # Different garbage in padded positions: real positions are unchanged.
    x2 = torch.where(src_mask[..., None], x, torch.randn_like(x) * 10)
    out2, _ = layer(x2, attention_mask(src_mask))
    torch.testing.assert_close(out2[src_mask], out[src_mask], atol=1e-6, rtol=1e-6)
    # A row with no real token at all: finite forward and backward on both paths.
    src_mask[2] = False
    for need_weights in (False, True):
        x.grad = None
        out, _ = layer(x, attention_mask(src_mask), need_weights=need_weights)
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
        assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


# ------------------------------------------------------------------ encoder stack


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_equals_torch_including_final_norm(norm_first):
    dtype, tol = torch.float64, 1e-10
    layer = nn.TransformerEncoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    final = nn.LayerNorm(D, dtype=dtype) if norm_first else None  # standard pre-norm stack
    ref = nn.TransformerEncoder(layer, 2, norm=final, enable_nested_tensor=False).eval()
    ours = TransformerEncoder(2, D, H, D_FF, dropout=0.0, norm_first=norm_first).to(dtype)
    assert (ours.norm is None) == (not norm_first)

    def stack_pairs(mine, theirs, get):
        pairs = [p for a, b in zip(mine.layers, theirs.layers) for p in module_pairs(a, b, get)]
        if norm_first:
            pairs += [(get(mine.norm.weight), get(theirs.norm.weight))]
            pairs += [(get(mine.norm.bias), get(theirs.norm.bias))]
        return pairs

    copy_from_reference(ours, ref, stack_pairs)
    x, src_mask = source_batch(dtype)
    x_ref = x.detach().clone().requires_grad_(True)
    out, weights = ours(x, src_mask, need_weights=True)
    out_ref = ref(x_ref, src_key_padding_mask=~src_mask)
    torch.testing.assert_close(out, out_ref, atol=tol, rtol=tol)
    assert len(weights) == 2 and weights[0].shape == (3, H, 6, 6)
    out.pow(2).sum().backward()
    out_ref.pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=tol, rtol=tol)
    assert_grads_match(ours, ref, tol, stack_pairs)


# ------------------------------------------------------------------------ gradcheck


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])  # readable path, fused path
def test_encoder_layer_gradcheck(norm_first, need_weights):
    layer = TransformerEncoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)  # (B, S, D)
    mask = attention_mask(padding_mask(torch.tensor([3, 2])))  # (B, 1, 1, S)
    assert torch.autograd.gradcheck(
        lambda x: layer(x, mask, need_weights=need_weights)[0], (x,), eps=1e-6, atol=1e-6
    )
