"""Masks: True = keep everywhere; masked softmax gives zeros (not NaN) on empty rows."""

import pytest
import torch

from seqlab.nn.masks import (
    attention_mask,
    causal_mask,
    masked_softmax,
    padding_mask,
    padding_mask_from_tokens,
)


def test_padding_mask_from_lengths():
    m = padding_mask(torch.tensor([3, 1, 0]), max_len=4)
    expected = torch.tensor([[True, True, True, False], [True, False, False, False], [False] * 4])
    assert m.dtype == torch.bool
    assert torch.equal(m, expected)
    assert padding_mask(torch.tensor([2, 5])).shape == (2, 5)


def test_padding_mask_from_tokens():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert torch.equal(
        padding_mask_from_tokens(tokens, pad_id=0),
        torch.tensor([[True, True, False], [True, False, False]]),
    )


def test_padding_mask_rejects_2d_lengths():
    with pytest.raises(ValueError, match="1-D"):
        padding_mask(torch.ones(2, 2, dtype=torch.long))


def test_causal_mask_is_lower_triangle_and_shifts_for_cache():
    m = causal_mask(3)
    assert torch.equal(m, torch.tril(torch.ones(3, 3, dtype=torch.bool)))
    # last 2 queries of 4 positions (decoding with a K/V cache of 2 earlier steps)
    m = causal_mask(2, 4)
    assert torch.equal(m, torch.tensor([[True, True, True, False], [True] * 4]))
    with pytest.raises(ValueError):
        causal_mask(3, 2)


def test_attention_mask_combines_padding_and_causal():
    pad = torch.tensor([[True, True, False], [True, True, True]])
    m = attention_mask(pad, causal_mask(3))
    assert m.shape == (2, 1, 3, 3)
    assert torch.equal(m[0, 0], torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool))
    assert torch.equal(m[1, 0], causal_mask(3))
    assert attention_mask(pad).shape == (2, 1, 1, 3)
    assert attention_mask(None, None) is None


def test_masked_softmax_matches_softmax_over_kept_entries():
    scores = torch.randn(4, 6, dtype=torch.float64)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    alpha = masked_softmax(scores, mask)
    for b in range(4):
        kept = scores[b][mask[b]]
        torch.testing.assert_close(alpha[b][mask[b]], torch.softmax(kept, -1), rtol=0, atol=1e-12)
        assert torch.all(alpha[b][~mask[b]] == 0)


def test_masked_softmax_fully_masked_row_is_zero_with_finite_grad():
    scores = torch.randn(3, 5, requires_grad=True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    alpha = masked_softmax(scores, mask)
    assert torch.all(alpha[1] == 0)
    torch.testing.assert_close(alpha.sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    (alpha * torch.randn(3, 5)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[1] == 0)


def test_masked_softmax_bf16_computes_in_fp32_and_keeps_dtype():
    scores = torch.randn(2, 7).bfloat16()
    mask = torch.ones(2, 7, dtype=torch.bool)
    out = masked_softmax(scores, mask)
    assert out.dtype == torch.bfloat16
    ref = torch.softmax(scores.float(), -1).bfloat16()
    assert torch.equal(out, ref)


def test_masked_softmax_rejects_non_bool_mask():
    with pytest.raises(TypeError, match="bool"):
        masked_softmax(torch.randn(2, 2), torch.ones(2, 2))


def test_masked_softmax_gradcheck():
    scores = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 3, 4) > 0.4
    mask[0, 1] = False  # a fully masked row
    assert torch.autograd.gradcheck(lambda s: masked_softmax(s, mask), (scores,))
