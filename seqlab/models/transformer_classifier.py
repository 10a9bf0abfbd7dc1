"""Transformer-encoder sentence classifier: Vaswani et al. (2017) encoder + pooling.

    h = Encoder(PE(√d · E[x]))                        (§3.1, §3.4, §3.5; padding keys masked)
    z = (1/T_b) Σ_t h_t        (pool="mean")
    z = h_[CLS]                (pool="cls": a learned vector prepended at position 0, as
                                BERT's [CLS], Devlin et al. 2019 §3)
    ŷ = softmax(W · dropout(z) + b)

Deviations: the classification head is not in Vaswani 2017 (mean pooling: e.g.
Reimers & Gurevych 2019; CLS: BERT). The [CLS] vector is a model parameter rather than a
vocabulary entry (the word vocabulary is built from the data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.models.classifiers import EmbeddingInit, make_embedding, masked_mean
from seqlab.nn.dropout import Dropout
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from seqlab.nn.transformer import TransformerEncoder
from seqlab.registry import MODELS

__all__ = ["TransformerClassifier", "TransformerClassifierConfig"]


@dataclass(frozen=True)
class TransformerClassifierConfig:
    """Encoder hyper-parameters (names as ``seqlab.models.transformer``) and ``pool``.

    ``scale_embeddings``: multiply E[x] by √d_model (§3.4; E is then initialised with
    std d_model^−½); turn it off when starting from pretrained word vectors.
    """

    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 256
    n_layers: int = 2
    dropout: float = 0.1
    activation: Literal["relu", "gelu"] = "relu"
    norm_first: bool = False
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 512
    pool: Literal["mean", "cls"] = "mean"
    scale_embeddings: bool = True
    freeze_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.n_layers < 1 or self.d_ff < 1:
            raise ValueError("model.n_layers and model.d_ff must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


@MODELS.register("transformer_classifier", TransformerClassifierConfig)
class TransformerClassifier(nn.Module):
    """Transformer encoder over the sentence, mean or [CLS] pooling, linear softmax layer.

    Shapes:
        x (B, T) long, mask (B, T) bool -> logits (B, C)
    """

    def __init__(
        self,
        cfg: TransformerClassifierConfig,
        vocab: int,
        n_classes: int,
        pad_id: int = 0,
        embedding_init: EmbeddingInit | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        std = d**-0.5 if cfg.scale_embeddings else 0.1
        self.embed = make_embedding(
            vocab,
            d,
            pad_id,
            std,
            cfg.freeze_embeddings,
            embedding_init,
            scale=cfg.scale_embeddings,
        )
        if cfg.positions == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(d, cfg.max_positions, cfg.dropout)
        else:
            self.pos = LearnedPositionalEmbedding(cfg.max_positions, d, cfg.dropout)
        self.encoder = TransformerEncoder(
            cfg.n_layers, d, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.activation, cfg.norm_first
        )
        self.cls = nn.Parameter(torch.randn(d) * std) if cfg.pool == "cls" else None  # (D,)
        self.dropout = Dropout(cfg.dropout)
        self.W = nn.Linear(d, n_classes)
        for p in self.encoder.parameters():
            if p.dim() == 2:  # Xavier-uniform projections, as seqlab.models.transformer
                nn.init.xavier_uniform_(p)
        MultiHeadAttention.reset_all(self.encoder)  # stacked-Q/K/V fan, zero biases

    def encode(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder states and their mask ([CLS] first when pool="cls").

        Shapes: (B, T), (B, T) -> h (B, T', D), mask (B, T'), T' = T (+1 with [CLS]).
        """
        e = self.embed(x)  # (B, T, D)
        if self.cls is not None:
            B = x.shape[0]
            e = torch.cat([self.cls.to(e.dtype).expand(B, 1, -1), e], dim=1)  # (B, T+1, D)
            mask = torch.cat([mask.new_ones(B, 1), mask], dim=1)  # (B, T+1)
        # Pooling reads real positions only, so training skips the padding (its FFNs,
        # norms and projections run on the N real rows; docs/perf-notes-training.md §36).
        skip = torch.is_grad_enabled()
        h, _ = self.encoder(self.pos(e), mask, skip_padding=skip)  # (B, T', D)
        return h, mask

    def features(self, x: Tensor, mask: Tensor) -> Tensor:
        """z: mean of h over real positions, or h at [CLS].  (B, T), (B, T) -> (B, D)."""
        h, mask = self.encode(x, mask)  # (B, T', D), (B, T')
        return h[:, 0] if self.cls is not None else masked_mean(h, mask)  # (B, D)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.W(self.dropout(self.features(x, mask)))  # (B, C)
