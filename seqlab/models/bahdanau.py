"""RNNsearch: Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning
to Align and Translate" (§3, app. A.1–A.2).

A bidirectional GRU annotates every source word; at every target step the decoder
attends over the annotations with an additive score and feeds the context into its GRU:

    h_j = [h→_j ; h←_j]                                       annotations (B, S, 2n)  §3.2
    s_0 = tanh(W_s h←_1)                                                        A.2.2
    e_ij = vₐᵀ tanh(Wₐ s_{i−1} + Uₐ h_j)                       (Uₐ h_j precomputed) eq. 6
    α_ij = exp(e_ij) / Σ_k exp(e_ik)    (padded j excluded)                       eq. 6
    c_i = Σ_j α_ij h_j                                                            eq. 5
    s_i = GRU([E y_{i−1} ; c_i], s_{i−1})                      (the paper's z_i, r_i, s̃_i) A.2.2
    t_i = maxout(U_o s_i + V_o E y_{i−1} + C_o c_i),   p(y_i) = softmax(W_o t_i)  eq. 4

The context of step i depends on s_{i−1}, so teacher forcing loops over the target; each
step costs one GRU cell and an O(S·n′) attention (Uₐ h_j is computed once per source).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from seqlab.decode.state import static_field
from seqlab.models.rnn_common import (
    DeepOutput,
    RNNEncoderDecoder,
    check_config,
    init_gaussian_orthogonal_,
    init_uniform_,
    lengths_of,
)
from seqlab.nn.attention import Attention
from seqlab.nn.cells import GRUCell
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


@dataclass(frozen=True)
class BahdanauConfig:
    """The paper (RNNsearch): m = 620 (emb_dim), n = 1000 (hidden_size), n′ = 1000
    (attn_dim), l = 500 (readout_dim), one encoder layer, no dropout. The defaults are
    sized for a 2-core CPU."""

    emb_dim: int = 256
    hidden_size: int = 256
    attn_dim: int = 256
    readout_dim: int = 256
    encoder_layers: int = 1
    maxout: bool = True
    dropout: float = 0.2
    tie_output: bool = False
    init: Literal["uniform", "paper"] = "uniform"
    init_range: float = 0.1

    def __post_init__(self) -> None:
        check_config(self, layers="encoder_layers", tied="readout_dim")


@dataclass
class BahdanauState:
    """Decoder state, batch first; h, U_a_h and src_mask are static (``static_field``).

    Shapes: s (B, n) = s_{i−1}; h (B, S, 2n) annotations; U_a_h (B, S, n′) = Uₐ h_j;
    src_mask (B, S) bool; alpha (B, S) = α_{i−1} (the last step's weights, for inspection);
    cov (B, S) = Σ_{k<i} α_k, the attention each source position has received so far
    (what GNMT's coverage penalty reads, ``attention_coverage``).
    """

    s: Tensor
    h: Tensor = static_field()
    U_a_h: Tensor = static_field()
    src_mask: Tensor = static_field()
    alpha: Tensor
    cov: Tensor


class BahdanauFeatures(NamedTuple):
    """Step i: s_i (B, [T,] n), E y_{i−1} (B, [T,] m), c_i (B, [T,] 2n), α_i (B, [T,] S)."""

    s: Tensor
    e: Tensor
    c: Tensor
    alpha: Tensor


@MODELS.register("bahdanau", BahdanauConfig)
class Bahdanau(RNNEncoderDecoder):
    """Bidirectional GRU encoder, additive attention, GRU decoder (Bahdanau et al. 2015).

    Shapes:
        src (B, S), src_mask (B, S) bool, y_in (B, T) -> logits (B, T, V)
        encode -> annotations h (B, S, 2n); init_state -> BahdanauState
        attention_maps -> {"cross": α (B, T, S)}
        W_s (n, n); Wₐ (n′, n), Uₐ (n′, 2n), vₐ (n′,) in ``attention.score``;
        decoder GRU ``cell``: input [E y; c] (m + 2n), state n; U_o, V_o, C_o in
        ``deep_output``; W_o = W_out

    Deviations: the output reads s_i (eq. 4, p = g(y_{i−1}, s_i, c_i)); app. A.2.2 writes
    s_{i−1} in t̃_i — we follow the main text. The encoder's GRU is the fused cuDNN form
    (reset after the recurrent matmul); the decoder's is the paper's (reset before). A
    bias b_o in the deep output. ``maxout=False`` uses tanh instead of maxout.
    ``encoder_layers > 1`` stacks bidirectional layers (the paper has one). Dropout (not
    in the paper) on embeddings, between encoder layers and before W_o. Default init
    U(−0.1, 0.1); ``init="paper"`` is app. B.1 (``init_gaussian_orthogonal_``), which
    trains far more slowly at small sizes.
    """

    def __init__(self, cfg: BahdanauConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        m, n, A, l = cfg.emb_dim, cfg.hidden_size, cfg.attn_dim, cfg.readout_dim
        super().__init__(src_vocab, tgt_vocab, pad_id, m, l, cfg.dropout, cfg.tie_output)
        self.cfg = cfg
        self.encoder = Recurrent(
            "gru", m, n, cfg.encoder_layers, bidirectional=True, dropout=cfg.dropout
        )
        self.W_s = nn.Linear(n, n, bias=False)  # s_0 = tanh(W_s h←_1)
        self.attention = Attention(query_dim=n, key_dim=2 * n, score="additive", attn_dim=A)
        self.cell = GRUCell(m + 2 * n, n, reset_after=False)  # s_i = GRU([E y; c], s_{i−1})
        self.deep_output = DeepOutput(n, m, 2 * n, l, cfg.maxout)
        if cfg.init == "paper":
            init_gaussian_orthogonal_(self)
        else:
            init_uniform_(self, cfg.init_range)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        h, _ = self.encoder(self.embed_source(src), lengths_of(src_mask))  # (B, S, 2n)
        return h  # annotations h_j = [h→_j; h←_j], zero at padding

    def init_state(self, memory: Tensor, src_mask: Tensor) -> BahdanauState:
        h = memory  # (B, S, 2n)
        n = self.cfg.hidden_size
        s_0 = torch.tanh(self.W_s(h[:, 0, n:]))  # (B, n)  h←_1: backward state at j = 1
        U_a_h = self.attention.precompute_keys(h)  # (B, S, n′)  once per source
        alpha = h.new_zeros(h.shape[:2])  # (B, S)
        return BahdanauState(s=s_0, h=h, U_a_h=U_a_h, src_mask=src_mask, alpha=alpha, cov=alpha)

    def advance(
        self, e_prev: Tensor, state: BahdanauState
    ) -> tuple[BahdanauFeatures, BahdanauState]:
        c, alpha = self.attention(  # (B, 2n), (B, S)  query s_{i−1}
            state.s, state.h, mask=state.src_mask, precomputed_keys=state.U_a_h
        )
        s = self.cell(torch.cat([e_prev, c], dim=-1), state.s)  # (B, n)  s_i
        cov = state.cov + alpha  # (B, S)
        return BahdanauFeatures(s, e_prev, c, alpha), dataclasses.replace(
            state, s=s, alpha=alpha, cov=cov
        )

    @staticmethod
    def attention_coverage(state: BahdanauState) -> tuple[Tensor, Tensor]:
        """What beam search's coverage penalty reads (``seqlab.decode.beam_search``,
        ``coverage``): Σ_k α_k over the steps taken, the last one included, and the mask.

        Shapes: state with B rows -> (B, S) float, (B, S) bool
        """
        return state.cov, state.src_mask

    def readout(self, f: BahdanauFeatures) -> Tensor:
        return self.vocab_logits(self.deep_output(f.s, f.e, f.c))  # (B, [T,] V)

    @torch.no_grad()
    def attention_maps(
        self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, Tensor]:
        """α (B, T, S) of the teacher-forced pass: row i = weights used to emit y_i."""
        return {"cross": self.features(src, src_mask, y_in).alpha}  # (B, T, S)
