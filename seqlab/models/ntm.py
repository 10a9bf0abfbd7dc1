"""The Neural Turing Machine (Graves, Wayne & Danihelka 2014) with an LSTM controller, and
the LSTM baseline of the same paper, for the bit-vector tasks of ``seqlab.tasks.ntm_tasks``.

Bit-sequence model contract (both models here):

    Model(cfg, input_size: int, output_size: int)
    forward(x (B, T, D_in) float) -> BitSeqOutput(logits (B, T, D_out), …)

The logits are those of independent Bernoulli outputs (sigmoid, one per bit); the task
scores them only in its output phase. The NTM also returns, per step, the read and write
weightings (and on request the memory) for inspection (``seqlab.inspect.memory``).

One NTM step t (paper §3, Figure 1; the order of Collier & Beel 2018):

    h_t = LSTM([x_t ; r_{t−1}], h_{t−1})                  controller (``controller``)
    k, β, g, s, γ (every head), e, a (write heads) = squash(W_head h_t + b)
    w_t = address(k, β, g, s, γ, w_{t−1}, M_{t−1})       eq. 5–9, all heads at once
    r_t = Σ_i w_t^read(i) M_{t−1}(i)                      eq. 2 (reads see M_{t−1})
    M_t = M_{t−1} ∘ ∏_h (1 − w^h eᵀ) + Σ_h w^h aᵀ           eq. 3–4
    y_t = W_y [h_t ; r_t] + b_y                           logits of the bits

Initial state (Collier & Beel 2018, the stable recipe): memory M_0 starts at the constant
1e-6 and is trained (``memory_init="constant"``: their ``init_M`` is a trainable variable;
``"learned"`` trains M_0 = tanh(P) from P ~ U(−a, a) instead), learned initial read vectors
r_0 = tanh(b_r) and weightings w_0 = softmax(b_w) (biases shared by the batch), controller
state zero. A constant M_0 makes content addressing uniform at first; the random b_w and
the gradient on M_0 (different for every row once the weightings differ; Adam scales it
up) break the symmetry between locations. A frozen M_0 leaves only b_w, and the copy task
then learns the memory far more slowly (docs/ntm.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.nn.cells import LSTMCell
from seqlab.nn.memory import (
    address,
    erase_add_write,
    head_param_size,
    read,
    squash_head,
    squash_write,
)
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS

__all__ = [
    "NTM",
    "BitSeqOutput",
    "LSTMSeqBaseline",
    "LSTMSeqBaselineConfig",
    "NTMConfig",
    "NTMState",
]


@dataclass
class BitSeqOutput:
    """What a bit-sequence model returns.

    Shapes:
        logits:        (B, T, D_out) Bernoulli logits
        read_weights:  (B, T, H_r, N) w_t of every read head (NTM only, else None)
        write_weights: (B, T, H_w, N) w_t of every write head (NTM only, else None)
        memory:        (B, T, N, W) M_t after each step (NTM with ``trace_memory``, else None)
    """

    logits: Tensor
    read_weights: Tensor | None = None
    write_weights: Tensor | None = None
    memory: Tensor | None = None


@dataclass
class NTMState:
    """The recurrent state between steps.

    Shapes:
        h, c: L tensors (B, D), the controller LSTM state per layer
        r:    (B, H_r, W) last read vectors
        w:    (B, H_r + H_w, N) last weightings, read heads first
        M:    (B, N, W) memory
    """

    h: tuple[Tensor, ...]
    c: tuple[Tensor, ...]
    r: Tensor
    w: Tensor
    M: Tensor


@dataclass(frozen=True)
class NTMConfig:
    """``controller_size`` D and ``controller_layers`` L of the LSTM controller;
    ``n_read_heads`` H_r, ``n_write_heads`` H_w; memory of ``memory_n`` N rows of width
    ``memory_w`` W (the paper's 128 × 20); shifts −R … R with R = ``shift_range``;
    ``memory_init`` constant (starts at ``memory_init_value``, then trained) or learned;
    ``init_bias_scale`` bounds the U(−a, a) initialisation of the learned r_0 / w_0 biases
    (and P of a learned M_0); ``fused_controller`` steps the LSTM with torch's fused cell
    (the same function as ``seqlab.nn.cells.LSTMCell``, tested)."""

    controller_size: int = 100
    controller_layers: int = 1
    n_read_heads: int = 1
    n_write_heads: int = 1
    memory_n: int = 128
    memory_w: int = 20
    shift_range: int = 1
    memory_init: Literal["constant", "learned"] = "constant"
    memory_init_value: float = 1e-6
    init_bias_scale: float = 0.2
    forget_bias: float = 1.0
    fused_controller: bool = True

    def __post_init__(self) -> None:
        for name in ("controller_size", "controller_layers", "memory_n", "memory_w"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_read_heads < 1 or self.n_write_heads < 0:
            raise ValueError(
                "model.n_read_heads must be >= 1 and model.n_write_heads >= 0, got "
                f"{self.n_read_heads}, {self.n_write_heads}"
            )
        if not 0 <= self.shift_range < self.memory_n:
            raise ValueError(f"model.shift_range must be in [0, memory_n), got {self.shift_range}")
        if self.memory_init not in ("constant", "learned"):
            raise ValueError(f"model.memory_init must be constant|learned, got {self.memory_init}")
        if self.init_bias_scale < 0:
            raise ValueError(f"model.init_bias_scale must be >= 0, got {self.init_bias_scale}")


@MODELS.register("ntm", NTMConfig)
class NTM(nn.Module):
    """Neural Turing Machine, Graves et al. 2014: an LSTM controller with read and write
    heads on an N × W memory (module doc for the step equations).

    Shapes:
        x: (B, T, D_in)   returns BitSeqOutput (logits (B, T, D_out), weightings per step)

    Deviations: reads use the memory before this step's write (Collier & Beel 2018; the
    paper does not fix the order); key k and add vector a are tanh-squashed (see
    ``seqlab.nn.memory.squash_head``/``squash_write``); the paper's controller emits an
    output directly, here y_t = W_y [h_t ; r_t] as in Collier & Beel 2018.
    """

    def __init__(self, cfg: NTMConfig, input_size: int, output_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_size, self.output_size = input_size, output_size
        D, L = cfg.controller_size, cfg.controller_layers
        N, W, R = cfg.memory_n, cfg.memory_w, cfg.shift_range
        H_r, H_w = cfg.n_read_heads, cfg.n_write_heads
        self.N, self.W, self.R, self.H_r, self.H_w = N, W, R, H_r, H_w
        self.controller = nn.ModuleList(
            LSTMCell(input_size + H_r * W if layer == 0 else D, D, forget_bias=cfg.forget_bias)
            for layer in range(L)
        )
        self.P = head_param_size(W, R)  # raw addressing outputs per head
        # One projection for every head: [k̂ β̂ ĝ ŝ γ̂ per head | ê â per write head].
        self.W_head = nn.Linear(D, (H_r + H_w) * self.P + H_w * 2 * W)
        self.W_y = nn.Linear(D + H_r * W, output_size)
        a = cfg.init_bias_scale
        self.r0_bias = nn.Parameter(torch.empty(H_r, W).uniform_(-a, a))  # (H_r, W)
        self.w0_bias = nn.Parameter(torch.empty(H_r + H_w, N).uniform_(-a, a))  # (H, N)
        if cfg.memory_init == "learned":
            self.M0_param = nn.Parameter(torch.empty(N, W).uniform_(-a, a))  # (N, W)
        else:  # trained from the constant, as Collier & Beel's code (not a frozen buffer)
            self.M0_const = nn.Parameter(torch.full((N, W), cfg.memory_init_value))  # (N, W)

    # -- state --------------------------------------------------------------------------

    def initial_memory(self) -> Tensor:
        """M_0: the trained constant-initialised rows, or tanh(P) when learned.  Shape (N, W)."""
        if self.cfg.memory_init == "learned":
            return torch.tanh(self.M0_param)  # (N, W)
        return self.M0_const

    def init_state(self, batch_size: int) -> NTMState:
        """Zero controller state, learned r_0 = tanh(b_r), w_0 = softmax(b_w), M_0."""
        B, D, L = batch_size, self.cfg.controller_size, self.cfg.controller_layers
        zeros = tuple(self.w0_bias.new_zeros(B, D) for _ in range(L))  # L × (B, D)
        r = torch.tanh(self.r0_bias).expand(B, -1, -1)  # (B, H_r, W)
        w = torch.softmax(self.w0_bias, dim=-1).expand(B, -1, -1)  # (B, H, N)
        M = self.initial_memory().expand(B, -1, -1)  # (B, N, W)
        return NTMState(zeros, zeros, r, w, M)

    # -- one step -----------------------------------------------------------------------

    def _fused_weights(self) -> list[tuple[Tensor, Tensor]]:
        """Per controller layer, the stacked gate matrix and bias, built once per sequence:
        W = [W_u; W_f; W_o; W_c] (4D, D + D_in) with columns [h | input] as in
        ``LSTMCell``, and b = [b_u; b_f; b_o; b_c] (4D,). Layer 0's input is [x ; r]; its
        entry holds W_hr = [W_h | W_r] (4D, D + H_r·W) instead of W, the x columns W_x
        being applied to every step at once in :meth:`forward`."""
        out = []
        D, D_x = self.cfg.controller_size, self.input_size
        for layer, cell in enumerate(self.controller):
            W = torch.cat([cell.W_u, cell.W_f, cell.W_o, cell.W_c], dim=0)  # (4D, D + D_in)
            b = torch.cat([cell.b_u, cell.b_f, cell.b_o, cell.b_c])  # (4D,)
            if layer == 0:
                W = torch.cat([W[:, :D], W[:, D + D_x :]], dim=1)  # (4D, D + H_r·W)
            out.append((W, b))
        return out

    def _input_gates(self, x: Tensor) -> Tensor:
        """W_x x_t + b of controller layer 0 for every step.  (B, T, D_in) → (B, T, 4D)"""
        cell, D = self.controller[0], self.cfg.controller_size
        W = torch.cat([cell.W_u, cell.W_f, cell.W_o, cell.W_c], dim=0)  # (4D, D + D_in)
        b = torch.cat([cell.b_u, cell.b_f, cell.b_o, cell.b_c])  # (4D,)
        return torch.nn.functional.linear(x, W[:, D : D + self.input_size], b)  # (B, T, 4D)

    def _fused_lstm(self, z: Tensor, c_prev: Tensor) -> tuple[Tensor, Tensor]:
        """The LSTMCell equations from the stacked pre-activations z = W [h, input] + b.

        Shapes: z (B, 4D) rows [Γu Γf Γo c̃], c_prev (B, D) → h, c (B, D)
        """
        D = self.cfg.controller_size
        gates = torch.sigmoid(z[:, : 3 * D])  # (B, 3D)  Γu, Γf, Γo
        c_tilde = torch.tanh(z[:, 3 * D :])  # (B, D)
        gamma_u, gamma_f, gamma_o = gates.chunk(3, dim=-1)  # (B, D) each
        c = torch.addcmul(gamma_f * c_prev, gamma_u, c_tilde)  # (B, D)  Γu c̃ + Γf c⟨t−1⟩
        return gamma_o * torch.tanh(c), c  # (B, D), (B, D)

    def _step(
        self,
        x_t: Tensor,
        state: NTMState,
        fused: list[tuple[Tensor, Tensor]] | None,
        xg_t: Tensor | None = None,
    ) -> tuple[Tensor, NTMState]:
        """One step up to the read-out input [h_t ; r_t] (module doc).

        ``fused``: the stacked weights of :meth:`_fused_weights` with ``xg_t`` = W_x x_t + b
        of layer 0 (:meth:`_input_gates`), or None for the readable ``LSTMCell.step``.

        Shapes:
            x_t: (B, D_in)   xg_t: (B, 4D)   returns hr (B, D + H_r·W) and the new state
        """
        B = x_t.shape[0]
        W, H_r, H_w = self.W, self.H_r, self.H_w
        r_prev = state.r.reshape(B, H_r * W)  # (B, H_r·W)
        hs, cs = [], []
        h = x_t
        for layer, cell in enumerate(self.controller):
            h_prev, c_prev = state.h[layer], state.c[layer]  # (B, D) each
            if fused is None:
                inp = torch.cat([x_t, r_prev], -1) if layer == 0 else h  # (B, D_in + H_r·W)
                h, c = cell.step(inp, (h_prev, c_prev))[0]  # (B, D), (B, D)
            else:
                Wl, bl = fused[layer]
                if layer == 0:  # W [h, x, r] + b = (W_x x + b) + W_hr [h, r]
                    z = torch.addmm(xg_t, torch.cat([h_prev, r_prev], -1), Wl.t())  # (B, 4D)
                else:
                    z = torch.addmm(bl, torch.cat([h_prev, h], -1), Wl.t())  # (B, 4D)
                h, c = self._fused_lstm(z, c_prev)
            hs.append(h)
            cs.append(c)
        raw = self.W_head(h)  # (B, H·P + H_w·2W)
        H = H_r + H_w
        head = squash_head(raw[:, : H * self.P].reshape(B, H, self.P), W, self.R)
        w = address(head.k, head.beta, head.g, head.s, head.gamma, state.w, state.M)  # (B, H, N)
        r = read(state.M, w[:, :H_r])  # (B, H_r, W)  reads see M_{t−1}
        M = state.M
        if H_w:
            e, a = squash_write(raw[:, H * self.P :].reshape(B, H_w, 2 * W))  # (B, H_w, W) ×2
            M = erase_add_write(state.M, w[:, H_r:], e, a)  # (B, N, W)
        hr = torch.cat([h, r.reshape(B, H_r * W)], dim=-1)  # (B, D + H_r·W)
        return hr, NTMState(tuple(hs), tuple(cs), r, w, M)

    def step(self, x_t: Tensor, state: NTMState) -> tuple[Tensor, NTMState]:
        """One readable step: y_t = W_y [h_t ; r_t] + b_y.

        Shapes:
            x_t: (B, D_in)   returns logits (B, D_out) and the new state
        """
        hr, state = self._step(x_t, state, None)  # (B, D + H_r·W)
        return self.W_y(hr), state  # (B, D_out)

    def forward(
        self,
        x: Tensor,
        state: NTMState | None = None,
        trace_memory: bool = False,
    ) -> BitSeqOutput:
        """Run T steps from ``state`` (None: :meth:`init_state`).

        The fused path (``fused_controller``) stacks the gate matrices once per sequence,
        computes layer 0's input part W_x x_t + b for every t in one product, and applies
        the read-out W_y to all steps at once; it computes the same function as
        :meth:`step` (tests/models/test_ntm.py).

        Shapes:
            x: (B, T, D_in)   returns BitSeqOutput with logits (B, T, D_out), weightings
            (B, T, H, N) and, with ``trace_memory``, M_t (B, T, N, W)
        """
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"x must be (B, T, {self.input_size}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        state = self.init_state(B) if state is None else state
        fused = self._fused_weights() if self.cfg.fused_controller else None
        xg = self._input_gates(x) if fused is not None else None  # (B, T, 4D)
        xs = x.unbind(1)  # T × (B, D_in); unbind, not x[:, t]: one gradient stack, not T
        xgs = xg.unbind(1) if xg is not None else [None] * T  # T × (B, 4D)
        hrs, ws, Ms = [], [], []
        for t in range(T):
            hr, state = self._step(xs[t], state, fused, xgs[t])
            hrs.append(hr)
            ws.append(state.w)
            if trace_memory:
                Ms.append(state.M)
        w_all = torch.stack(ws, dim=1)  # (B, T, H, N)
        return BitSeqOutput(
            logits=self.W_y(torch.stack(hrs, dim=1)),  # (B, T, D_out)
            read_weights=w_all[:, :, : self.H_r],  # (B, T, H_r, N)
            write_weights=w_all[:, :, self.H_r :],  # (B, T, H_w, N)
            memory=torch.stack(Ms, dim=1) if trace_memory else None,  # (B, T, N, W)
        )


@dataclass(frozen=True)
class LSTMSeqBaselineConfig:
    """The paper's LSTM baseline: ``layers`` stacked LSTMs of ``hidden`` units (Graves et
    al. 2014 used 3 × 256 for copy), a linear read-out of the last layer per step."""

    hidden: int = 256
    layers: int = 3
    forget_bias: float = 1.0

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.layers < 1:
            raise ValueError(f"model.hidden and model.layers must be >= 1, got {self}")


@MODELS.register("lstm_seq_baseline", LSTMSeqBaselineConfig)
class LSTMSeqBaseline(nn.Module):
    """Stacked LSTM baseline for the NTM tasks: y_t = W_y a⟨t⟩_L + b_y (Graves et al. 2014 §4).

    Shapes:
        x: (B, T, D_in)   returns BitSeqOutput(logits (B, T, D_out))

    Deviations: none (the paper does not give the baseline's read-out; a linear one is used).
    """

    def __init__(self, cfg: LSTMSeqBaselineConfig, input_size: int, output_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_size, self.output_size = input_size, output_size
        self.rnn = Recurrent(
            "lstm", input_size, cfg.hidden, num_layers=cfg.layers, forget_bias=cfg.forget_bias
        )
        self.W_y = nn.Linear(cfg.hidden, output_size)

    def forward(self, x: Tensor) -> BitSeqOutput:
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"x must be (B, T, {self.input_size}), got {tuple(x.shape)}")
        a, _ = self.rnn(x)  # (B, T, H)
        return BitSeqOutput(logits=self.W_y(a))  # (B, T, D_out)
