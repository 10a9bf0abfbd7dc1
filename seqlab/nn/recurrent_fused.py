"""Fast path of :class:`seqlab.nn.recurrent.Recurrent`: torch's fused multi-layer RNN kernels.

The parameters live in the cells (:mod:`seqlab.nn.cells`) only. Each call assembles torch's
flat weight list from them with differentiable ops (slices, ``torch.cat``, negation for the
GRU's z = 1 − Γu) and hands it to ``torch._VF.rnn_tanh / rnn_relu / gru / lstm`` — the same
kernels ``nn.RNN/GRU/LSTM.forward`` call — so autograd carries the gradients back to the
cells' parameters and there is one home for every weight. Variable lengths go through
``pack_padded_sequence(enforce_sorted=False)``, exactly as ``nn.LSTM`` does with a packed
input: the kernel never sees padding, padded outputs are zero and the final state of each
sequence is taken at its last real step (the backward direction starts there).

Why ``torch._VF`` rather than ``torch.func.functional_call`` on a hidden ``nn.LSTM``: the
module would own a second, unused copy of every weight and its weight-flattening cache;
calling the kernel with our list is what the module does internally, without the copy.
Cost: the weights are re-assembled each call (O(parameters), small next to O(B·T·H²)). On
CUDA the assembled list is not one chunk of memory, so cuDNN would copy it into its own flat
buffer each call (warning that the weights are "not part of single contiguous chunk of
memory"); there ``Recurrent`` hands the kernel the weights packed by
:mod:`seqlab.nn.recurrent_packed` instead (``Recurrent.pack_weights``).

LSTM under CPU autocast on a CPU whose oneDNN has no bf16 (or fp16) RNN: torch picks its
oneDNN LSTM from the *input's* dtype (fp32: yes), then autocast hands that kernel bf16
weights and oneDNN fails ("could not create a primitive descriptor for the LSTM forward
propagation primitive"; ``nn.LSTM`` fails the same way, torch 2.13, AVX2-only CPUs). There
oneDNN is switched off for the call, so torch runs its native LSTM on the same inputs —
what ``nn.LSTM`` computes with oneDNN off, per-step matmuls in bf16 as autocast asks.
Where oneDNN supports the dtype nothing changes (``_onednn_lacks``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
from torch import _VF, Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

Mode = Literal["rnn_tanh", "rnn_relu", "gru", "lstm"]
State = Tensor | tuple[Tensor, Tensor]

_KERNELS = {"rnn_tanh": _VF.rnn_tanh, "rnn_relu": _VF.rnn_relu, "gru": _VF.gru, "lstm": _VF.lstm}


@functools.cache
def _onednn_lacks(dtype: torch.dtype) -> bool:
    """True when this CPU's oneDNN cannot run ``dtype`` (bf16 / fp16) kernels."""
    check = {
        torch.bfloat16: "_is_mkldnn_bf16_supported",
        torch.float16: "_is_mkldnn_fp16_supported",
    }.get(dtype)
    if check is None or not torch.backends.mkldnn.is_available():
        return False
    probe = getattr(torch.ops.mkldnn, check, None)
    return probe is not None and not bool(probe())


def needs_native_lstm(mode: Mode, x: Tensor) -> bool:
    """True when an LSTM on ``x`` would reach a oneDNN kernel that cannot run the CPU
    autocast dtype (module docstring)."""
    if mode != "lstm" or x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return False
    return _onednn_lacks(torch.get_autocast_dtype("cpu"))


def _without_onednn(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel`` called with oneDNN switched off (torch then takes its native LSTM)."""

    def call(*args: Any) -> Any:
        with _onednn_off():
            return kernel(*args)

    return call


@contextlib.contextmanager
def _onednn_off() -> Iterator[None]:
    """oneDNN disabled for the block, only its on/off flag touched (restored after)."""
    before = torch.backends.mkldnn.set_flags(False, None, None, None)[0]
    try:
        yield
    finally:
        torch.backends.mkldnn.set_flags(before, None, None, None)


def fused_forward(
    mode: Mode,
    x: Tensor,
    lengths: Tensor | None,
    initial_state: State,
    flat_weights: list[Tensor],
    bias: bool,
    num_layers: int,
    bidirectional: bool,
    dropout: float,
    training: bool,
) -> tuple[Tensor, State]:
    """Run torch's fused kernel over a batch-first input.

    Shapes:
        x:             (B, T, D)
        lengths:       (B,) int, 1 ≤ lengths ≤ T, or None (all sequences have length T)
        initial_state: (L·dirs, B, H), or a tuple of two of them (h0, c0) for "lstm"
        flat_weights:  per layer, per direction: weight_ih, weight_hh[, bias_ih, bias_hh]
        returns:       outputs (B, T, dirs·H), final state like initial_state
    """
    kernel = _KERNELS[mode]
    if needs_native_lstm(mode, x):  # oneDNN's LSTM cannot run the autocast dtype here
        kernel = _without_onednn(kernel)
    hx = list(initial_state) if mode == "lstm" else initial_state
    if lengths is None:
        result = kernel(
            x, hx, flat_weights, bias, num_layers, dropout, training, bidirectional, True
        )
        outputs, hidden = result[0], result[1:]  # (B, T, dirs·H), states (L·dirs, B, H)
    else:
        T = x.shape[1]
        # packed.data: (ΣT_b, D), real tokens only, time-major, batch sorted by length
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        order = packed.sorted_indices  # (B,)
        # The kernel sees the batch sorted by decreasing length: sort the states the same way.
        if mode == "lstm":
            hx = [s.index_select(1, order) for s in hx]  # (L·dirs, B, H) each
        else:
            hx = hx.index_select(1, order)  # (L·dirs, B, H)
        result = kernel(  # (ΣT_b, dirs·H), final states (L·dirs, B, H) in sorted order
            packed.data,
            packed.batch_sizes,
            hx,
            flat_weights,
            bias,
            num_layers,
            dropout,
            training,
            bidirectional,
        )
        out_packed = PackedSequence(  # (ΣT_b, dirs·H)
            result[0], packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices
        )
        # Padded positions are filled with zeros; the batch is back in its original order.
        outputs, _ = pad_packed_sequence(  # (B, T, dirs·H)
            out_packed, batch_first=True, total_length=T
        )
        hidden = [s.index_select(1, packed.unsorted_indices) for s in result[1:]]  # (L·dirs, B, H)
    if mode == "lstm":
        return outputs, (hidden[0], hidden[1])
    return outputs, hidden[0]


def flat_weights_of(cells: list[torch.nn.Module]) -> list[Tensor]:
    """torch's flat weight list built from the cells (ordered layer-major, then direction)."""
    flat: list[Tensor] = []
    for cell in cells:
        flat.extend(p for p in cell.to_torch_params() if p is not None)
    return flat
