"""Kim (2014), "Convolutional Neural Networks for Sentence Classification" (§2, §3.1).

A sentence x₁ … x_n of k-dimensional word vectors; a filter w ∈ R^{h·k} of width h words

    c_i = f(w · x_{i:i+h−1} + b)                    (eq. 2, f = ReLU)
    ĉ = max{c} = max_i c_i                          (max-over-time pooling)
    z = [ĉ_1, …, ĉ_m]                               (m = 3 widths × 100 maps)
    y = w_s · (z ∘ r) + b_s,  r_j ~ Bernoulli(p)     (eq. 5, dropout p = 0.5 while training)
    ‖w_s‖₂ ≤ s = 3                                  (max-norm: rescale w_s when larger)

Each sentence is zero-padded by h − 1 vectors on both sides (a wide convolution, as
Kim's code pads by max h − 1), so it has n + h − 1 windows, each holding at least one
real word, and sentences shorter than h still give a feature.

Deviations: Kim pads every sentence to the corpus' longest and pools over all windows,
padding-only ones too (their value ReLU(b) depends on that maximum); here only the
n + h − 1 windows overlapping the sentence are pooled, so padding changes nothing.
Kim rescales w_s right after each update; here training-mode ``forward`` rescales the
stored weights first (the same sequence of weights is used) and evaluation uses the
rescaled copy without writing it. Dropout is inverted (kept units scaled by 1/(1 − p) in
training, identity at test) where Kim scales w_s by the keep rate at test; in Kim's
parametrisation the weight is w_s = w/(1 − p), so the constraint ‖w_s‖ ≤ s reads
‖w‖ ≤ s·(1 − p) here. The paper trains with Adadelta; the presets use Adam.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.classifiers import EmbeddingInit, make_embedding
from seqlab.nn.conv import Conv1d
from seqlab.nn.dropout import Dropout
from seqlab.nn.masks import padding_mask
from seqlab.registry import MODELS

__all__ = ["KimCNN", "KimCNNConfig", "max_over_time"]


def max_over_time(c: Tensor, n_windows: Tensor) -> Tensor:
    """ĉ = max_{i < n_b} c_i per feature map: max-over-time pooling of each row's first
    n_b windows (the others overlap padding only).

    Shapes:
        c: (B, W, n_maps)   n_windows: (B,) long, each in [1, W]   returns: (B, n_maps)
    """
    valid = padding_mask(n_windows, c.shape[1])  # (B, W)
    return c.masked_fill(~valid[..., None], torch.finfo(c.dtype).min).amax(1)  # (B, n_maps)


@dataclass(frozen=True)
class KimCNNConfig:
    """Kim 2014 §3.1: filter widths 3, 4, 5 with 100 feature maps each, dropout 0.5,
    max-norm s = 3 (null: no constraint); word vectors k = 300 (``d_embed``)."""

    d_embed: int = 300
    widths: tuple[int, ...] = (3, 4, 5)
    n_maps: int = 100
    dropout: float = 0.5
    max_norm: float | None = 3.0
    embed_std: float = 0.1
    freeze_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.d_embed < 1 or self.n_maps < 1:
            raise ValueError("model.d_embed and model.n_maps must be >= 1")
        if not self.widths or any(h < 1 for h in self.widths):
            raise ValueError(
                f"model.widths must be a non-empty list of widths >= 1, got {self.widths}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.max_norm is not None and not self.max_norm > 0:
            raise ValueError(f"model.max_norm must be > 0 or null, got {self.max_norm}")
        if not self.embed_std > 0.0:
            raise ValueError(f"model.embed_std must be > 0, got {self.embed_std}")


@MODELS.register("kim_cnn", KimCNNConfig)
class KimCNN(nn.Module):
    """Kim 2014 CNN: convolutions of widths h ∈ widths, ReLU, max-over-time, dropout, linear.

    Parameters: ``embed`` (E), ``convs[j]`` (filters w of width widths[j], n_maps each),
    ``W`` (w_s, b_s).

    Shapes:
        x (B, T) long, mask (B, T) bool (prefix mask) -> logits (B, C)
    """

    def __init__(
        self,
        cfg: KimCNNConfig,
        vocab: int,
        n_classes: int,
        pad_id: int = 0,
        embedding_init: EmbeddingInit | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = make_embedding(
            vocab, cfg.d_embed, pad_id, cfg.embed_std, cfg.freeze_embeddings, embedding_init
        )
        self.convs = nn.ModuleList(
            Conv1d(cfg.d_embed, cfg.n_maps, h, padding=h - 1) for h in cfg.widths
        )
        self.dropout = Dropout(cfg.dropout)
        self.W = nn.Linear(len(cfg.widths) * cfg.n_maps, n_classes)  # w_s, b_s

    def features(self, x: Tensor, mask: Tensor) -> Tensor:
        """z = [ĉ_1, …, ĉ_m].  (B, T), (B, T) -> (B, len(widths)·n_maps)."""
        e = self.embed(x) * mask[..., None].to(self.embed.weight.dtype)  # (B, T, k), pads 0
        n = mask.sum(1)  # (B,)
        pooled = []
        for h, conv in zip(self.cfg.widths, self.convs):
            c = F.relu(conv(e))  # (B, T + h − 1, n_maps)  c_i = f(w · x_{i:i+h−1} + b)
            pooled.append(max_over_time(c, n + h - 1))  # (B, n_maps)
        return torch.cat(pooled, dim=-1)  # (B, m)

    def output_weight(self) -> Tensor:
        """The output weight w with every class row of L2 norm ≤ s·(1 − p) (Kim's max-norm
        ‖w_s‖ ≤ s on w_s = w/(1 − p), see the module docstring).

        Training mode rescales the stored rows in place (as after each update in the
        paper) and returns them; evaluation returns a rescaled copy. Shapes: (C, m).
        """
        w = self.W.weight  # (C, m)
        if self.cfg.max_norm is None:
            return w
        s = self.cfg.max_norm * (1.0 - self.cfg.dropout)
        if self.training:
            with torch.no_grad():
                w.copy_(torch.renorm(w, 2, 0, s))  # rows with ‖w_c‖ > s rescaled to norm s
            return w
        return torch.renorm(w, 2, 0, s)  # (C, m)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        z = self.dropout(self.features(x, mask))  # (B, m)  z ∘ r (inverted dropout)
        return F.linear(z, self.output_weight(), self.W.bias)  # (B, C)
