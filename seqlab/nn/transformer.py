"""Transformer encoder: the position-wise FFN, the residual sublayer wrapper, the encoder.

Vaswani et al. 2017, §3.1: each layer has sublayers (self-attention, then a
position-wise feed-forward network); each sublayer is wrapped as

    post-norm (the paper, ``norm_first=False``):  x ← LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm  (``norm_first=True``):              x ← x + Dropout(Sublayer(LayerNorm(x)))

(§5.4 "Residual Dropout": dropout on each sublayer output before the residual add.)
Pre-norm (Wang et al. 2019; Xiong et al. 2020) trains deep stacks without warm-up; its
residual stream is never normalised inside the stack, so the stacks below add one final
LayerNorm after the last layer when ``norm_first=True`` — and only then (post-norm
outputs are already normalised), as tensor2tensor and ``torch.nn.Transformer`` do.

The decoder (masked self-attention + encoder–decoder attention + FFN, with incremental
decoding) is in ``seqlab.nn.transformer_decoder``. Attention itself is
``seqlab.nn.multihead.MultiHeadAttention``; masks are bool, True = keep.

tests/nn/test_transformer.py proves these layers equal ``torch.nn.TransformerEncoderLayer``
(both norm placements) with copied weights, values and gradients, with padding masks.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.dropout import Dropout
from seqlab.nn.masks import attention_mask
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.nn.row_packing import PaddedRows

Activation = Literal["relu", "gelu"]


class FeedForward(nn.Module):
    """Position-wise feed-forward network, Vaswani 2017 eq. 2:

        FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

    applied to each position separately and identically (inner width d_ff).

    Deviations: ``activation="gelu"`` replaces max(0, ·) by GELU (Hendrycks & Gimpel
    2016; BERT/GPT); dropout on the hidden activations (tensor2tensor's relu_dropout,
    also in ``torch.nn.TransformerEncoderLayer``) is not in the paper's equation.

    Shapes (any leading shape: the stacks below pass (N, D), the real positions alone,
    when they skip the padding):
        x:       (B, T, D)
        returns: (B, T, D)
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: Activation = "relu",
    ) -> None:
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.W_1 = nn.Linear(d_model, d_ff)  # W_1, b_1
        self.W_2 = nn.Linear(d_ff, d_model)  # W_2, b_2
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.W_1(x)  # (..., d_ff)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)  # (..., d_ff)
        return self.W_2(self.dropout(h))  # (..., D)


class ResidualSublayers(nn.Module):
    """The residual + LayerNorm wrapper shared by encoder and decoder layers (§3.1, §5.4).

    A layer computes each sublayer as ``h = self.sublayer_in(x, norm)``, then
    ``out = Sublayer(h)`` and ``x = self.sublayer_out(x, out, norm)``, which gives

        post-norm: x ← LayerNorm(x + Dropout(Sublayer(x)))
        pre-norm:  x ← x + Dropout(Sublayer(LayerNorm(x)))

    Deviations: pre-norm (``norm_first=True``) is not the paper's placement.

    Shapes: x, out (B, T, D) -> (B, T, D).
    """

    def __init__(self, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.dropout = Dropout(dropout)  # P_drop, "residual dropout" (§5.4)

    def sublayer_in(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.norm_first else x  # (B, T, D)

    def sublayer_out(self, x: Tensor, out: Tensor, norm: nn.LayerNorm) -> Tensor:
        x = x + self.dropout(out)  # (B, T, D)
        return x if self.norm_first else norm(x)  # (B, T, D)


class TransformerEncoderLayer(ResidualSublayers):
    """One encoder layer, Vaswani 2017 §3.1: self-attention, then FFN, each wrapped.

        a = MultiHead(x, x, x)         (masked: padding keys are not attended)
        x ← LayerNorm(x + Dropout(a))  (post-norm; pre-norm: see ResidualSublayers)
        x ← LayerNorm(x + Dropout(FFN(x)))

    Parameter names follow ``torch.nn.TransformerEncoderLayer`` where they can
    (``self_attn``, ``norm1``, ``norm2``); its linear1/linear2 are ``ffn.W_1``/``ffn.W_2``.

    Deviations: dropout also on attention weights and FFN hidden units (tensor2tensor);
    ``norm_first=True`` is the pre-norm variant, not the paper.

    Shapes:
        x:       (B, S, D)
        mask:    bool, True = keep, broadcastable to (B, H, S, S), e.g. (B, 1, 1, S) from
                 ``attention_mask(src_mask)``
        rows:    ``PaddedRows``: x is the real positions alone, (N, D), and so is the output;
                 attention puts them back into (B, S) for its core only
        returns: x (B, S, D); α (B, H, S, S) when need_weights, else None
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: Activation = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__(dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        rows: PaddedRows | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        h = self.sublayer_in(x, self.norm1)  # (B, S, D)
        a, alpha = self.self_attn(h, h, h, mask, need_weights, rows)  # (B, S, D), (B, H, S, S)
        x = self.sublayer_out(x, a, self.norm1)  # (B, S, D)
        h = self.sublayer_in(x, self.norm2)  # (B, S, D)
        x = self.sublayer_out(x, self.ffn(h), self.norm2)  # (B, S, D)
        return x, alpha


class TransformerEncoder(nn.Module):
    """A stack of N encoder layers (Vaswani 2017 §3.1, N = 6 in the base model).

    Takes the already embedded and position-encoded source (the model scales embeddings
    by √d_model and adds ``seqlab.nn.positional`` encodings).

    Deviations: with ``norm_first=True`` a final LayerNorm follows the last layer (the
    standard pre-norm stack); with the paper's post-norm there is none.

    Shapes:
        x:        (B, S, D)
        src_mask: (B, S) bool, True = real token (None: no padding)
        skip_padding: every layer but attention's core runs on the real positions alone
                  (``PaddedRows``; a CPU batch with padding), for callers that never read
                  the padding positions' outputs: those are then 0 (perf-notes-
                  training.md §36). The real positions' outputs are the same.
        returns:  x (B, S, D); a list of N α (B, H, S, S) when need_weights, else None
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: Activation = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(
                d_model, n_heads, d_ff, dropout, activation, norm_first, layer_norm_eps
            )
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else None

    def forward(
        self,
        x: Tensor,
        src_mask: Tensor | None = None,
        need_weights: bool = False,
        skip_padding: bool = False,
    ) -> tuple[Tensor, list[Tensor] | None]:
        mask = attention_mask(src_mask)  # (B, 1, 1, S) or None
        # skip_padding: the residual stream as the real positions only (CPU; PaddedRows.of)
        rows = PaddedRows.of(src_mask) if skip_padding else None
        if rows is not None:
            x = rows.pack(x)  # (N, D)
        weights: list[Tensor] = []
        for layer in self.layers:
            x, alpha = layer(x, mask, need_weights, rows)  # (B, S, D) or (N, D), (B, H, S, S)
            if alpha is not None:
                weights.append(alpha)
        if self.norm is not None:
            x = self.norm(x)  # (B, S, D) or (N, D)
        if rows is not None:
            x = rows.unpack(x)  # (B, S, D), 0 at padding
        return x, (weights if need_weights else None)
