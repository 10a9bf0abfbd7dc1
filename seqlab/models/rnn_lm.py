"""Recurrent language models: RNN, GRU or LSTM, stacked, with dropout and tied embeddings.

Notes 003 ("Language model and sequence generation", "Sampling novel sequences"): the
network reads x⟨t⟩ = y⟨t−1⟩ and outputs ŷ⟨t⟩ = softmax(W_ya a⟨t⟩ + b_y), a distribution
over the next token; the loss is Σ_t −log ŷ⟨t⟩[y⟨t⟩]. With L stacked layers and dropout
on the non-recurrent connections only (Zaremba, Sutskever & Vinyals 2014, §3):

    e⟨t⟩     = dropout(E[x⟨t⟩])                               (B, T, E)
    a⟨t⟩_l   = cell_l(a⟨t⟩_{l−1}, a⟨t−1⟩_l),  a⟨t⟩_0 = e⟨t⟩     dropout between layers
    logits⟨t⟩ = W_out · dropout(a⟨t⟩_L) + b                   W_out = E when tied

Tied input/output embeddings (Press & Wolf 2017; Inan et al. 2017) need hidden == emb_dim.
The recurrent layers are one :class:`seqlab.nn.recurrent.Recurrent` (torch's fused kernel
on the fast path, the readable per-step cells on the other; tests prove them equal);
``step`` runs the same cells one token at a time (``seqlab.models.rnn_common.stacked_step``).

Truncated BPTT (Williams & Peng 1990; Zaremba 2014 unrolls 35 steps): the ``lm`` task feeds
consecutive chunks of a contiguous stream and passes the final state of one chunk, detached,
as the initial state of the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput, VocabProjection
from seqlab.models.rnn_common import batch_major, layer_major, stacked_step
from seqlab.nn.cells import LSTMCell
from seqlab.nn.dropout import Dropout
from seqlab.nn.embedding import Embedding
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


@dataclass(frozen=True)
class RNNLMConfig:
    """Hyper-parameters of the recurrent LM (defaults: Zaremba et al. 2014's small model,
    2 × 200 LSTM, but with dropout 0.2).

    ``init_range`` r: every parameter ~ U(−r, r) (Zaremba: 0.1 small, 0.05 medium); None
    keeps the layers' own initialisation. ``forget_bias``: the LSTM's b_f after that
    initialisation (Zaremba: none, i.e. U(−r, r); 1.0 helps short runs).
    """

    cell: Literal["rnn", "gru", "lstm"] = "lstm"
    emb_dim: int = 200
    hidden: int = 200
    layers: int = 2
    dropout: float = 0.2
    tie_weights: bool = False
    init_range: float | None = 0.1
    forget_bias: float = 1.0
    nonlinearity: Literal["tanh", "relu"] = "tanh"

    def __post_init__(self) -> None:
        for name in ("emb_dim", "hidden", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.tie_weights and self.hidden != self.emb_dim:
            raise ValueError(
                f"model.tie_weights needs hidden == emb_dim, got {self.hidden} and {self.emb_dim}"
            )
        if self.init_range is not None and not self.init_range > 0:
            raise ValueError(f"model.init_range must be > 0 or null, got {self.init_range}")


@dataclass
class RNNLMState:
    """The recurrent state between chunks / steps.

    Shapes:
        h: (B, L, H) hidden state a⟨t⟩ of every layer
        c: (B, L, H) LSTM memory cell c⟨t⟩, None for RNN / GRU
    """

    h: Tensor
    c: Tensor | None = None

    def detach(self) -> RNNLMState:
        return RNNLMState(self.h.detach(), None if self.c is None else self.c.detach())


@MODELS.register("rnn_lm", RNNLMConfig)
class RNNLM(nn.Module):
    """Stacked RNN / GRU / LSTM language model (notes 003; Zaremba et al. 2014).

    Shapes:
        x (B, T) long -> LMOutput(logits (B, T, V), state RNNLMState)
        step(x (B,) long, state) -> logits (B, V), state

    Deviations: the embedding is E (V, E) with the ``pad_id`` row zero (unused by a
    contiguous stream); the output bias is kept when tied. ``forget_bias`` overrides
    Zaremba's uniform initialisation of b_f.
    """

    def __init__(self, cfg: RNNLMConfig, vocab: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.V, self.pad_id = cfg, vocab, pad_id
        self.embed = Embedding(vocab, cfg.emb_dim, padding_idx=pad_id, init_std=0.1)
        self.drop = Dropout(cfg.dropout)
        self.rnn = Recurrent(
            cfg.cell,
            cfg.emb_dim,
            cfg.hidden,
            num_layers=cfg.layers,
            dropout=cfg.dropout,
            nonlinearity=cfg.nonlinearity,
        )
        self.head = VocabProjection(cfg.hidden, vocab, tied=cfg.tie_weights)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        r = self.cfg.init_range
        if r is not None:
            for p in self.parameters():
                p.uniform_(-r, r)
        for cell in self.rnn.cells:
            if isinstance(cell, LSTMCell) and cell.b_f is not None:
                cell.b_f.fill_(self.cfg.forget_bias)
        if self.head.b is not None:
            self.head.b.zero_()
        self.embed.weight[self.pad_id].zero_()

    @property
    def is_lstm(self) -> bool:
        return self.cfg.cell == "lstm"

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> RNNLMState:
        """Zeros: a⟨0⟩ = 0 (and c⟨0⟩ = 0), the start of a stream."""
        shape = (batch_size, self.cfg.layers, self.cfg.hidden)
        dtype = self.embed.weight.dtype
        h = torch.zeros(shape, device=device, dtype=dtype)  # (B, L, H)
        c = torch.zeros(shape, device=device, dtype=dtype) if self.is_lstm else None  # (B, L, H)
        return RNNLMState(h, c)

    def logits(self, a: Tensor) -> Tensor:
        """W_out · dropout(a) + b.  (B, [T,] H) -> (B, [T,] V)."""
        E = self.embed.weight if self.cfg.tie_weights else None  # (V, E) when tied
        return self.head(self.drop(a), E)  # (B, [T,] V)

    def forward(
        self, x: Tensor, state: RNNLMState | None = None, fused: bool | None = None
    ) -> LMOutput:
        """All T positions at once; ``fused`` picks the Recurrent path (None: fastest)."""
        e = self.drop(self.embed(x))  # (B, T, E)
        initial = None
        if state is not None:
            h0 = layer_major(state.h)  # (L, B, H)
            initial = (h0, layer_major(state.c)) if self.is_lstm else h0  # (L, B, H)
        out, final = self.rnn(e, None, initial, fused=fused)  # (B, T, H)
        if self.is_lstm:
            h_n, c_n = final  # (L, B, H) each
            new = RNNLMState(batch_major(h_n), batch_major(c_n))  # (B, L, H)
        else:
            new = RNNLMState(batch_major(final))  # (B, L, H)
        return LMOutput(self.logits(out), new)  # (B, T, V)

    def step(self, x: Tensor, state: RNNLMState | None) -> tuple[Tensor, RNNLMState]:
        """One token through every layer's cell.  x (B,) -> logits (B, V)."""
        if state is None:
            state = self.init_state(x.size(0), x.device)
        e = self.drop(self.embed(x[:, None]))[:, 0]  # (B, E)
        h, c = stacked_step(self.rnn, e, state.h, state.c)  # (B, L, H)
        return self.logits(h[:, -1]), RNNLMState(h, c)  # (B, V)
