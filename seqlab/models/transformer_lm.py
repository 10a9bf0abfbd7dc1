"""Decoder-only Transformer language model (Radford et al. 2018, GPT; Vaswani et al. 2017).

The Transformer's decoder without encoder–decoder attention: N layers of masked
self-attention + position-wise FFN (Vaswani §3.1, §3.2.3), each position i attending to
positions j ≤ i only, so that x⟨1…t⟩ predicts y⟨t⟩ = x⟨t+1⟩:

    h_0 = E[x] (· √d if ``scale_embeddings``) + P[0 … T−1]          (B, T, D)
    h_l = Layer_l(h_{l−1}, causal mask)                             l = 1 … N
    logits = LN(h_N) W_outᵀ   (final LN with pre-norm only; W_out = E when tied, §3.4)

Each layer is :class:`seqlab.nn.transformer.TransformerEncoderLayer` (self-attention +
FFN, post- or pre-norm) called with the causal mask of ``seqlab.nn.masks``. Generation
caches every layer's keys and values (``TransformerLMState``): a new token costs one
query against t cached keys instead of re-running all t positions; ``cached_layer`` is that
incremental form of the same layer, and tests prove step-by-step == the causal forward.

The context is bounded (``context`` positions, the learned position table's size, the
"block size" of nanoGPT). Past it, ``step`` keeps the last context − 1 tokens and
re-encodes them, i.e. it conditions on a sliding window exactly as a full forward over
that window would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput, VocabProjection
from seqlab.nn.embedding import Embedding
from seqlab.nn.masks import causal_mask
from seqlab.nn.multihead import KVCache
from seqlab.nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from seqlab.nn.transformer import TransformerEncoderLayer
from seqlab.registry import MODELS


@dataclass(frozen=True)
class TransformerLMConfig:
    """Hyper-parameters; the defaults are nanoGPT's CPU Shakespeare setting (4 layers,
    width 128, 4 heads, context 64) with GPT-2's pre-norm, GELU and N(0, 0.02²) init."""

    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    layers: int = 4
    dropout: float = 0.0
    activation: Literal["relu", "gelu"] = "gelu"
    norm_first: bool = True
    positions: Literal["learned", "sinusoidal"] = "learned"
    context: int = 64
    tie_output: bool = True
    scale_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "d_ff", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"model.d_model={self.d_model} must be divisible by n_heads")
        if self.context < 2:
            raise ValueError(f"model.context must be >= 2, got {self.context}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TransformerLMState:
    """Keys/values of the t tokens read so far, per layer, and those tokens.

    Shapes:
        layers: N KVCache with k, v (B, H, t, Dh)
        tokens: (B, t) long (kept to re-encode a sliding window past ``context``)
    """

    layers: list[KVCache]
    tokens: Tensor

    @property
    def length(self) -> int:
        return self.tokens.size(1)

    def detach(self) -> TransformerLMState:
        return TransformerLMState(
            [KVCache(kv.k.detach(), kv.v.detach()) for kv in self.layers], self.tokens
        )


def cached_layer(
    layer: TransformerEncoderLayer, x: Tensor, past: KVCache, mask: Tensor | None
) -> tuple[Tensor, KVCache]:
    """``layer`` applied to T new positions after t cached ones (same equations as its
    forward: a = MultiHead(h, [k_past; k], [v_past; v]); x ← x + a; x ← x + FFN(x), with
    the layer's norm placement).

    Shapes: x (B, T, D), past k/v (B, H, t, Dh), mask (T, t+T) bool or None
            -> x (B, T, D), k/v (B, H, t+T, Dh)
    """
    h = layer.sublayer_in(x, layer.norm1)  # (B, T, D)
    q, kv = layer.self_attn.project_qkv(h)  # (B, H, T, Dh) each: one stacked product
    kv = past.cat(kv)  # (B, H, t+T, Dh)
    a, _ = layer.self_attn.attend_heads(q, kv, mask)  # (B, T, D)
    x = layer.sublayer_out(x, a, layer.norm1)  # (B, T, D)
    h = layer.sublayer_in(x, layer.norm2)  # (B, T, D)
    return layer.sublayer_out(x, layer.ffn(h), layer.norm2), kv  # (B, T, D)


@MODELS.register("transformer_lm", TransformerLMConfig)
class TransformerLM(nn.Module):
    """Decoder-only Transformer LM (GPT-style) with a K/V-cached ``step``.

    Shapes:
        x (B, T) long, T ≤ context -> LMOutput(logits (B, T, V), state)
        step(x (B,) long, state) -> logits (B, V), state

    ``forward(x)`` (no state) returns state None: the model carries nothing from one
    training chunk to the next. ``forward(x, state)`` continues after the cached tokens.

    Deviations: GPT-style defaults (pre-norm, GELU, learned positions, no √d scaling,
    N(0, 0.02²) weights); ``norm_first=False``, ``activation="relu"``,
    ``positions="sinusoidal"``, ``scale_embeddings=True`` give Vaswani's decoder (minus
    encoder–decoder attention).
    """

    def __init__(self, cfg: TransformerLMConfig, vocab: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.V, self.pad_id = cfg, vocab, pad_id
        d = cfg.d_model
        self.embed = Embedding(
            vocab, d, padding_idx=pad_id, scale=cfg.scale_embeddings, init_std=cfg.init_std
        )
        if cfg.positions == "learned":
            self.pos = LearnedPositionalEmbedding(cfg.context, d, cfg.dropout)
        else:
            self.pos = SinusoidalPositionalEncoding(d, cfg.context, cfg.dropout)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(
                d, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.activation, cfg.norm_first
            )
            for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(d) if cfg.norm_first else None
        self.head = VocabProjection(d, vocab, tied=cfg.tie_output, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, σ²) for every matrix (embedding, positions, projections), zero biases."""
        for module in self.layers.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, self.cfg.init_std)
                if module.bias is not None:
                    module.bias.zero_()
        if self.head.W_out is not None:
            nn.init.normal_(self.head.W_out, 0.0, self.cfg.init_std)
        self.embed.weight[self.pad_id].zero_()

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> TransformerLMState:
        """Nothing read yet: empty caches (B, H, 0, Dh) and no tokens (B, 0)."""
        H = self.cfg.n_heads
        Dh = self.cfg.d_model // H
        dtype = self.embed.weight.dtype
        empty = torch.zeros(batch_size, H, 0, Dh, device=device, dtype=dtype)  # (B, H, 0, Dh)
        tokens = torch.zeros(batch_size, 0, dtype=torch.long, device=device)  # (B, 0)
        return TransformerLMState([KVCache(empty, empty) for _ in self.layers], tokens)

    def _check_length(self, offset: int, T: int) -> None:
        if offset + T > self.cfg.context:
            raise ValueError(
                f"positions {offset}…{offset + T - 1} exceed the context of "
                f"{self.cfg.context} (model.context): feed at most {self.cfg.context} tokens"
            )

    def forward(self, x: Tensor, state: TransformerLMState | None = None) -> LMOutput:
        T = x.size(1)
        offset = 0 if state is None else state.length
        self._check_length(offset, T)
        h = self.pos(self.embed(x), offset=offset)  # (B, T, D)
        new_state = None
        if state is None:
            mask = causal_mask(T, T, x.device)  # (T, T)
            for layer in self.layers:
                h, _ = layer(h, mask)  # (B, T, D)
        else:
            mask = causal_mask(T, offset + T, x.device) if T > 1 else None  # (T, t+T)
            caches = []
            for layer, past in zip(self.layers, state.layers):
                h, kv = cached_layer(layer, h, past, mask)  # (B, T, D)
                caches.append(kv)
            new_state = TransformerLMState(caches, torch.cat([state.tokens, x], dim=1))  # (B, t+T)
        if self.norm is not None:
            h = self.norm(h)  # (B, T, D)
        E = self.embed.weight if self.cfg.tie_output else None  # (V, D) when tied
        return LMOutput(self.head(h, E), new_state)  # (B, T, V)

    @torch.no_grad()
    def attention_maps(self, x: Tensor) -> Tensor:
        """The masked self-attention weights of every layer and head for the tokens x
        (B, T), read from the start (no cache): α^l_h[t, i] = softmax_i(q_t·k_i / √d_k)
        over i ≤ t (Vaswani §3.2.3), through the layers' readable attention path.
        Returns (L, B, H, T, T); each row sums to 1 and is 0 above the diagonal."""
        T = x.size(1)
        self._check_length(0, T)
        h = self.pos(self.embed(x), offset=0)  # (B, T, D)
        mask = causal_mask(T, T, x.device)  # (T, T)
        maps = []
        for layer in self.layers:
            h, alpha = layer(h, mask, need_weights=True)  # (B, T, D), (B, H, T, T)
            maps.append(alpha)
        return torch.stack(maps)  # (L, B, H, T, T)

    def step(
        self, x: Tensor, state: TransformerLMState | None
    ) -> tuple[Tensor, TransformerLMState]:
        """One token after the cached ones; past the context, a sliding window.  x (B,)."""
        if state is None:
            state = self.init_state(x.size(0), x.device)
        if state.length >= self.cfg.context:
            window = state.tokens[:, -(self.cfg.context - 1) :]  # (B, context − 1)
            state = self.forward(window, self.init_state(x.size(0), x.device)).state
        out = self.forward(x[:, None], state)
        return out.logits[:, 0], out.state  # (B, V)
