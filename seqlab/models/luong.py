"""Global attention with input feeding: Luong, Pham & Manning 2015, "Effective Approaches to
Attention-based Neural Machine Translation" (§3, §3.1, §3.3).

Stacked LSTMs encode and decode; the decoder starts from the encoder's final state (as
Sutskever et al.). At step t the top decoder state h_t attends over all source states h̄_s:

    h_t = LSTM_dec([E y_{t−1} ; h̃_{t−1}], state_{t−1})       input feeding (§3.3), h̃_0 = 0
    a_t(s) = exp(score(h_t, h̄_s)) / Σ_s′ exp(score(h_t, h̄_s′))                      eq. 7
    score ∈ {dot: h_tᵀ h̄_s,  general: h_tᵀ Wₐ h̄_s,  concat: vₐᵀ tanh(Wₐ[h_t; h̄_s])}  eq. 8
    c_t = Σ_s a_t(s) h̄_s
    h̃_t = tanh(W_c [c_t ; h_t])                               attentional state     eq. 5
    p(y_t | y_<t, x) = softmax(W_s h̃_t)                                              eq. 6

With ``input_feed=False`` the decoder LSTM does not see h̃, so the teacher-forced pass is
one fused LSTM call over all T positions followed by one batched attention; with input
feeding (the paper's best systems) h̃_{t−1} feeds back and the pass loops over t.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.decode.state import static_field
from seqlab.models.rnn_common import (
    RNNEncoderDecoder,
    batch_major,
    check_config,
    init_uniform_,
    layer_major,
    lengths_of,
    stacked_step,
)
from seqlab.nn.attention import Attention
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


@dataclass(frozen=True)
class LuongConfig:
    """The paper: L = 4 layers, H = E = 1000, U(−0.1, 0.1) init, dropout 0.2,
    unidirectional encoder. The defaults are sized for a 2-core CPU.

    ``tgt_embed_init_range`` (None: ``init_range``) draws the target embedding, = W_s when
    ``tie_output``, from its own U(−r_y, r_y). The logits W_s h̃_t are bounded by the row
    norms of W_s since h̃_t = tanh(·) ∈ (−1, 1)^H; at E = 256 the paper's r = 0.1 gives rows
    of norm ~0.9, so early in training the model saturates h̃ to reach a useful logit
    range and barely uses its input (docs/models/rnn-seq2seq.md: valid NLL 5.28 vs 4.78
    with r_y = 0.4 after 150 updates; Bahdanau's unbounded maxout output does not need it).
    """

    emb_dim: int = 256
    hidden_size: int = 256
    layers: int = 2
    score: Literal["dot", "general", "concat"] = "general"
    input_feed: bool = True
    bidirectional_encoder: bool = False
    dropout: float = 0.2
    tie_output: bool = False
    init_range: float = 0.1
    forget_bias: float | None = None  # None: b_f ~ U(−r, r) like every weight (the paper)
    tgt_embed_init_range: float | None = None  # None: init_range (the paper)

    def __post_init__(self) -> None:
        check_config(self, layers="layers", tied="hidden_size")
        if self.tgt_embed_init_range is not None and self.tgt_embed_init_range <= 0:
            raise ValueError(f"tgt_embed_init_range must be > 0, got {self.tgt_embed_init_range}")
        if self.bidirectional_encoder and self.hidden_size % 2:
            raise ValueError(f"bidirectional_encoder needs an even hidden_size: {self.hidden_size}")


@dataclass
class LuongMemory:
    """Encoder output: h̄ (B, S, H) source states; h, c (B, L, H) final state per layer."""

    h_bar: Tensor
    h: Tensor
    c: Tensor


@dataclass
class LuongState:
    """Decoder state, batch first; h_bar, keys_pre and src_mask are static (``static_field``).

    Shapes: h, c (B, L, H); h_tilde (B, H) = h̃_{t−1}; h_bar (B, S, H); keys_pre (B, S, ·)
    (the key part of the score, e.g. Wₐ h̄_s); src_mask (B, S) bool; alpha (B, S) = a_{t−1};
    cov (B, S) = Σ_{k<t} a_k, the attention each source position has received so far
    (what GNMT's coverage penalty reads, ``attention_coverage``).
    """

    h: Tensor
    c: Tensor
    h_tilde: Tensor
    h_bar: Tensor = static_field()
    keys_pre: Tensor = static_field()
    src_mask: Tensor = static_field()
    alpha: Tensor
    cov: Tensor


class LuongFeatures(NamedTuple):
    """Step t: h̃_t (B, [T,] H) and a_t (B, [T,] S)."""

    h_tilde: Tensor
    alpha: Tensor


@MODELS.register("luong", LuongConfig)
class Luong(RNNEncoderDecoder):
    """Stacked LSTM encoder–decoder with global attention and input feeding (Luong 2015).

    Shapes:
        src (B, S), src_mask (B, S) bool, y_in (B, T) -> logits (B, T, V)
        encode -> LuongMemory; init_state -> LuongState
        attention_maps -> {"cross": a (B, T, S)}
        W_c (H, 2H) (no bias, eq. 5); W_s = W_out (V, H) plus a bias b_out

    Deviations: ``bidirectional_encoder=True`` (not in the paper) runs H/2 units per
    direction so h̄_s = [h→_s; h←_s] has width H, and the decoder layer l starts from
    [h→_l; h←_l] of the encoder's layer l. A bias on the softmax layer. No local
    attention, and no source reversal (the paper's best rows reverse the source; with
    attention the reversal only permutes the alignments). Dropout on embeddings, between
    layers and on h̃_t before W_s (the paper: 0.2 on its LSTMs); input feeding passes
    h̃_{t−1} without dropout.
    """

    def __init__(self, cfg: LuongConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        E, H, L = cfg.emb_dim, cfg.hidden_size, cfg.layers
        super().__init__(src_vocab, tgt_vocab, pad_id, E, H, cfg.dropout, cfg.tie_output)
        self.cfg = cfg
        bi = cfg.bidirectional_encoder
        self.encoder = Recurrent(
            "lstm", E, H // 2 if bi else H, L, bidirectional=bi, dropout=cfg.dropout
        )
        dec_in = E + H if cfg.input_feed else E  # [E y_{t−1}; h̃_{t−1}] with input feeding
        self.decoder = Recurrent("lstm", dec_in, H, L, dropout=cfg.dropout)
        self.attention = Attention(query_dim=H, key_dim=H, score=cfg.score)
        self.W_c = nn.Linear(2 * H, H, bias=False)  # h̃_t = tanh(W_c [c_t; h_t])
        init_uniform_(self, cfg.init_range, cfg.forget_bias, cfg.tgt_embed_init_range)

    def encode(self, src: Tensor, src_mask: Tensor) -> LuongMemory:
        h_bar, (h_n, c_n) = self.encoder(self.embed_source(src), lengths_of(src_mask))
        if self.cfg.bidirectional_encoder:  # (2L, B, H/2): layer l → [h→_l ; h←_l]
            B = src.shape[0]
            h_n = h_n.view(self.cfg.layers, 2, B, -1).permute(0, 2, 1, 3).flatten(2)  # (L, B, H)
            c_n = c_n.view(self.cfg.layers, 2, B, -1).permute(0, 2, 1, 3).flatten(2)  # (L, B, H)
        return LuongMemory(h_bar=h_bar, h=batch_major(h_n), c=batch_major(c_n))  # (B, S, H)

    def init_state(self, memory: LuongMemory, src_mask: Tensor) -> LuongState:
        B, S, H = memory.h_bar.shape
        zeros = memory.h_bar.new_zeros(B, S)  # (B, S)
        return LuongState(
            h=memory.h,
            c=memory.c,
            h_tilde=memory.h_bar.new_zeros(B, H),  # (B, H) h̃_0 = 0
            h_bar=memory.h_bar,
            keys_pre=self.attention.precompute_keys(memory.h_bar),  # (B, S, ·) once per source
            src_mask=src_mask,
            alpha=zeros,  # (B, S)
            cov=zeros,  # (B, S)
        )

    def attend(self, h_t: Tensor, state: LuongState) -> LuongFeatures:
        """a_t, c_t and h̃_t = tanh(W_c [c_t; h_t]) for one step (B, H) or all (B, T, H)."""
        c_t, alpha = self.attention(  # (B, [T,] H), (B, [T,] S)
            h_t, state.h_bar, mask=state.src_mask, precomputed_keys=state.keys_pre
        )
        h_tilde = torch.tanh(self.W_c(torch.cat([c_t, h_t], dim=-1)))  # (B, [T,] H)
        return LuongFeatures(h_tilde, alpha)

    def decode(self, e: Tensor, state: LuongState) -> LuongFeatures:
        if self.cfg.input_feed:
            return super().decode(e, state)  # h̃_{t−1} feeds back: loop over t
        h0 = (layer_major(state.h), layer_major(state.c))  # (L, B, H) each
        h, _ = self.decoder(e, initial_state=h0)  # (B, T, H) one fused call
        return self.attend(h, state)  # (B, T, H), (B, T, S)

    def advance(self, e_prev: Tensor, state: LuongState) -> tuple[LuongFeatures, LuongState]:
        x = torch.cat([e_prev, state.h_tilde], dim=-1) if self.cfg.input_feed else e_prev
        h, c = stacked_step(self.decoder, x, state.h, state.c)  # (B, L, H) each
        f = self.attend(h[:, -1], state)  # h_t = top layer
        cov = state.cov + f.alpha  # (B, S)
        return f, dataclasses.replace(state, h=h, c=c, h_tilde=f.h_tilde, alpha=f.alpha, cov=cov)

    @staticmethod
    def attention_coverage(state: LuongState) -> tuple[Tensor, Tensor]:
        """What beam search's coverage penalty reads (``seqlab.decode.beam_search``,
        ``coverage``): Σ_k a_k over the steps taken, the last one included, and the mask.

        Shapes: state with B rows -> (B, S) float, (B, S) bool
        """
        return state.cov, state.src_mask

    def readout(self, f: LuongFeatures) -> Tensor:
        return self.vocab_logits(f.h_tilde)  # (B, [T,] V)  softmax(W_s h̃_t)

    @torch.no_grad()
    def attention_maps(
        self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, Tensor]:
        """a (B, T, S) of the teacher-forced pass: row t = weights used to emit y_t."""
        return {"cross": self.features(src, src_mask, y_in).alpha}  # (B, T, S)
