"""Sentence classifiers (many-to-one): the averaged-embedding model and the RNN/GRU/LSTM
/ BiLSTM classifier, plus the pieces every classifier shares (embedding table, masked
pooling). Kim's CNN is in ``seqlab.models.kim_cnn``, the Transformer encoder classifier in
``seqlab.models.transformer_classifier``.

Classifier contract (every registered classifier):

    Model(cfg, vocab: int, n_classes: int, pad_id: int = 0, embedding_init=None)
    forward(x (B, T) long, mask (B, T) bool) -> logits (B, C)

``mask`` is True at real tokens and must be a prefix mask (each row: T_b ≥ 1 True, then
False); padding never changes the logits (tested for every model). ``embedding_init``
(optional) is called once with the model's :class:`~seqlab.nn.embedding.Embedding` after
initialisation (the classify task passes one that copies pretrained word vectors in).

Notes 003, "Sentiment classification problem": averaging the embeddings ignores word
order, so "completely lacking in good taste, good service, and good ambience" looks
positive; "RNN for sentiment classification" reads the sentence in order and predicts ŷ
from the representation at the last time step (many-to-one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from seqlab.nn.dropout import Dropout
from seqlab.nn.embedding import Embedding
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS

__all__ = [
    "AvgEmbeddingClassifier",
    "AvgEmbeddingConfig",
    "bigram_ids",
    "hash_extend",
    "EmbeddingInit",
    "RNNClassifier",
    "RNNClassifierConfig",
    "last_state",
    "make_embedding",
    "masked_max",
    "masked_mean",
]

EmbeddingInit = Callable[[Embedding], Any]
"""Called once with the freshly initialised embedding table (e.g. to load word vectors)."""


def make_embedding(
    vocab: int,
    d_embed: int,
    pad_id: int,
    init_std: float,
    freeze: bool,
    embedding_init: EmbeddingInit | None,
    scale: bool = False,
) -> Embedding:
    """E ∈ R^{V×D} ~ N(0, init_std²), pad row zero; then ``embedding_init(E)``; frozen
    (no gradient, Kim 2014's "static") when ``freeze``."""
    embed = Embedding(vocab, d_embed, padding_idx=pad_id, scale=scale, init_std=init_std)
    if embedding_init is not None:
        embedding_init(embed)
    embed.weight.requires_grad_(not freeze)
    return embed


def masked_mean(h: Tensor, mask: Tensor) -> Tensor:
    """h̄ = (1/T_b) Σ_{t: m_t} h_t, the average over real positions.

    Shapes:
        h: (B, T, D)   mask: (B, T) bool   returns: (B, D)
    """
    m = mask.to(h.dtype)[..., None]  # (B, T, 1)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, D)


def masked_max(h: Tensor, mask: Tensor) -> Tensor:
    """max over real positions, per feature: ĥ_d = max_{t: m_t} h_{t,d}.

    Shapes:
        h: (B, T, D)   mask: (B, T) bool   returns: (B, D)
    """
    filled = h.masked_fill(~mask[..., None], torch.finfo(h.dtype).min)  # (B, T, D)
    return filled.amax(1)  # (B, D)


def last_state(final: Tensor | tuple[Tensor, Tensor], num_directions: int) -> Tensor:
    """The many-to-one readout of a :class:`Recurrent`: the last layer's final hidden
    state, [→a⟨T_b⟩ ; ←a⟨1⟩] when bidirectional (the forward direction stops at the last
    real token, the backward one has read the whole sentence back to x⟨1⟩).

    Shapes:
        final:   (L·dirs, B, H), or (h_n, c_n) of that shape for the LSTM
        returns: (B, dirs·H)
    """
    h_n = final[0] if isinstance(final, tuple) else final  # (L·dirs, B, H)
    top = h_n[-num_directions:]  # (dirs, B, H)  last layer, torch's order (→, ←)
    return top.transpose(0, 1).reshape(top.shape[1], -1)  # (B, dirs·H)


@dataclass(frozen=True)
class AvgEmbeddingConfig:
    """``d_embed`` D; ``hidden`` 0 is the notes' model (mean → softmax), > 0 adds one tanh
    layer of that width (a deep-averaging network, Iyyer et al. 2015); ``dropout`` on the
    average; ``embed_std`` the N(0, σ²) initialisation of E; ``bigram_buckets`` K > 0 also
    averages hashed word-bigram vectors (fastText, Joulin et al. 2017), 0 = words only."""

    d_embed: int = 300
    hidden: int = 0
    dropout: float = 0.0
    embed_std: float = 0.1
    freeze_embeddings: bool = False
    bigram_buckets: int = 0

    def __post_init__(self) -> None:
        _check_common(self.d_embed, self.dropout, self.embed_std)
        if self.hidden < 0:
            raise ValueError(f"model.hidden must be >= 0, got {self.hidden}")
        if self.bigram_buckets < 0:
            raise ValueError(f"model.bigram_buckets must be >= 0, got {self.bigram_buckets}")


BIGRAM_PRIME = 1_000_003


def hash_extend(h: Tensor, nxt: Tensor, buckets: int) -> Tensor:
    """One step of the polynomial n-gram hash: (h·P + x_next) mod K, P = 1,000,003. From a
    word id h = x⟨t⟩ it gives the bigram's id; from a bigram's id, the trigram's; …

    Shapes: h, nxt (B, T') long -> (B, T') long
    """
    return (h * BIGRAM_PRIME + nxt) % buckets


def bigram_ids(x: Tensor, buckets: int) -> Tensor:
    """Hashed ids of the word bigrams (x⟨t⟩, x⟨t+1⟩): (x⟨t⟩·P + x⟨t+1⟩) mod K, P = 1,000,003
    (fastText hashes n-grams into K buckets the same way; collisions share a vector).

    Shapes: x (B, T) long -> (B, T − 1) long
    """
    return hash_extend(x[:, :-1], x[:, 1:], buckets)  # (B, T−1)


@MODELS.register("avg_embedding", AvgEmbeddingConfig)
class AvgEmbeddingClassifier(nn.Module):
    """Averaged word embeddings → linear → softmax (notes 003, "Simple sentiment
    classification model"):

        h̄ = (1/T_b) Σ_t e⟨t⟩,   e⟨t⟩ = E o⟨t⟩        (order-blind)
        ŷ = softmax(W h̄ + b)                          (hidden > 0: W tanh(W_h h̄ + b_h) + b)

    With ``bigram_buckets`` K (fastText, Joulin et al. 2017, "Bag of Tricks", §2.2): the
    average runs over the T_b words and the T_b − 1 bigrams, whose vectors come from a
    second table G ∈ R^{K×D} at the hashed ids g⟨t⟩ = bigram_ids(x)⟨t⟩:

        h̄ = (Σ_{t ≤ T_b} e⟨t⟩ + Σ_{t < T_b} G[g⟨t⟩]) / (2 T_b − 1)

    Deviations: the notes average (or sum) and apply a softmax; ``hidden > 0`` is the
    deep averaging network of Iyyer et al. 2015, not the notes' model. fastText trains
    with SGD and a linearly decaying rate and uses word n-grams up to n; seqlab: bigrams,
    Adam, dropout on h̄.

    Shapes:
        x (B, T) long, mask (B, T) bool -> logits (B, C)
    """

    def __init__(
        self,
        cfg: AvgEmbeddingConfig,
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
        self.G = None
        if cfg.bigram_buckets:
            self.G = nn.Embedding(cfg.bigram_buckets, cfg.d_embed)
            nn.init.normal_(self.G.weight, std=cfg.embed_std)
        self.W_h = nn.Linear(cfg.d_embed, cfg.hidden) if cfg.hidden else None
        self.dropout = Dropout(cfg.dropout)
        self.W = nn.Linear(cfg.hidden or cfg.d_embed, n_classes)

    def features(self, x: Tensor, mask: Tensor) -> Tensor:
        """h̄ (or tanh(W_h h̄ + b_h)).  (B, T), (B, T) -> (B, D')."""
        e = self.embed(x)  # (B, T, D)
        if self.G is None:
            h = masked_mean(e, mask)  # (B, D)
        else:
            g = self.G(bigram_ids(x, self.cfg.bigram_buckets))  # (B, T−1, D)
            both = torch.cat([e, g], 1)  # (B, 2T−1, D)
            h = masked_mean(both, torch.cat([mask, mask[:, 1:]], 1))  # (B, D); prefix mask
        return torch.tanh(self.W_h(h)) if self.W_h is not None else h  # (B, D')

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.W(self.dropout(self.features(x, mask)))  # (B, C)


@dataclass(frozen=True)
class RNNClassifierConfig:
    """``cell`` rnn/gru/lstm; ``hidden`` H per direction; ``bidirectional`` (BiLSTM with
    cell=lstm); ``pool``: ``last`` is the notes' many-to-one readout (:func:`last_state`),
    ``mean``/``max`` pool the top layer's outputs over real positions; ``embed_dropout`` on
    e⟨t⟩, ``dropout`` between layers and on the sentence vector."""

    cell: Literal["rnn", "gru", "lstm"] = "lstm"
    d_embed: int = 300
    hidden: int = 150
    num_layers: int = 1
    bidirectional: bool = False
    pool: Literal["last", "mean", "max"] = "last"
    dropout: float = 0.5
    embed_dropout: float = 0.0
    embed_std: float = 0.1
    freeze_embeddings: bool = False

    def __post_init__(self) -> None:
        _check_common(self.d_embed, self.dropout, self.embed_std)
        if self.hidden < 1 or self.num_layers < 1:
            raise ValueError("model.hidden and model.num_layers must be >= 1")
        if not 0.0 <= self.embed_dropout < 1.0:
            raise ValueError(f"model.embed_dropout must be in [0, 1), got {self.embed_dropout}")


@MODELS.register("rnn_classifier", RNNClassifierConfig)
class RNNClassifier(nn.Module):
    """Many-to-one RNN / GRU / LSTM / BiLSTM classifier (notes 003, "RNN for sentiment
    classification"):

        a⟨t⟩ = cell(e⟨t⟩, a⟨t−1⟩),  t = 1 … T_b          (seqlab.nn.recurrent.Recurrent)
        z = a⟨T_b⟩   (bidirectional: [→a⟨T_b⟩ ; ←a⟨1⟩])   ŷ = softmax(W z + b)

    Variable lengths go to ``Recurrent`` (fused kernel over packed sequences), so z is
    the state after the last *real* token of each row.

    Deviations: ``pool="mean"/"max"`` replace the last state by pooling over time (not the
    notes' readout); dropout on embeddings and on z (Zaremba et al. 2014 style) is not in
    the notes.

    Shapes:
        x (B, T) long, mask (B, T) bool (prefix mask) -> logits (B, C)
    """

    def __init__(
        self,
        cfg: RNNClassifierConfig,
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
        self.embed_dropout = Dropout(cfg.embed_dropout)
        self.rnn = Recurrent(
            cfg.cell,
            cfg.d_embed,
            cfg.hidden,
            num_layers=cfg.num_layers,
            bidirectional=cfg.bidirectional,
            dropout=cfg.dropout if cfg.num_layers > 1 else 0.0,
        )
        self.dropout = Dropout(cfg.dropout)
        self.W = nn.Linear(self.rnn.num_directions * cfg.hidden, n_classes)

    def features(self, x: Tensor, mask: Tensor) -> Tensor:
        """The sentence vector z.  (B, T), (B, T) -> (B, dirs·H)."""
        e = self.embed_dropout(self.embed(x))  # (B, T, D)
        lengths = mask.sum(1)  # (B,)
        outputs, final = self.rnn(e, lengths)  # (B, T, dirs·H), (L·dirs, B, H)
        if self.cfg.pool == "last":
            return last_state(final, self.rnn.num_directions)  # (B, dirs·H)
        T = int(lengths.max())
        if self.cfg.pool == "mean":
            return masked_mean(outputs[:, :T], mask[:, :T])  # (B, dirs·H)
        return masked_max(outputs[:, :T], mask[:, :T])  # (B, dirs·H)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.W(self.dropout(self.features(x, mask)))  # (B, C)


def _check_common(d_embed: int, dropout: float, embed_std: float) -> None:
    if d_embed < 1:
        raise ValueError(f"model.d_embed must be >= 1, got {d_embed}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"model.dropout must be in [0, 1), got {dropout}")
    if not embed_std > 0.0:
        raise ValueError(f"model.embed_std must be > 0, got {embed_std}")
