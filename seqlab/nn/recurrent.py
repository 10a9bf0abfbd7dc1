"""Multi-layer, optionally bidirectional recurrent network over padded batches.

Notes 003 (RNN, GRU, LSTM), notes 002 (BPTT) and notes 001 (the bidirectional encoder of
Bahdanau et al. 2015: "an RNN that runs forwards and an RNN that runs backwards, and we
concatenate their hidden vectors"). Stacking L layers follows torch.nn.RNN. One module, two
interchangeable paths over the same parameters (those of the cells):

* readable: a Python loop over time steps calling :mod:`seqlab.nn.cells`, with an optional
  per-step hook that sees every state and gate value (Γu, Γr, Γf, Γo, c̃) as live autograd
  nodes, for inspection of gates and of gradient flow (``state.register_hook``);
* fused: torch's native / cuDNN kernels (:mod:`seqlab.nn.recurrent_fused`), weights assembled
  from the cells on every call so that gradients reach the cells; on a GPU written by one
  autograd node into one buffer in cuDNN's layout (:mod:`seqlab.nn.recurrent_packed`).

tests/nn/test_recurrent.py proves readable == fused == ``torch.nn.RNN/GRU/LSTM`` (values
and gradients, several layers, both directions, variable lengths, initial states).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.cells import Cell, GRUCell, LSTMCell, RNNCell
from seqlab.nn.masks import padding_mask
from seqlab.nn.recurrent_fused import Mode, State, flat_weights_of, fused_forward
from seqlab.nn.recurrent_packed import cudnn_layout, kernel_dtype, packed_flat_weights

CellKind = Literal["rnn", "gru", "lstm"]
StepHook = Callable[[int, int, int, State, dict[str, Tensor]], None]
"""step_hook(layer, direction, t, state, gates): state after step t (held at padding)."""

_TORCH_LAYERS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


class Recurrent(nn.Module):
    """Stacked (bi)directional RNN / GRU / LSTM over a batch-first padded batch.

    Layer l, direction → (forward, t = 1…T_b) and ← (backward, t = T_b…1), with T_b the
    length of sequence b:

        →a⟨t⟩_l = cell_{l,→}(x⟨t⟩_l, →a⟨t−1⟩_l)      ←a⟨t⟩_l = cell_{l,←}(x⟨t⟩_l, ←a⟨t+1⟩_l)
        y⟨t⟩_l = [→a⟨t⟩_l ; ←a⟨t⟩_l]                 (notes 001: concatenate both directions)
        x⟨t⟩_{l+1} = dropout(y⟨t⟩_l)                 (between layers, not after the last)

    (for the LSTM a⟨t⟩ is the hidden part h of the state (h, c)). Padding: outputs at
    t ≥ T_b are 0; the state is held at padded steps, so the final forward state is the
    state at t = T_b and the backward direction starts at x⟨T_b⟩ from the initial state.

    Paths: ``fused=None`` picks the fused kernel unless a ``step_hook`` is given or the
    cell has no fused equivalent (GRU with reset_after=False); ``fused=True/False`` forces a
    path (True raises where impossible). Dropout masks are drawn differently by the two
    paths, so they agree in training mode only when dropout is 0 (or 1).

    Shapes:
        x:             (B, T, D)
        lengths:       (B,) int in [1, T], or None (every sequence has length T)
        initial_state: (L·dirs, B, H), or (h0, c0) of that shape for the LSTM; None → zeros
        returns:       outputs (B, T, dirs·H) = [forward ; backward],
                       final state (L·dirs, B, H) (or (h_n, c_n)), index layer·dirs + direction
                       — torch's layout.

    Deviations: none from the cells' equations. ``cell="gru"`` defaults to reset_after=True
    (torch/cuDNN's GRU, which has the fused kernel), not Cho 2014's reset-before form.
    """

    def __init__(
        self,
        cell: CellKind,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
        nonlinearity: Literal["tanh", "relu"] = "tanh",
        init: Literal["default", "identity"] = "default",
        reset_after: bool = True,
        forget_bias: float = 1.0,
    ) -> None:
        super().__init__()
        if cell not in _TORCH_LAYERS:
            raise ValueError(f"cell must be one of {sorted(_TORCH_LAYERS)}, got {cell!r}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        self.kind, self.input_size, self.hidden_size = cell, input_size, hidden_size
        self.num_layers, self.bidirectional, self.dropout = num_layers, bidirectional, dropout
        self.bias, self.nonlinearity, self.reset_after = bias, nonlinearity, reset_after
        self.num_directions = 2 if bidirectional else 1

        def make(d_in: int) -> Cell:
            if cell == "rnn":
                return RNNCell(d_in, hidden_size, nonlinearity, bias, init)
            if cell == "gru":
                return GRUCell(d_in, hidden_size, bias, reset_after)
            return LSTMCell(d_in, hidden_size, bias, forget_bias)

        dirs = self.num_directions
        # cells[layer·dirs + direction], torch's order of layers and directions.
        self.cells = nn.ModuleList(
            make(input_size if layer == 0 else dirs * hidden_size)
            for layer in range(num_layers)
            for _ in range(dirs)
        )

    @property
    def mode(self) -> Mode:
        return f"rnn_{self.nonlinearity}" if self.kind == "rnn" else self.kind  # type: ignore[return-value]

    @property
    def has_fused(self) -> bool:
        """Whether torch has a kernel computing exactly this network."""
        return not (self.kind == "gru" and not self.reset_after)

    def cell_at(self, layer: int, direction: int) -> Cell:
        return self.cells[layer * self.num_directions + direction]

    def forward(
        self,
        x: Tensor,
        lengths: Tensor | None = None,
        initial_state: State | None = None,
        fused: bool | None = None,
        step_hook: StepHook | None = None,
    ) -> tuple[Tensor, State]:
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"x must be (B, T, {self.input_size}), got {tuple(x.shape)}")
        if lengths is not None:
            self._check_lengths(lengths, x.shape[0], x.shape[1])
        state0 = self._initial_state(x, initial_state)
        if fused is None:
            fused = self.has_fused and step_hook is None
        if fused and not self.has_fused:
            raise ValueError("GRU with reset_after=False has no fused kernel: use fused=False")
        if fused and step_hook is not None:
            raise ValueError("step_hook needs the readable path: use fused=False or None")
        if fused:
            weights, x, state0 = self._kernel_inputs(x, state0)
            return fused_forward(
                self.mode,
                x,
                lengths,
                state0,
                weights,
                self.bias,
                self.num_layers,
                self.bidirectional,
                self.dropout,
                self.training,
            )
        return self._readable(x, lengths, state0, step_hook)

    # --- readable path -------------------------------------------------------------------

    def _readable(
        self, x: Tensor, lengths: Tensor | None, state0: State, hook: StepHook | None
    ) -> tuple[Tensor, State]:
        mask = None if lengths is None else padding_mask(lengths.to(x.device), x.shape[1])  # (B, T)
        layer_input, finals = x, []
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                s0 = tuple(s[k] for s in state0) if self.kind == "lstm" else state0[k]
                out, final = self._run_direction(layer, d, layer_input, mask, s0, hook)
                outs.append(out)  # (B, T, H)
                finals.append(final)
            layer_output = torch.cat(outs, dim=-1)  # (B, T, dirs·H)
            if layer < self.num_layers - 1:  # dropout between layers, not after the last
                layer_input = F.dropout(layer_output, self.dropout, self.training)  # (B, T, dirs·H)
        if self.kind == "lstm":
            h_n = torch.stack([h for h, _ in finals])  # (L·dirs, B, H)
            c_n = torch.stack([c for _, c in finals])  # (L·dirs, B, H)
            return layer_output, (h_n, c_n)
        return layer_output, torch.stack(finals)  # (L·dirs, B, H)

    def _run_direction(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        mask: Tensor | None,
        state: State,
        hook: StepHook | None,
    ) -> tuple[Tensor, State]:
        """One layer, one direction: (B, T, D_l) → outputs (B, T, H), final state."""
        cell = self.cell_at(layer, direction)
        T = x.shape[1]
        outputs: list[Tensor] = [x.new_empty(0)] * T
        times = range(T - 1, -1, -1) if direction == 1 else range(T)
        for t in times:
            new, gates = cell.step(x[:, t], state)
            if mask is not None:
                keep = mask[:, t, None]  # (B, 1)
                # Padded step: hold the state (forward: keep the last real state; backward:
                # stay at the initial state until the last real token is reached).
                if isinstance(new, tuple):
                    new = tuple(torch.where(keep, n, s) for n, s in zip(new, state))
                else:
                    new = torch.where(keep, new, state)  # (B, H)
            if hook is not None:
                hook(layer, direction, t, new, gates)
            state = new
            a = state[0] if isinstance(state, tuple) else state  # (B, H)
            outputs[t] = a if mask is None else a.masked_fill(~keep, 0.0)  # (B, H)
        return torch.stack(outputs, dim=1), state  # (B, T, H)

    # --- states, weights, conversion -----------------------------------------------------

    def _check_lengths(self, lengths: Tensor, B: int, T: int) -> None:
        if lengths.shape != (B,) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
            raise ValueError(f"lengths must be an integer tensor of shape ({B},)")
        if B and (int(lengths.min()) < 1 or int(lengths.max()) > T):
            raise ValueError(f"lengths must lie in [1, {T}], got {lengths.tolist()}")

    def _initial_state(self, x: Tensor, initial_state: State | None) -> State:
        shape = (self.num_layers * self.num_directions, x.shape[0], self.hidden_size)
        if initial_state is None:
            zeros = x.new_zeros(shape)  # (L·dirs, B, H)
            return (zeros, zeros) if self.kind == "lstm" else zeros
        parts = initial_state if self.kind == "lstm" else (initial_state,)
        if self.kind == "lstm" and len(parts) != 2:
            raise ValueError("the LSTM's initial_state is a pair (h0, c0)")
        for s in parts:
            if tuple(s.shape) != shape:
                raise ValueError(f"initial state must have shape {shape}, got {tuple(s.shape)}")
        return initial_state

    def flat_weights(self) -> list[Tensor]:
        """torch's flat weight list assembled from the cells (differentiable)."""
        return flat_weights_of(list(self.cells))

    pack_weights = True
    """On a GPU with cuDNN, hand the kernel one packed buffer (recurrent_packed.py); False
    only to measure what packing saves (benchmarks/rnn_packing.py)."""

    def _kernel_inputs(self, x: Tensor, state0: State) -> tuple[list[Tensor], Tensor, State]:
        """The fused kernel's weights, input and initial state.

        On a GPU where cuDNN takes ``x``: the weights packed into one buffer in cuDNN's
        layout and the kernel's dtype (fp16 under CUDA autocast, as torch's autocast runs
        cuDNN RNNs; input and state cast to it here, the casts autocast would make).
        Elsewhere: :meth:`_kernel_weights`."""
        if not (self.pack_weights and x.is_cuda and torch.backends.cudnn.is_acceptable(x)):
            return self._kernel_weights(x), x, state0
        param_dtype = next(self.parameters()).dtype
        dtype = kernel_dtype(x, param_dtype)
        layout = cudnn_layout(
            self.mode, self.input_size, self.hidden_size, self.num_layers,
            self.bidirectional, self.bias, dtype, str(x.device),
        )  # fmt: skip
        weights = packed_flat_weights(list(self.cells), layout, dtype)
        if x.dtype != dtype and torch.is_autocast_enabled("cuda"):
            x = x.to(dtype)  # (B, T, D)
            if isinstance(state0, tuple):
                state0 = (state0[0].to(dtype), state0[1].to(dtype))  # (L·dirs, B, H) each
            else:
                state0 = state0.to(dtype)  # (L·dirs, B, H)
        return weights, x, state0

    def _kernel_weights(self, x: Tensor) -> list[Tensor]:
        """``flat_weights()`` with the weight matrices cast once to autocast's dtype when
        CPU autocast is on (biases stay fp32, as autocast's ops take them; CUDA unchanged).

        The assembled weights are not leaf tensors, so autocast's weight cache skips them:
        torch's GRU and tanh/ReLU RNN kernels on CPU run one ``linear`` per time step, and
        each cast the fp32 weights again (the bf16 GRU step was ~11 % slower than nn.GRU's
        for it; docs/perf-notes-decoding.md §14). Casting once is the same cast, so the forward is
        bit-identical; the weight gradient is then summed over the time steps in bf16
        before its cast back, as nn.GRU's cached cast does.
        """
        weights = self.flat_weights()
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):  # measured on CPU only
            dtype = torch.get_autocast_dtype("cpu")
            weights = [w.to(dtype) if w.dim() == 2 else w for w in weights]
        return weights

    def _torch_names(self, layer: int, direction: int) -> list[str]:
        suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else [])
        return [n + suffix for n in names]

    @torch.no_grad()
    def load_from_torch(self, module: nn.RNNBase) -> None:
        """Copy the weights of a matching torch.nn.RNN / GRU / LSTM into the cells."""
        expected = _TORCH_LAYERS[self.kind]
        if type(module) is not expected or module.num_layers != self.num_layers:
            raise ValueError(f"expected a {expected.__name__} with {self.num_layers} layers")
        if module.bidirectional != self.bidirectional or module.bias != self.bias:
            raise ValueError("bidirectional and bias must match")
        for layer in range(self.num_layers):
            for d in range(self.num_directions):
                params = [getattr(module, n) for n in self._torch_names(layer, d)]
                self.cell_at(layer, d).load_from_torch(*params)

    @torch.no_grad()
    def to_torch(self) -> nn.RNNBase:
        """A batch-first torch.nn.RNN / GRU / LSTM computing the same function (a copy)."""
        kwargs = {"nonlinearity": self.nonlinearity} if self.kind == "rnn" else {}
        ref = next(self.parameters())
        module = _TORCH_LAYERS[self.kind](
            self.input_size,
            self.hidden_size,
            num_layers=self.num_layers,
            bias=self.bias,
            batch_first=True,
            dropout=self.dropout,
            bidirectional=self.bidirectional,
            device=ref.device,
            dtype=ref.dtype,
            **kwargs,
        )
        for layer in range(self.num_layers):
            params = self.cell_at(layer, 0), self.cell_at(layer, self.num_directions - 1)
            for d in range(self.num_directions):
                tensors = [p for p in params[d].to_torch_params() if p is not None]
                for name, value in zip(self._torch_names(layer, d), tensors):
                    getattr(module, name).copy_(value)
        module.flatten_parameters()
        return module
