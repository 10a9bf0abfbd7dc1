"""Attention score functions and the single-head ``Attention`` layer.

An attention layer compares each query (a decoder state s_{i−1} or h_t) with every key
(an encoder state h_j or h̄_s), turns the scores into weights with a masked softmax and
returns the weighted sum of the values (the context vector):

    e_ij = score(query_i, key_j)                      scores      (B, T, S)
    α_ij = exp(e_ij) / Σ_k exp(e_ik)                  weights     (B, T, S)
    c_i  = Σ_j α_ij value_j                           context     (B, T, Dv)

Bahdanau et al. 2015 ("Neural Machine Translation by Jointly Learning to Align and
Translate"), eqs. 5–6; Luong et al. 2015 ("Effective Approaches to Attention-based Neural
Machine Translation"), eqs. 7–8; Vaswani et al. 2017 ("Attention Is All You Need"), eq. 1.

Every score module has ``precompute_keys(keys)``, which holds the part of the score that
depends on the keys only (e.g. Uₐ h_j), and ``score(query, keys_pre)``. A decoder calls
``precompute_keys`` once per source sentence, so one decoder step costs O(S·D) instead of
re-projecting all S keys at O(S·D²).

Shapes (batch first, DESIGN §5): query (B, T, Dq), keys (B, S, Dk), values (B, S, Dv),
scores and weights (B, T, S). Masks are bool, True = keep.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.nn.masks import masked_softmax

ScoreName = Literal["additive", "dot", "general", "concat", "scaled_dot"]


def dot(h_t: Tensor, h_bar: Tensor) -> Tensor:
    """Luong 2015, eq. 8 ("dot"): score(h_t, h̄_s) = h_tᵀ h̄_s.

    Shapes:
        h_t:     (..., T, D) queries (target hidden states)
        h_bar:   (..., S, D) keys (source hidden states)
        returns: (..., T, S)
    """
    return h_t @ h_bar.transpose(-2, -1)  # (..., T, S)


def scaled_dot(q: Tensor, k: Tensor) -> Tensor:
    """Vaswani 2017, eq. 1: the scores inside softmax(QKᵀ / √d_k) V, i.e. QKᵀ / √d_k.

    d_k is the last dimension of q and k. Dividing by √d_k keeps the variance of the
    scores at ~1 for unit-variance q, k, so the softmax does not saturate (§3.2.1).

    Shapes:
        q:       (..., T, d_k) e.g. (B, H, T, Dh) for multi-head attention
        k:       (..., S, d_k)
        returns: (..., T, S)
    """
    d_k = q.shape[-1]
    return (q @ k.transpose(-2, -1)) / math.sqrt(d_k)  # (..., T, S)


class DotScore(nn.Module):
    """Luong 2015, eq. 8: score(h_t, h̄_s) = h_tᵀ h̄_s (no parameters).

    Shapes: query (B, T, D), keys (B, S, D) -> scores (B, T, S).
    """

    def precompute_keys(self, keys: Tensor) -> Tensor:
        return keys  # (B, S, D)

    def score(self, query: Tensor, keys_pre: Tensor) -> Tensor:
        return dot(query, keys_pre)  # (B, T, S)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.score(query, self.precompute_keys(keys))  # (B, T, S)


class ScaledDotScore(DotScore):
    """Vaswani 2017, eq. 1: score(q, k) = qᵀk / √d_k (no parameters).

    Shapes: query (B, T, d_k), keys (B, S, d_k) -> scores (B, T, S).
    """

    def score(self, query: Tensor, keys_pre: Tensor) -> Tensor:
        return scaled_dot(query, keys_pre)  # (B, T, S)


class GeneralScore(nn.Module):
    """Luong 2015, eq. 8 ("general"): score(h_t, h̄_s) = h_tᵀ Wₐ h̄_s.

    Wₐ ∈ ℝ^{Dq×Dk} is stored as ``W_a = nn.Linear(Dk, Dq, bias=False)`` (its weight is
    Wₐ), so ``W_a(h̄_s)`` = Wₐ h̄_s is precomputed once per source.

    Shapes: query (B, T, Dq), keys (B, S, Dk) -> scores (B, T, S).
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.W_a = nn.Linear(key_dim, query_dim, bias=False)

    def precompute_keys(self, keys: Tensor) -> Tensor:
        return self.W_a(keys)  # (B, S, Dq)  Wₐ h̄_s

    def score(self, query: Tensor, keys_pre: Tensor) -> Tensor:
        return dot(query, keys_pre)  # (B, T, S)  h_tᵀ (Wₐ h̄_s)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.score(query, self.precompute_keys(keys))  # (B, T, S)


