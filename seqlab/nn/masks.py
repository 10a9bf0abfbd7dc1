"""Masks and the masked softmax used by every attention type in seqlab.

Convention (DESIGN §5): a mask is a ``torch.bool`` tensor with **True = keep** (may be
attended to / is a real token) and False = masked out. Every attention layer accepts a
mask broadcastable to its score tensor, e.g. ``(B, 1, T, S)`` for multi-head scores
``(B, H, T, S)`` or ``(B, T, S)`` for single-head scores.

Vaswani et al. 2017, §3.2.3: the decoder's self-attention is masked so that position i
sees only positions j ≤ i ("sequence" or causal mask); padding positions are masked in
every attention.

A fully masked row (a query that may see nothing, e.g. a batch row that is all padding)
gets attention weights of exactly zero, never NaN, in the forward and backward pass.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Mask of real (non-pad) positions from per-sequence lengths.

    m[b, t] = (t < lengths[b]).

    Shapes:
        lengths: (B,) integer
        returns: (B, T) bool, T = max_len or max(lengths)
    """
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    if max_len is None:
        max_len = int(lengths.max().item()) if lengths.numel() else 0
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)


def padding_mask_from_tokens(tokens: Tensor, pad_id: int) -> Tensor:
    """m[b, t] = (tokens[b, t] != pad_id).  Shapes: tokens (B, T) -> (B, T) bool."""
    return tokens != pad_id  # (B, T)


def causal_mask(t: int, s: int | None = None, device: torch.device | None = None) -> Tensor:
    """The decoder's "sequence" mask: query i may attend to key j iff j ≤ i + (s − t).

    With s == t (self-attention) this is the lower triangle including the diagonal. With
    s > t (queries are the last t of s positions, as when decoding with a K/V cache) the
    band is shifted so that the last query sees every key.

    Shapes:
        returns: (T, S) bool
    """
    s = t if s is None else s
    if s < t:
        raise ValueError(f"causal_mask needs s >= t, got t={t}, s={s}")
    q = torch.arange(t, device=device).unsqueeze(1) + (s - t)  # (T, 1)
    k = torch.arange(s, device=device).unsqueeze(0)  # (1, S)
    return k <= q  # (T, S)


def attention_mask(
    key_padding: Tensor | None = None,
    causal: Tensor | None = None,
) -> Tensor | None:
    """Combine a key-padding mask and a causal mask into one score mask (True = keep).

    Shapes:
        key_padding: (B, S) bool
        causal:      (T, S) bool
        returns:     (B, 1, T, S), (B, 1, 1, S), (T, S) or None — broadcastable to the
                     multi-head scores (B, H, T, S)
    """
    if key_padding is None:
        return causal
    m = key_padding[:, None, None, :]  # (B, 1, 1, S)
    if causal is None:
        return m
    return m & causal[None, None, :, :]  # (B, 1, T, S)


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` restricted to the kept entries; zero where masked.

        α_j = m_j · exp(e_j) / Σ_k m_k · exp(e_k),   and α = 0 if Σ_k m_k = 0.

    Masked scores are replaced by the most negative finite value of the dtype (not −∞),
    so a fully masked row gives a finite uniform softmax that the final multiplication by
    the mask turns into zeros; gradients stay finite (no 0·∞, no NaN).

    The softmax is computed in float32 at least (bf16/fp16 scores are upcast), and the
    result is returned in the scores' dtype.

    Shapes:
        scores: (..., N) any float dtype
        mask:   bool, broadcastable to scores, True = keep
        returns: same shape and dtype as scores
    """
    compute = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    if mask is None:
        return torch.softmax(compute, dim=dim).to(scores.dtype)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be torch.bool (True = keep), got {mask.dtype}")
    filled = compute.masked_fill(~mask, torch.finfo(compute.dtype).min)
    alpha = torch.softmax(filled, dim=dim) * mask
    return alpha.to(scores.dtype)
