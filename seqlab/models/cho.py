"""The RNN Encoder–Decoder of Cho et al. 2014 ("Learning Phrase Representations using RNN
Encoder–Decoder for Statistical Machine Translation", §2.2 and app. A.1).

A GRU reads the source; a summary c of its last state conditions every decoder step and
the output layer, not only the decoder's initial state:

    h⟨N⟩ = GRU_enc(E_src[x])  (last real step)       c = tanh(V h⟨N⟩)          (A.1.1)
    h′⟨0⟩ = tanh(V′ c)                                                            (A.1.2)
    h′⟨t⟩ = GRU_dec([E_tgt[y_{t−1}]; c], h′⟨t−1⟩)       c fed to every step
    s′⟨t⟩ = O_h h′⟨t⟩ + O_y E y_{t−1} + O_c c,   s⟨t⟩ = maxout(s′⟨t⟩)   (deep output)
    p(y_t | y_<t, c) = softmax(G s⟨t⟩ + b)

c does not change over t, so the teacher-forced decoder is one fused GRU call over the
whole target, with [E y_{t−1}; c] as its input.
"""

from __future__ import annotations

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
    layer_major,
    lengths_of,
    stacked_step,
)
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


@dataclass(frozen=True)
class ChoConfig:
    """The paper: E = 100 (word embeddings), H = 1000, one layer, l = 500 maxout units,
    no dropout. The defaults are sized for a 2-core CPU."""

    emb_dim: int = 256
    hidden_size: int = 512
    layers: int = 1
    readout_dim: int = 256
    maxout: bool = True
    reset_after: bool = True
    dropout: float = 0.2
    tie_output: bool = False
    init: Literal["uniform", "paper"] = "uniform"
    init_range: float = 0.1

    def __post_init__(self) -> None:
        check_config(self, layers="layers", tied="readout_dim")


@dataclass
class ChoState:
    """h (B, L, H): decoder state h′⟨t−1⟩ of every layer; c (B, H): the source summary
    (static, ``static_field``)."""

    h: Tensor
    c: Tensor = static_field()


class ChoFeatures(NamedTuple):
    """What the deep output reads at step t: h′⟨t⟩ (top layer), E y_{t−1}, c."""

    h: Tensor
    e: Tensor
    c: Tensor


@MODELS.register("cho", ChoConfig)
class Cho(RNNEncoderDecoder):
    """GRU encoder–decoder with the summary c fed to every step (Cho et al. 2014).

    Shapes:
        src (B, S), src_mask (B, S) bool, y_in (B, T) -> logits (B, T, V)
        encode -> c (B, H); init_state -> ChoState(h (B, L, H), c (B, H))
        V, V′: (H, H), (L·H, H); O_h, O_y, O_c: see DeepOutput (U_o, V_o, C_o); G = W_out

    Deviations: the decoder is a standard GRU over the input [E y_{t−1}; c], so c enters
    the candidate state outside the reset gate (the paper has r′ ⊙ (U′h′ + C c)); with
    ``reset_after=True`` (default, the fused cuDNN form) the reset gate acts after the
    recurrent matmul, ``reset_after=False`` is the paper's GRU (readable path, slower).
    O_y acts on the embedding E y (see DeepOutput). ``layers > 1`` stacks GRUs (the paper
    has one) and V′ gives every layer its own initial state. Dropout (not in the paper)
    on embeddings, between layers and before G. Default init U(−0.1, 0.1); ``init="paper"``
    is the paper's N(0, 0.01²) with orthogonal recurrent matrices (``init_gaussian_orthogonal_``).
    """

    def __init__(self, cfg: ChoConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        E, H, L, l = cfg.emb_dim, cfg.hidden_size, cfg.layers, cfg.readout_dim
        super().__init__(src_vocab, tgt_vocab, pad_id, E, l, cfg.dropout, cfg.tie_output)
        self.cfg = cfg
        self.encoder = Recurrent("gru", E, H, L, dropout=cfg.dropout, reset_after=cfg.reset_after)
        self.V = nn.Linear(H, H, bias=False)  # c = tanh(V h⟨N⟩)
        self.V_prime = nn.Linear(H, L * H, bias=False)  # h′⟨0⟩ = tanh(V′ c)
        self.decoder = Recurrent(
            "gru", E + H, H, L, dropout=cfg.dropout, reset_after=cfg.reset_after
        )
        self.deep_output = DeepOutput(H, E, H, l, cfg.maxout)
        if cfg.init == "paper":
            init_gaussian_orthogonal_(self)
        else:
            init_uniform_(self, cfg.init_range)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        _, h_n = self.encoder(self.embed_source(src), lengths_of(src_mask))  # (L, B, H)
        return torch.tanh(self.V(h_n[-1]))  # (B, H)  c = tanh(V h⟨N⟩), top layer

    def init_state(self, memory: Tensor, src_mask: Tensor) -> ChoState:
        c = memory  # (B, H)
        h0 = torch.tanh(self.V_prime(c)).unflatten(-1, (self.cfg.layers, -1))  # (B, L, H)
        return ChoState(h=h0, c=c)

    def decode(self, e: Tensor, state: ChoState) -> ChoFeatures:
        c = state.c[:, None].expand(-1, e.shape[1], -1)  # (B, T, H) the same c at every t
        x = torch.cat([e, c], dim=-1)  # (B, T, E + H)
        h, _ = self.decoder(x, initial_state=layer_major(state.h))  # (B, T, H) one fused call
        return ChoFeatures(h, e, c)

    def advance(self, e_prev: Tensor, state: ChoState) -> tuple[ChoFeatures, ChoState]:
        x = torch.cat([e_prev, state.c], dim=-1)  # (B, E + H)
        h, _ = stacked_step(self.decoder, x, state.h)  # (B, L, H)
        return ChoFeatures(h[:, -1], e_prev, state.c), ChoState(h=h, c=state.c)

    def readout(self, f: ChoFeatures) -> Tensor:
        return self.vocab_logits(self.deep_output(f.h, f.e, f.c))  # (B, [T,] V)