class AdditiveScore(nn.Module):
    """Bahdanau 2015, eq. 6 with appendix A.1.2: e_ij = vₐᵀ tanh(Wₐ s_{i−1} + Uₐ h_j).

    Wₐ ∈ ℝ^{A×Dq}, Uₐ ∈ ℝ^{A×Dk}, vₐ ∈ ℝ^A (A = n′ in the paper, ``attn_dim`` here).
    Uₐ h_j does not depend on i, so it is precomputed once per source (the paper notes
    the same in A.1.2); each decoder step then costs O(S·A).

    Deviations: none (no biases, as in the paper).

    Shapes: query s_{i−1} (B, T, Dq), keys h_j (B, S, Dk) -> scores e (B, T, S).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.W_a = nn.Linear(query_dim, attn_dim, bias=False)
        self.U_a = nn.Linear(key_dim, attn_dim, bias=False)
        self.v_a = nn.Linear(attn_dim, 1, bias=False)

    def precompute_keys(self, keys: Tensor) -> Tensor:
        return self.U_a(keys)  # (B, S, A)  Uₐ h_j

    def score(self, query: Tensor, keys_pre: Tensor) -> Tensor:
        W_a_s = self.W_a(query)  # (B, T, A)  Wₐ s_{i−1}
        hidden = torch.tanh(W_a_s.unsqueeze(2) + keys_pre.unsqueeze(1))  # (B, T, S, A)
        return self.v_a(hidden).squeeze(-1)  # (B, T, S)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.score(query, self.precompute_keys(keys))  # (B, T, S)


class ConcatScore(nn.Module):
    """Luong 2015, eq. 8 ("concat"): score(h_t, h̄_s) = vₐᵀ tanh(Wₐ [h_t; h̄_s]).

    Wₐ ∈ ℝ^{A×(Dq+Dk)} is ``W_a = nn.Linear(Dq + Dk, A, bias=False)``. Writing Wₐ = [Wₐᵗ Wₐˢ]
    (its first Dq and last Dk columns), Wₐ [h_t; h̄_s] = Wₐᵗ h_t + Wₐˢ h̄_s: the same
    number, computed without building the (B, T, S, Dq+Dk) concatenation, and with
    Wₐˢ h̄_s precomputed once per source.

    Deviations: none (the block split is exact; no biases, as in the paper).

    Shapes: query h_t (B, T, Dq), keys h̄_s (B, S, Dk) -> scores (B, T, S).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.W_a = nn.Linear(query_dim + key_dim, attn_dim, bias=False)
        self.v_a = nn.Linear(attn_dim, 1, bias=False)

    def precompute_keys(self, keys: Tensor) -> Tensor:
        W_a_s = self.W_a.weight[:, self.query_dim :]  # (A, Dk)  Wₐˢ
        return keys @ W_a_s.t()  # (B, S, A)  Wₐˢ h̄_s

    def score(self, query: Tensor, keys_pre: Tensor) -> Tensor:
        W_a_t = self.W_a.weight[:, : self.query_dim]  # (A, Dq)  Wₐᵗ
        W_a_h = query @ W_a_t.t()  # (B, T, A)  Wₐᵗ h_t
        hidden = torch.tanh(W_a_h.unsqueeze(2) + keys_pre.unsqueeze(1))  # (B, T, S, A)
        return self.v_a(hidden).squeeze(-1)  # (B, T, S)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.score(query, self.precompute_keys(keys))  # (B, T, S)


