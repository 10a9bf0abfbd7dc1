"""Embedding lookup == one-hot × E; √D scaling (Vaswani §3.4); tied output projection."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.nn.embedding import Embedding, one_hot_times_E, tied_logits

D64 = torch.float64


def test_one_hot_times_E_golden():
    E = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], dtype=D64)  # (V=3, D=2)
    tokens = torch.tensor([[2, 0, 1]])
    expected = torch.tensor([[[4.0, 5.0], [0.0, 1.0], [2.0, 3.0]]], dtype=D64)
    torch.testing.assert_close(one_hot_times_E(tokens, E), expected, atol=0, rtol=0)
    # notes 003: e_w = E·o_w with their E (D, V) = our weight.T
    o = F.one_hot(torch.tensor(2), 3).to(D64)
    torch.testing.assert_close(E.T @ o, expected[0, 0], atol=0, rtol=0)


@pytest.mark.parametrize("padding_idx", [None, 0, 3])
def test_lookup_equals_one_hot_values_and_grads(padding_idx):
    V, D = 6, 4
    ref = nn.Embedding(V, D, padding_idx=padding_idx).double()
    emb = Embedding(V, D, padding_idx=padding_idx).double()
    emb.weight.data.copy_(ref.weight.data)
    tokens = torch.tensor([[1, 3, 0, 3], [5, 0, 0, 2]])  # (B, T), includes repeats and pads
    outs = [emb(tokens), ref(tokens), one_hot_times_E(tokens, emb.weight, padding_idx)]
    g = torch.randn_like(outs[0])
    grads = [
        torch.autograd.grad(o, w, g)[0] for o, w in zip(outs, [emb.weight, ref.weight, emb.weight])
    ]
    for o, gr in zip(outs[1:], grads[1:]):
        torch.testing.assert_close(outs[0], o, atol=1e-12, rtol=0)
        torch.testing.assert_close(grads[0], gr, atol=1e-12, rtol=0)
    if padding_idx is not None:
        assert torch.count_nonzero(grads[0][padding_idx]) == 0  # pad row: no gradient
        assert torch.count_nonzero(emb.weight[padding_idx]) == 0  # and zero at init
        assert torch.count_nonzero(outs[0][tokens == padding_idx]) == 0
    else:
        assert torch.count_nonzero(grads[0][0]) > 0  # repeated token 0 accumulates


def test_scale_multiplies_by_sqrt_D():
    emb = Embedding(7, 16, scale=True)
    tokens = torch.randint(0, 7, (2, 5))
    torch.testing.assert_close(emb(tokens), emb.weight[tokens] * math.sqrt(16), atol=1e-6, rtol=0)
    assert emb.multiplier == 4.0
    emb.scale = False
    torch.testing.assert_close(emb(tokens), emb.weight[tokens], atol=0, rtol=0)


def test_init_std_and_range_check():
    emb = Embedding(200, 64, init_std=64**-0.5)
    assert abs(emb.weight.std().item() * 8 - 1) < 0.03  # 12 800 samples
    assert Embedding(5, 3, padding_idx=-1).padding_idx == 4
    with pytest.raises(ValueError, match="out of range"):
        Embedding(5, 3, padding_idx=5)


def test_tied_logits_equals_matmul_with_E_transpose():
    E = torch.randn(9, 4, dtype=D64, requires_grad=True)  # (V, D)
    h = torch.randn(2, 3, 4, dtype=D64)  # (B, T, D)
    b = torch.randn(9, dtype=D64)
    logits = tied_logits(h, E, b)
    assert logits.shape == (2, 3, 9)
    torch.testing.assert_close(logits, h @ E.T + b, atol=1e-12, rtol=0)
    # logits[..., v] = ⟨h, e_v⟩: the output layer scores each token by its embedding
    torch.testing.assert_close(logits[0, 1, 7], h[0, 1] @ E[7] + b[7], atol=1e-12, rtol=0)
