"""Token embeddings: a lookup table E ∈ R^{V×D}, and the tied output projection.

A lookup is a matrix product with a one-hot vector (notes 003, "Embedding matrix
notation": e_w = E · o_w with E of shape (300, 10 000) = (D, V) and o_w the one-hot of w):

    e_{b,t} = E[x_{b,t}] = one_hot(x_{b,t}) E

Deviations: seqlab stores E transposed, (V, D) with one row per token, like
``nn.Embedding``; the notes' (D, V) matrix is ``weight.T``.

Vaswani et al. 2017 §3.4: the embedding weights are multiplied by √d_model, and the same
matrix is shared with the pre-softmax linear transformation (logits = h Eᵀ; Press & Wolf
2017).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.packed_linear import linear


def one_hot_times_E(tokens: Tensor, E: Tensor, padding_idx: int | None = None) -> Tensor:
    """Readable embedding lookup: one_hot(x) E.

    With ``padding_idx`` the padding row receives no gradient (as ``F.embedding``): its
    value is used but detached.

    Shapes:
        tokens: (B, T) long   E: (V, D)   returns: (B, T, D)
    """
    V = E.shape[0]
    o = F.one_hot(tokens, V).to(E.dtype)  # (B, T, V)
    if padding_idx is not None:
        frozen = torch.zeros(V, 1, dtype=torch.bool, device=E.device)  # (V, 1)
        frozen[padding_idx] = True
        E = torch.where(frozen, E.detach(), E)  # (V, D) same values, no grad on the pad row
    return o @ E  # (B, T, D)


def tied_logits(h: Tensor, E: Tensor, bias: Tensor | None = None) -> Tensor:
    """Output projection sharing the embedding matrix (Vaswani §3.4): logits = h Eᵀ + b.

    Shapes:
        h: (B, T, D)   E: (V, D)   bias: (V,)   returns: (B, T, V)
    """
    return linear(h, E, bias)  # (B, T, V); on a packed E while decoding (packed_linear)


class Embedding(nn.Module):
    """e = E[x] · (√D if ``scale`` else 1)   (lookup; Vaswani 2017 §3.4 scaling).

    ``weight`` is E (V, D), initialised N(0, init_std²) (``nn.Embedding``'s N(0, 1) by
    default); the ``padding_idx`` row is zero and gets no gradient. Fast path
    ``F.embedding``; equal to ``one_hot_times_E`` (tested: values and gradients).

    Shapes:
        tokens: (B, T) long -> (B, T, D)
    """

    def __init__(
        self,
        V: int,
        D: int,
        padding_idx: int | None = None,
        scale: bool = False,
        init_std: float = 1.0,
    ) -> None:
        super().__init__()
        if padding_idx is not None and not -V <= padding_idx < V:
            raise ValueError(f"padding_idx {padding_idx} out of range for V={V}")
        self.V, self.D = V, D
        self.padding_idx = padding_idx % V if padding_idx is not None else None
        self.scale = scale
        self.weight = nn.Parameter(torch.randn(V, D) * init_std)  # E (V, D)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()

    @property
    def multiplier(self) -> float:
        return math.sqrt(self.D) if self.scale else 1.0

    def forward(self, tokens: Tensor) -> Tensor:
        e = F.embedding(tokens, self.weight, self.padding_idx)  # (B, T, D)
        return e * self.multiplier if self.scale else e  # (B, T, D)
