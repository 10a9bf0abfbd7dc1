"""Sequence to sequence learning with deep LSTMs (Sutskever, Vinyals & Le, 2014).

A deep LSTM reads the (reversed) source; its final state — (h, c) of every layer — is the
initial state of a second deep LSTM, a conditional language model of the target:

    (h⟨S⟩_l, c⟨S⟩_l) = LSTM_enc(E_src[rev(x)])               l = 1 … L   (§2, §3.3)
    (h⟨0⟩_l, c⟨0⟩_l) = (h⟨S⟩_l, c⟨S⟩_l)                      decoder initial state
    h⟨t⟩ = LSTM_dec(E_tgt[y_{t−1}], h⟨t−1⟩)                  top layer h⟨t⟩ (B, H)
    p(y_t | y_<t, x) = softmax(W_out h⟨t⟩ + b_out)           (eq. 1)

No attention: the whole source reaches the decoder through the fixed-size final state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.models.rnn_common import (
    RNNEncoderDecoder,
    batch_major,
    check_config,
    init_uniform_,
    layer_major,
    lengths_of,
    stacked_step,
)
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


def reverse_padded(tokens: Tensor, lengths: Tensor) -> Tensor:
    """Reverse every row within its length; padding stays at the end (§3.3).

        out[b, t] = tokens[b, ℓ_b − 1 − t]   for t < ℓ_b,   tokens[b, t] otherwise

    Shapes: tokens (B, S), lengths (B,) -> (B, S)
    """
    t = torch.arange(tokens.shape[1], device=tokens.device)[None]  # (1, S)
    mirrored = lengths[:, None] - 1 - t  # (B, S)
    index = mirrored.where(mirrored >= 0, t)  # (B, S) padding positions map to themselves
    return tokens.gather(1, index)  # (B, S)


@dataclass(frozen=True)
class SutskeverConfig:
    """The paper: L = 4 layers, H = 1000 cells, E = 1000, U(−0.08, 0.08) init, reversed
    source, no dropout. The defaults are a smaller model that trains on a 2-core CPU."""

    emb_dim: int = 256
    hidden_size: int = 512
    layers: int = 2
    dropout: float = 0.2
    reverse_source: bool = True
    tie_output: bool = False
    init_range: float = 0.08
    forget_bias: float | None = None  # None: b_f ~ U(−r, r) like every weight (the paper)

    def __post_init__(self) -> None:
        check_config(self, layers="layers", tied="hidden_size")


@dataclass
class SutskeverState:
    """Decoder state, batch first: h, c (B, L, H) of every layer."""

    h: Tensor
    c: Tensor


@MODELS.register("sutskever", SutskeverConfig)
class Sutskever(RNNEncoderDecoder):
    """Deep LSTM encoder–decoder (Sutskever et al. 2014); encoder state → decoder state.

    Paths: the encoder runs the fused LSTM over the packed source (lengths honoured); the
    teacher-forced decoder is one fused LSTM call over all T target positions; ``step``
    runs the same cells one position at a time (``stacked_step``).

    Shapes:
        src (B, S), src_mask (B, S) bool, y_in (B, T)  -> logits (B, T, V)
        encode -> SutskeverState (h, c (B, L, H)); step(y_prev (B,), state) -> (B, V), state

    Deviations: dropout (``cfg.dropout``) on embeddings, between layers and before the
    softmax (the paper has none); smaller default sizes; the paper trains with SGD and
    clips the gradient norm at 5 (the trainer's settings, not the model's).
    """

    def __init__(self, cfg: SutskeverConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        E, H, L = cfg.emb_dim, cfg.hidden_size, cfg.layers
        super().__init__(src_vocab, tgt_vocab, pad_id, E, H, cfg.dropout, cfg.tie_output)
        self.cfg = cfg
        self.encoder = Recurrent("lstm", E, H, L, dropout=cfg.dropout)
        self.decoder = Recurrent("lstm", E, H, L, dropout=cfg.dropout)
        init_uniform_(self, cfg.init_range, cfg.forget_bias)

    def encode(self, src: Tensor, src_mask: Tensor) -> SutskeverState:
        lengths = lengths_of(src_mask)  # (B,)
        if self.cfg.reverse_source:
            src = reverse_padded(src, lengths)  # (B, S)
        _, (h_n, c_n) = self.encoder(self.embed_source(src), lengths)  # (L, B, H) each
        return SutskeverState(h=batch_major(h_n), c=batch_major(c_n))  # (B, L, H)

    def init_state(self, memory: SutskeverState, src_mask: Tensor) -> SutskeverState:
        return memory  # the encoder's final (h, c) of every layer

    def decode(self, e: Tensor, state: SutskeverState) -> Tensor:
        h0 = (layer_major(state.h), layer_major(state.c))  # (L, B, H) each
        h, _ = self.decoder(e, initial_state=h0)  # (B, T, H) one fused call
        return h

    def advance(self, e_prev: Tensor, state: SutskeverState) -> tuple[Tensor, SutskeverState]:
        h, c = stacked_step(self.decoder, e_prev, state.h, state.c)  # (B, L, H) each
        return h[:, -1], SutskeverState(h=h, c=c)  # (B, H)

    def readout(self, h: Tensor) -> Tensor:
        return self.vocab_logits(h)  # (B, [T,] V)