def make_score(
    score: ScoreName, query_dim: int, key_dim: int, attn_dim: int | None = None
) -> nn.Module:
    """Build the score module named ``score``; ValueError when the dims cannot work.

    ``attn_dim`` (A) is used by "additive" and "concat" only; it defaults to ``query_dim``
    (Bahdanau 2015 uses n′ = n, the decoder width).
    """
    if query_dim <= 0 or key_dim <= 0:
        raise ValueError(f"query_dim and key_dim must be positive, got {query_dim}, {key_dim}")
    if score in ("dot", "scaled_dot"):
        if query_dim != key_dim:
            raise ValueError(
                f"score={score!r} compares queries and keys directly and needs "
                f"query_dim == key_dim, got query_dim={query_dim}, key_dim={key_dim}; "
                "use score='general', 'concat' or 'additive' for different widths"
            )
        return DotScore() if score == "dot" else ScaledDotScore()
    if score == "general":
        return GeneralScore(query_dim, key_dim)
    if score in ("additive", "concat"):
        A = query_dim if attn_dim is None else attn_dim
        if A <= 0:
            raise ValueError(f"attn_dim must be positive, got {A}")
        cls = AdditiveScore if score == "additive" else ConcatScore
        return cls(query_dim, key_dim, A)
    raise ValueError(
        f"unknown score {score!r}; expected one of additive, dot, general, concat, scaled_dot"
    )


class Attention(nn.Module):
    """Single-head attention with a choice of score (Bahdanau 2015, Luong 2015, Vaswani 2017).

        e = score(query, keys)                  (see the score modules above)
        α = masked_softmax(e, mask)             Bahdanau eq. 6 / Luong eq. 7
        c = α · values                          Bahdanau eq. 5: c_i = Σ_j α_ij h_j

    ``values`` default to ``keys`` (the encoder states are both, as in both RNN papers).
    A query of shape (B, Dq) is one decoder step: the result is (B, Dv) and (B, S).
    ``precomputed_keys`` (from ``precompute_keys(keys)``) skips re-projecting the keys on
    every decoder step.

    Shapes:
        query:   (B, T, Dq) or (B, Dq)
        keys:    (B, S, Dk)
        values:  (B, S, Dv) or None (= keys)
        mask:    bool, True = keep: (B, S) key padding, or 3-D broadcastable to (B, T, S);
                 a 2-D mask is always read as (B, S), so pass a causal (T, S) as (1, T, S)
        returns: context (B, T, Dv) or (B, Dv); weights α (B, T, S) or (B, S)
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        score: ScoreName,
        attn_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.score_name = score
        self.score = make_score(score, query_dim, key_dim, attn_dim)

    def precompute_keys(self, keys: Tensor) -> Tensor:
        """The key-only part of the score (e.g. Uₐ h_j), to reuse over decoder steps."""
        self._check_dim(keys, self.key_dim, "keys")
        return self.score.precompute_keys(keys)  # (B, S, ·)

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor | None = None,
        mask: Tensor | None = None,
        precomputed_keys: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        self._check_dim(query, self.query_dim, "query")
        if keys.dim() != 3:
            raise ValueError(f"keys must be (B, S, Dk), got shape {tuple(keys.shape)}")
        values = keys if values is None else values  # (B, S, Dv)
        single_step = query.dim() == 2
        if single_step:
            query = query.unsqueeze(1)  # (B, 1, Dq)
        if precomputed_keys is None:
            precomputed_keys = self.precompute_keys(keys)  # (B, S, ·)
        e = self.score.score(query, precomputed_keys)  # (B, T, S)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (B, 1, S)  key padding -> every query row
        alpha = masked_softmax(e, mask)  # (B, T, S)
        context = alpha @ values  # (B, T, Dv)
        if single_step:
            return context.squeeze(1), alpha.squeeze(1)  # (B, Dv), (B, S)
        return context, alpha

    @staticmethod
    def _check_dim(x: Tensor, expected: int, name: str) -> None:
        if x.shape[-1] != expected:
            raise ValueError(f"{name} last dim must be {expected}, got shape {tuple(x.shape)}")

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, score={self.score_name!r}"
