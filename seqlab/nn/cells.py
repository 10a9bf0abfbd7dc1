"""Recurrent cells of the notes: one time step of a vanilla RNN, a GRU and an LSTM.

Notation of notes 003 (a⟨t⟩, x⟨t⟩, Γu, Γr, Γf, Γo, c̃⟨t⟩) and notes 002 (h_t, z_t, C_t). The
notes' "stacked" form is used for the gates: ``W_u[c⟨t−1⟩, x⟨t⟩]`` multiplies the
concatenation of the previous state and the input by one matrix ``W_u`` of shape
(H, H + D_in) whose first H columns act on the state and whose last D_in columns act on the
input, i.e. ``W_u = [W_uc | W_ux]`` (notes 003: "stacking W_aa and W_ax side by side").

Every cell has ``step(x, state) -> (new_state, gates)`` (gates: a dict of the intermediate
values, for inspection), ``forward(x, state) -> new_state``, and an exact two-way weight
conversion to the matching ``torch.nn.RNN/GRU/LSTM`` layer parameters
(``load_from_torch`` / ``to_torch_params``; torch gate orders: GRU r, z, n; LSTM i, f, g, o).
``to_torch_params`` builds the torch tensors from this cell's parameters with differentiable
ops, so the fused path in :mod:`seqlab.nn.recurrent_fused` trains these same parameters.

Bias convention: the notes have one bias per gate (b_u, …) where torch has two
(b_i· + b_h·). To torch: b_ih = b, b_hh = 0. From torch: b = b_ih + b_hh (the same function;
one rounding in the sum). Ours → torch → ours is bit-exact.

Initialisation: every weight and bias ~ U(−1/√H, 1/√H), as torch's recurrent layers.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LSTMState = tuple[Tensor, Tensor]
TorchParams = tuple[Tensor, Tensor, Tensor | None, Tensor | None]


def _split(W: Tensor, hidden_size: int) -> tuple[Tensor, Tensor]:
    """W = [W_h | W_x] → (W_h (H, H), W_x (H, D_in)): the state and input column blocks."""
    return W[:, :hidden_size], W[:, hidden_size:]


class _Cell(nn.Module):
    """Shared plumbing: sizes, initialisation, zero state, bias checks for conversions."""

    input_size: int
    hidden_size: int
    bias: bool

    def _init_sizes(self, input_size: int, hidden_size: int, bias: bool) -> None:
        if input_size < 1 or hidden_size < 1:
            raise ValueError(f"sizes must be >= 1, got {input_size=}, {hidden_size=}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias

    def _new_weight(self) -> nn.Parameter:
        H, D = self.hidden_size, self.input_size
        return nn.Parameter(torch.empty(H, H + D))  # (H, H + D_in)

    def _uniform_all(self) -> None:
        k = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-k, k)

    def _check_torch_bias(self, bias_ih: Tensor | None, bias_hh: Tensor | None) -> None:
        if self.bias != (bias_ih is not None) or self.bias != (bias_hh is not None):
            raise ValueError(f"cell has bias={self.bias}; pass both torch biases iff bias=True")

    def _zeros(self, x: Tensor) -> Tensor:
        return x.new_zeros(x.shape[0], self.hidden_size)  # (B, H)

    def _bias_hh_zeros(self, n_gates: int) -> Tensor:
        ref = next(self.parameters())
        return ref.new_zeros(n_gates * self.hidden_size)  # (G·H,)


class RNNCell(_Cell):
    """Vanilla (Elman) RNN step, notes 003 "forward prop" / notes 002 h_t = tanh(U x_t + W h_{t−1}).

        a⟨t⟩ = g(W_aa a⟨t−1⟩ + W_ax x⟨t⟩ + b_a)      g ∈ {tanh, relu}
             = g(W_a [a⟨t−1⟩, x⟨t⟩] + b_a),   W_a = [W_aa | W_ax]   (stacked form)

    In notes 002's letters W_aa = W, W_ax = U and the pre-activation z_t = U x_t + W h_{t−1}.
    ``init="identity"`` is the IRNN of Le, Jaitly & Hinton 2015 (notes 002, "possible
    solution"): W_aa = I, b_a = 0, so a ReLU RNN with no input copies its state and
    ∂a⟨t⟩/∂a⟨t−1⟩ = I at the start of training.

    Shapes:
        x:      (B, D_in)
        a_prev: (B, H)       (None → zeros)
        returns a: (B, H)
        W_aa (H, H), W_ax (H, D_in), b_a (H,), W_a (H, H + D_in)

    Deviations: the IRNN paper draws W_ax from N(0, 0.001²); here W_ax keeps the default
    U(−1/√H, 1/√H) initialisation.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: Literal["tanh", "relu"] = "tanh",
        bias: bool = True,
        init: Literal["default", "identity"] = "default",
    ) -> None:
        super().__init__()
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        if init not in ("default", "identity"):
            raise ValueError(f"init must be 'default' or 'identity', got {init!r}")
        self._init_sizes(input_size, hidden_size, bias)
        self.nonlinearity, self.init = nonlinearity, init
        self.W_aa = nn.Parameter(torch.empty(hidden_size, hidden_size))  # (H, H)
        self.W_ax = nn.Parameter(torch.empty(hidden_size, input_size))  # (H, D_in)
        self.b_a = nn.Parameter(torch.empty(hidden_size)) if bias else None  # (H,)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self._uniform_all()
        if self.init == "identity":
            with torch.no_grad():
                self.W_aa.copy_(torch.eye(self.hidden_size))
                if self.b_a is not None:
                    self.b_a.zero_()

    @property
    def W_a(self) -> Tensor:
        """The notes' stacked matrix W_a = [W_aa | W_ax]. Shape (H, H + D_in)."""
        return torch.cat([self.W_aa, self.W_ax], dim=1)  # (H, H + D_in)

    def g(self, z: Tensor) -> Tensor:
        return torch.tanh(z) if self.nonlinearity == "tanh" else torch.relu(z)

    def preactivation(self, x: Tensor, a_prev: Tensor) -> Tensor:
        """z = W_aa a⟨t−1⟩ + W_ax x⟨t⟩ + b_a.  (B, D_in), (B, H) -> (B, H)."""
        return F.linear(a_prev, self.W_aa) + F.linear(x, self.W_ax, self.b_a)  # (B, H)

    def preactivation_stacked(self, x: Tensor, a_prev: Tensor) -> Tensor:
        """z = W_a [a⟨t−1⟩, x⟨t⟩] + b_a, the notes' simplified notation; equals preactivation."""
        stacked = torch.cat([a_prev, x], dim=-1)  # (B, H + D_in)
        return F.linear(stacked, self.W_a, self.b_a)  # (B, H)

    def step(self, x: Tensor, a_prev: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """One step; returns (a⟨t⟩, {"z": pre-activation})."""
        a_prev = self._zeros(x) if a_prev is None else a_prev
        z = self.preactivation(x, a_prev)  # (B, H)
        return self.g(z), {"z": z}

    def forward(self, x: Tensor, a_prev: Tensor | None = None) -> Tensor:
        return self.step(x, a_prev)[0]

    def to_torch_params(self) -> TorchParams:
        """(weight_ih (H, D_in), weight_hh (H, H), bias_ih (H,), bias_hh (H,)) of nn.RNN."""
        if self.b_a is None:
            return self.W_ax, self.W_aa, None, None
        return self.W_ax, self.W_aa, self.b_a, self._bias_hh_zeros(1)

    @torch.no_grad()
    def load_from_torch(
        self,
        weight_ih: Tensor,
        weight_hh: Tensor,
        bias_ih: Tensor | None = None,
        bias_hh: Tensor | None = None,
    ) -> None:
        self._check_torch_bias(bias_ih, bias_hh)
        self.W_ax.copy_(weight_ih)
        self.W_aa.copy_(weight_hh)
        if self.b_a is not None:
            self.b_a.copy_(bias_ih + bias_hh)


class GRUCell(_Cell):
    """Gated recurrent unit, Cho et al. 2014, in the notation of notes 003 (a⟨t⟩ = c⟨t⟩).

        Γr = σ(W_r [c⟨t−1⟩, x⟨t⟩] + b_r)                       reset gate
        Γu = σ(W_u [c⟨t−1⟩, x⟨t⟩] + b_u)                       update gate
        c̃⟨t⟩ = tanh(W_c [Γr ∗ c⟨t−1⟩, x⟨t⟩] + b_c)            reset_after=False (Cho 2014)
        c̃⟨t⟩ = tanh(W_cx x⟨t⟩ + b_cx + Γr ∗ (W_cc c⟨t−1⟩ + b_cc))   reset_after=True
        c⟨t⟩ = Γu ∗ c̃⟨t⟩ + (1 − Γu) ∗ c⟨t−1⟩

    with W_c = [W_cc | W_cx]. torch.nn.GRU / GRUCell (and cuDNN) use ``reset_after=True``
    and an update gate z applied to the *old* state, h' = (1 − z) ∗ n + z ∗ h, so
    **z = 1 − Γu**, i.e. W_z = −W_u and b_z = −b_u (σ(−s) = 1 − σ(s)); the conversion
    methods do this, and need reset_after=True (reset-before has no torch equivalent).

    Shapes:
        x:      (B, D_in)
        c_prev: (B, H)       (None → zeros)
        returns c: (B, H)
        W_r, W_u, W_c: (H, H + D_in); b_r, b_u, b_c | b_cx, b_cc: (H,)

    Deviations: the notes' extraction reads "W_c[Γu ∗ c⟨t−1⟩, …]", "Γx" and
    "(1 − Γu) + c"; we follow Cho 2014: the reset gate Γr multiplies c⟨t−1⟩ inside c̃ and
    c⟨t⟩ = Γu ∗ c̃ + (1 − Γu) ∗ c⟨t−1⟩. reset_after=True (the default of Recurrent) is the
    cuDNN variant, not Cho's equation.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        reset_after: bool = False,
    ) -> None:
        super().__init__()
        self._init_sizes(input_size, hidden_size, bias)
        self.reset_after = reset_after
        self.W_r, self.W_u, self.W_c = self._new_weight(), self._new_weight(), self._new_weight()
        H = hidden_size
        self.b_r = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        self.b_u = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        if reset_after:
            self.b_cx = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
            self.b_cc = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        else:
            self.b_c = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self._uniform_all()

    def step(self, x: Tensor, c_prev: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """One step; returns (c⟨t⟩, {"gamma_r", "gamma_u", "c_tilde"})."""
        c_prev = self._zeros(x) if c_prev is None else c_prev
        cx = torch.cat([c_prev, x], dim=-1)  # (B, H + D_in)
        gamma_r = torch.sigmoid(F.linear(cx, self.W_r, self.b_r))  # (B, H)
        gamma_u = torch.sigmoid(F.linear(cx, self.W_u, self.b_u))  # (B, H)
        if self.reset_after:
            W_cc, W_cx = _split(self.W_c, self.hidden_size)
            recurrent = F.linear(c_prev, W_cc, self.b_cc)  # (B, H)
            c_tilde = torch.tanh(F.linear(x, W_cx, self.b_cx) + gamma_r * recurrent)  # (B, H)
        else:
            reset = torch.cat([gamma_r * c_prev, x], dim=-1)  # (B, H + D_in)
            c_tilde = torch.tanh(F.linear(reset, self.W_c, self.b_c))  # (B, H)
        c = gamma_u * c_tilde + (1 - gamma_u) * c_prev  # (B, H)
        return c, {"gamma_r": gamma_r, "gamma_u": gamma_u, "c_tilde": c_tilde}

    def forward(self, x: Tensor, c_prev: Tensor | None = None) -> Tensor:
        return self.step(x, c_prev)[0]

    def _require_reset_after(self) -> None:
        if not self.reset_after:
            raise ValueError(
                "torch's GRU resets after the recurrent matmul: needs reset_after=True"
            )

    def to_torch_params(self) -> TorchParams:
        """nn.GRU's (weight_ih (3H, D_in), weight_hh (3H, H), bias_ih, bias_hh), rows r, z, n."""
        self._require_reset_after()
        H = self.hidden_size
        W_rc, W_rx = _split(self.W_r, H)
        W_uc, W_ux = _split(self.W_u, H)
        W_cc, W_cx = _split(self.W_c, H)
        weight_ih = torch.cat([W_rx, -W_ux, W_cx], dim=0)  # (3H, D_in)
        weight_hh = torch.cat([W_rc, -W_uc, W_cc], dim=0)  # (3H, H)
        if not self.bias:
            return weight_ih, weight_hh, None, None
        bias_ih = torch.cat([self.b_r, -self.b_u, self.b_cx])  # (3H,)
        bias_hh = torch.cat([self._bias_hh_zeros(2), self.b_cc])  # (3H,)
        return weight_ih, weight_hh, bias_ih, bias_hh

    @torch.no_grad()
    def load_from_torch(
        self,
        weight_ih: Tensor,
        weight_hh: Tensor,
        bias_ih: Tensor | None = None,
        bias_hh: Tensor | None = None,
    ) -> None:
        self._require_reset_after()
        self._check_torch_bias(bias_ih, bias_hh)
        W_ir, W_iz, W_in = weight_ih.chunk(3, dim=0)  # 3 × (H, D_in)
        W_hr, W_hz, W_hn = weight_hh.chunk(3, dim=0)  # 3 × (H, H)
        self.W_r.copy_(torch.cat([W_hr, W_ir], dim=1))  # (H, H + D_in)
        self.W_u.copy_(-torch.cat([W_hz, W_iz], dim=1))  # (H, H + D_in)
        self.W_c.copy_(torch.cat([W_hn, W_in], dim=1))  # (H, H + D_in)
        if self.bias:
            b_ir, b_iz, b_in = bias_ih.chunk(3)  # 3 × (H,)
            b_hr, b_hz, b_hn = bias_hh.chunk(3)  # 3 × (H,)
            self.b_r.copy_(b_ir + b_hr)
            self.b_u.copy_(-(b_iz + b_hz))
            self.b_cx.copy_(b_in)
            self.b_cc.copy_(b_hn)


class LSTMCell(_Cell):
    """Long short-term memory, Hochreiter & Schmidhuber 1997 with the forget gate of
    Gers et al. 2000; notes 003 notation (notes 002: i_t = Γu, f_t = Γf, o_t = Γo, h_t = a⟨t⟩).

        Γu = σ(W_u [a⟨t−1⟩, x⟨t⟩] + b_u)        update (input) gate
        Γf = σ(W_f [a⟨t−1⟩, x⟨t⟩] + b_f)        forget gate
        Γo = σ(W_o [a⟨t−1⟩, x⟨t⟩] + b_o)        output gate
        c̃⟨t⟩ = tanh(W_c [a⟨t−1⟩, x⟨t⟩] + b_c)
        c⟨t⟩ = Γu ∗ c̃⟨t⟩ + Γf ∗ c⟨t−1⟩
        a⟨t⟩ = Γo ∗ tanh(c⟨t⟩)

    The state is (h, c) = (a⟨t⟩, c⟨t⟩), torch's order. b_f starts at ``forget_bias``
    (notes 002: "initialize bias to positive"; Gers et al. 2000, Jozefowicz et al. 2015 use 1)
    so Γf ≈ σ(1) and ∂c⟨t⟩/∂c⟨t−1⟩ = diag(Γf) (the "gradient super-highway") starts near 1.
    Torch order of gate rows: i, f, g, o = Γu, Γf, c̃, Γo.

    Shapes:
        x:     (B, D_in)
        state: ((B, H), (B, H))   (None → zeros)
        returns (h, c): ((B, H), (B, H))
        W_u, W_f, W_o, W_c: (H, H + D_in); b_u, b_f, b_o, b_c: (H,)

    Deviations: none from the notes' equations; ``forget_bias`` is ignored when bias=False.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        forget_bias: float = 1.0,
    ) -> None:
        super().__init__()
        self._init_sizes(input_size, hidden_size, bias)
        self.forget_bias = forget_bias
        self.W_u, self.W_f = self._new_weight(), self._new_weight()
        self.W_o, self.W_c = self._new_weight(), self._new_weight()
        H = hidden_size
        self.b_u = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        self.b_f = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        self.b_o = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        self.b_c = nn.Parameter(torch.empty(H)) if bias else None  # (H,)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self._uniform_all()
        if self.b_f is not None:
            with torch.no_grad():
                self.b_f.fill_(self.forget_bias)

    def step(
        self, x: Tensor, state: LSTMState | None = None
    ) -> tuple[LSTMState, dict[str, Tensor]]:
        """One step; returns ((h, c), {"gamma_u", "gamma_f", "gamma_o", "c_tilde"})."""
        h_prev, c_prev = (self._zeros(x), self._zeros(x)) if state is None else state
        ax = torch.cat([h_prev, x], dim=-1)  # (B, H + D_in)
        gamma_u = torch.sigmoid(F.linear(ax, self.W_u, self.b_u))  # (B, H)
        gamma_f = torch.sigmoid(F.linear(ax, self.W_f, self.b_f))  # (B, H)
        gamma_o = torch.sigmoid(F.linear(ax, self.W_o, self.b_o))  # (B, H)
        c_tilde = torch.tanh(F.linear(ax, self.W_c, self.b_c))  # (B, H)
        c = gamma_u * c_tilde + gamma_f * c_prev  # (B, H)
        h = gamma_o * torch.tanh(c)  # (B, H)
        gates = {"gamma_u": gamma_u, "gamma_f": gamma_f, "gamma_o": gamma_o, "c_tilde": c_tilde}
        return (h, c), gates

    def forward(self, x: Tensor, state: LSTMState | None = None) -> LSTMState:
        return self.step(x, state)[0]

    def to_torch_params(self) -> TorchParams:
        """nn.LSTM's (weight_ih (4H, D_in), weight_hh (4H, H), bias_ih, bias_hh), rows i f g o."""
        H = self.hidden_size
        blocks = [_split(W, H) for W in (self.W_u, self.W_f, self.W_c, self.W_o)]
        weight_ih = torch.cat([W_x for _, W_x in blocks], dim=0)  # (4H, D_in)
        weight_hh = torch.cat([W_h for W_h, _ in blocks], dim=0)  # (4H, H)
        if not self.bias:
            return weight_ih, weight_hh, None, None
        bias_ih = torch.cat([self.b_u, self.b_f, self.b_c, self.b_o])  # (4H,)
        return weight_ih, weight_hh, bias_ih, self._bias_hh_zeros(4)

    @torch.no_grad()
    def load_from_torch(
        self,
        weight_ih: Tensor,
        weight_hh: Tensor,
        bias_ih: Tensor | None = None,
        bias_hh: Tensor | None = None,
    ) -> None:
        self._check_torch_bias(bias_ih, bias_hh)
        W_x = weight_ih.chunk(4, dim=0)  # i, f, g, o: 4 × (H, D_in)
        W_h = weight_hh.chunk(4, dim=0)  # i, f, g, o: 4 × (H, H)
        for k, W in enumerate((self.W_u, self.W_f, self.W_c, self.W_o)):
            W.copy_(torch.cat([W_h[k], W_x[k]], dim=1))  # (H, H + D_in)
        if self.bias:
            b = bias_ih + bias_hh  # (4H,)
            for k, b_k in enumerate((self.b_u, self.b_f, self.b_c, self.b_o)):
                b_k.copy_(b.chunk(4)[k])


Cell = RNNCell | GRUCell | LSTMCell
