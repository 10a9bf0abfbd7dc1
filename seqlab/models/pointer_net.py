"""Pointer networks: Vinyals, Fortunato & Jaitly 2015, "Pointer Networks" (§2.3).

An LSTM encoder reads the input vectors P_1 … P_n; an LSTM decoder emits, at every step,
a distribution over the *input positions* instead of a fixed vocabulary:

    e_j = Enc(P_≤j)                                encoder states               (B, S+1, H)
    d_i = Dec(P_{C_{i−1}}, d_{i−1})                decoder state; input = the vector chosen
                                                   at the previous step        (B, H)
    u^i_j = vᵀ tanh(W_1 e_j + W_2 d_i),  j ∈ (1, …, n)                        eq. 3
    p(C_i | C_1, …, C_{i−1}, P) = softmax(u^i)                                eq. 3

Position 0 is the special symbol of the paper's examples, ⇒ (start) / ⇐ (end): a learned
input vector ``go`` read by the encoder before P_1 (so it has a state e_0 and can be
pointed to) and fed to the decoder at the first step. Pointing at position 0 ends the
output, so the "vocabulary" of the shared searches is the S + 1 positions with
``bos_id = eos_id = END = 0``; input j is position j (1-based).

``mask_chosen``: positions already chosen by y_1 … y_{i−1} get u = −∞, i.e. probability
exactly 0 (END is never masked). The mask is part of the decoder state (``available``),
updated by ``step`` from y_prev, and built for teacher forcing from the cumulative
one-hot of y_in, so ``step`` equals ``forward``. Sorting needs it; the hull uses it too
(a hull vertex is never repeated).

Teacher forcing does not feed the decoder's outputs back (the input is the *target*
vector P_{C_{i−1}}), so ``forward`` runs the decoder LSTM as one fused kernel over all T
steps and scores all (T, S+1) pairs at once; ``step`` runs the same weights through the
readable cells (``stacked_step``). tests/models/test_pointer_net.py proves the two equal
(values and gradients, with padding and masks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.decode.state import static_field
from seqlab.models.rnn_common import batch_major, layer_major, lengths_of, stacked_step
from seqlab.nn.attention import AdditiveScore
from seqlab.nn.masks import masked_softmax
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS

END = 0  # position 0: the ⇒ / ⇐ symbol; input j (1-based) is position j


@dataclass(frozen=True)
class PointerNetConfig:
    """The paper: one LSTM layer of 256 or 512 units, uniform init in [−0.08, 0.08],
    SGD lr 1.0, batch 128, gradient-norm clipping 2.0. ``attn_dim`` is the width of
    W_1 e_j and W_2 d_i (the paper uses H)."""

    hidden_size: int = 256
    attn_dim: int = 256
    layers: int = 1
    mask_chosen: bool = True
    dropout: float = 0.0
    init_range: float = 0.08

    def __post_init__(self) -> None:
        for name in ("hidden_size", "attn_dim", "layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if not self.init_range > 0.0:
            raise ConfigError(f"model.init_range must be > 0, got {self.init_range}")


@dataclass
class PointerMemory:
    """What the encoder hands to the decoder.

    Shapes: x (B, S+1, D) input vectors with x[:, 0] = ⇒; e (B, S+1, H) encoder states
    e_j (0 at padding); h, c (B, L, H) the encoder's final state (at the real length).
    """

    x: Tensor
    e: Tensor
    h: Tensor
    c: Tensor


@dataclass
class PointerNetState:
    """Decoder state, batch first (``seqlab.decode.reorder_state`` reorders it; x and W_1_e
    are static, ``static_field``).

    Shapes: h, c (B, L, H) the decoder LSTM state d_{i−1}; x (B, S+1, D) input vectors;
    W_1_e (B, S+1, A) = W_1 e_j, computed once per input; available (B, S+1) bool, the
    positions that may be pointed to (real and, with mask_chosen, not chosen yet);
    u (B, S+1) the last step's scores (for inspection).
    """

    h: Tensor
    c: Tensor
    x: Tensor = static_field()
    W_1_e: Tensor = static_field()
    available: Tensor
    u: Tensor


def chosen_before(y_in: Tensor, n_positions: int) -> Tensor:
    """For teacher forcing: position j was chosen before step i, i.e. j ∈ {y_in[1 … i]}
    (y_in[0] is ⇒; END is never counted).

        chosen[b, i, j] = ∃ t ≤ i: y_in[b, t] = j ≠ END

    Shapes: y_in (B, T) long -> (B, T, S+1) bool
    """
    one_hot = F.one_hot(y_in, n_positions)  # (B, T, S+1)
    one_hot[..., END] = 0
    return one_hot.cumsum(dim=1) > 0  # (B, T, S+1)


def pointer_logits(u: Tensor, available: Tensor) -> Tensor:
    """Logits over positions: u where available, −∞ elsewhere, so that
    softmax(pointer_logits(u, m)) = masked_softmax(u, m) (eq. 3 restricted to the
    available positions) with probability exactly 0 at masked positions. END is always
    available, so no row is fully masked.

    Shapes: u (B, [T,] S+1), available broadcastable bool -> (B, [T,] S+1)
    """
    return u.masked_fill(~available, float("-inf"))  # (B, [T,] S+1)


@MODELS.register("pointer_net", PointerNetConfig)
class PointerNet(nn.Module):
    """Ptr-Net (Vinyals et al. 2015): LSTM encoder, LSTM decoder, pointer attention.

    Shapes:
        src (B, S, D) float input vectors P_j (padded), src_mask (B, S) bool,
        y_in (B, T) long positions (⇒ = 0, then C_1 … C_{m}), tgt_mask (B, T) bool
        forward -> logits (B, T, S+1) over positions (−∞ where not available)
        encode -> PointerMemory; init_state -> PointerNetState
        step(y_prev (B,) positions, state) -> logits (B, S+1), state
        W_1 (A, H) = ``pointer.U_a``, W_2 (A, H) = ``pointer.W_a``, v (A,) = ``pointer.v_a``
        (the additive score of seqlab.nn.attention, keys e_j, query d_i)

    Deviations: position 0 (⇒/⇐) is a learned input vector read by the encoder first (the
    paper adds the symbols to the sequences but does not say how ⇐ is pointed to).
    ``mask_chosen`` (not in the paper) forbids repeated positions. The decoder starts
    from the encoder's final state. All weights U(−init_range, init_range) as in the
    paper, except the LSTM forget-gate biases, which start at 1 (Gers et al. 2000).
    Dropout (0 = the paper) only between stacked LSTM layers.
    """

    def __init__(self, cfg: PointerNetConfig, input_dim: int) -> None:
        super().__init__()
        if input_dim < 1:
            raise ValueError(f"input_dim must be >= 1, got {input_dim}")
        self.cfg = cfg
        D, H, A, L = input_dim, cfg.hidden_size, cfg.attn_dim, cfg.layers
        self.input_dim = D
        self.go = nn.Parameter(torch.empty(D))  # (D,) the ⇒ / ⇐ input vector, position 0
        self.encoder = Recurrent("lstm", D, H, L, dropout=cfg.dropout)
        self.decoder = Recurrent("lstm", D, H, L, dropout=cfg.dropout)
        self.pointer = AdditiveScore(query_dim=H, key_dim=H, attn_dim=A)  # vᵀ tanh(W_1e + W_2d)
        for p in self.parameters():
            nn.init.uniform_(p, -cfg.init_range, cfg.init_range)
        for rnn in (self.encoder, self.decoder):
            for cell in rnn.cells:
                nn.init.constant_(cell.b_f, 1.0)

    # The paper's names for the additive score's matrices.
    @property
    def W_1(self) -> Tensor:
        return self.pointer.U_a.weight  # (A, H) acts on the encoder states e_j

    @property
    def W_2(self) -> Tensor:
        return self.pointer.W_a.weight  # (A, H) acts on the decoder state d_i

    @property
    def v(self) -> Tensor:
        return self.pointer.v_a.weight.squeeze(0)  # (A,)

    # --- encoder ---------------------------------------------------------------------------

    def positions_mask(self, src_mask: Tensor) -> Tensor:
        """Real positions: END (0) and the n_b real inputs.  (B, S) -> (B, S+1) bool."""
        end = src_mask.new_ones(src_mask.shape[0], 1)  # (B, 1)
        return torch.cat([end, src_mask], dim=1)  # (B, S+1)

    def encode(self, src: Tensor, src_mask: Tensor) -> PointerMemory:
        """e_j for j = 0 (⇒) … S; the LSTM runs over [⇒; P_1 … P_{n_b}] of each row."""
        B = src.shape[0]
        go = self.go.to(src.dtype).expand(B, 1, self.input_dim)  # (B, 1, D)
        x = torch.cat([go, src], dim=1)  # (B, S+1, D)
        x = x.masked_fill(~self.positions_mask(src_mask)[:, :, None], 0.0)  # (B, S+1, D)
        e, (h_n, c_n) = self.encoder(x, lengths_of(src_mask) + 1)  # (B, S+1, H), (L, B, H)
        return PointerMemory(x=x, e=e, h=batch_major(h_n), c=batch_major(c_n))

    def init_state(self, memory: PointerMemory, src_mask: Tensor) -> PointerNetState:
        W_1_e = self.pointer.precompute_keys(memory.e)  # (B, S+1, A)  W_1 e_j, once
        available = self.positions_mask(src_mask)  # (B, S+1)
        u = W_1_e.new_zeros(available.shape)  # (B, S+1)
        return PointerNetState(memory.h, memory.c, memory.x, W_1_e, available, u)

    # --- decoder ---------------------------------------------------------------------------

    def scores(self, d: Tensor, W_1_e: Tensor) -> Tensor:
        """u^i_j = vᵀ tanh(W_1 e_j + W_2 d_i) (eq. 3).

        Shapes: d (B, T, H) or (B, H); W_1_e (B, S+1, A) -> u (B, T, S+1) or (B, S+1)
        """
        if d.dim() == 2:
            return self.pointer.score(d[:, None], W_1_e).squeeze(1)  # (B, S+1)
        return self.pointer.score(d, W_1_e)  # (B, T, S+1)

    def step(self, y_prev: Tensor, state: PointerNetState) -> tuple[Tensor, PointerNetState]:
        """One decoder step: read P_{y_prev}, update d, point. y_prev = END (0) at the first
        step (⇒) and after the end (a finished row keeps being fed END)."""
        index = y_prev[:, None, None].expand(-1, 1, state.x.shape[-1])  # (B, 1, D)
        x_i = state.x.gather(1, index).squeeze(1)  # (B, D)  P_{C_{i−1}}
        h, c = stacked_step(self.decoder, x_i, state.h, state.c)  # (B, L, H) each
        assert c is not None
        available = state.available
        if self.cfg.mask_chosen:
            chosen = F.one_hot(y_prev, available.shape[1]).bool()  # (B, S+1)
            chosen[:, END] = False
            available = available & ~chosen  # (B, S+1)
        u = self.scores(h[:, -1], state.W_1_e)  # (B, S+1)
        logits = pointer_logits(u, available)  # (B, S+1)
        return logits, PointerNetState(h, c, state.x, state.W_1_e, available, u)

    def teacher_forced(self, src: Tensor, src_mask: Tensor, y_in: Tensor) -> tuple[Tensor, Tensor]:
        """Scores u (B, T, S+1) and the available-position mask (B, T, S+1) of every step."""
        memory = self.encode(src, src_mask)
        state = self.init_state(memory, src_mask)
        index = y_in[:, :, None].expand(-1, -1, self.input_dim)  # (B, T, D)
        x_in = memory.x.gather(1, index)  # (B, T, D)  P_{C_{i−1}}
        d, _ = self.decoder(x_in, initial_state=(layer_major(state.h), layer_major(state.c)))
        u = self.scores(d, state.W_1_e)  # (B, T, S+1)
        available = state.available[:, None, :]  # (B, 1, S+1)
        if self.cfg.mask_chosen:
            available = available & ~chosen_before(y_in, u.shape[-1])  # (B, T, S+1)
        return u, available.expand_as(u)

    def forward(self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher forcing; logits at padded target positions are computed and ignored."""
        u, available = self.teacher_forced(src, src_mask, y_in)  # (B, T, S+1) each
        return pointer_logits(u, available)  # (B, T, S+1)

    @torch.no_grad()
    def attention_maps(
        self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, Tensor]:
        """p(C_i = j | C_<i, P) (B, T, S+1) of the teacher-forced pass (eq. 3); column 0 is
        END."""
        u, available = self.teacher_forced(src, src_mask, y_in)  # (B, T, S+1)
        return {"pointer": masked_softmax(u, available)}  # (B, T, S+1)
