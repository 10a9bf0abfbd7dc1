"""The fused kernel's weights written into one buffer in cuDNN's layout, by one autograd node.

:func:`seqlab.nn.recurrent_fused.flat_weights_of` assembles torch's flat weight list from the
cells with differentiable slices and ``torch.cat``. On a GPU that list is not one chunk of
memory, so on every call cuDNN copies each weight into a flat buffer of its own (under CUDA
autocast, ``_cudnn_rnn``'s autocast wrapper casts and re-flattens them instead), and the
backward runs a slice-backward (zeros + copy) and an add per block. At the usual sizes those
launches, not the arithmetic, set a step's time on a GPU: seqlab's ``Recurrent`` ran at
0.72–0.86× cuDNN's ``nn.LSTM`` / ``nn.GRU`` (docs/perf-notes-measured.md §18).

:class:`PackWeights` is one autograd node in their place:

* forward: each cell's gate matrices [W_h | W_x] written, one ``torch.cat`` per flat weight
  (cast on the way), into views of one buffer laid out exactly as cuDNN expects it; the
  layout is read once per shape from ``nn.RNNBase.flatten_parameters`` (:func:`cudnn_layout`,
  cached);
* backward: each cell's gradient [∂W_h | ∂W_x] rebuilt with one ``torch.cat``.

The values are copies of the cells' parameters, so the kernel computes exactly what it
computes on the assembled list (tests/test_cuda.py compares values and gradients bit for
bit, with and without autocast).

Autocast: torch runs cuDNN RNNs in **fp16** under CUDA autocast whatever the autocast dtype
(``at::autocast::_cudnn_rnn_cast_reflatten`` casts the weights, the input and the state to
``kHalf``). :func:`kernel_dtype` says so, the buffer is then fp16, and
``Recurrent`` casts the input and the state to fp16 before the call — the same casts autocast
makes — so that torch recognises the buffer instead of re-flattening it.

Gate order and signs (cells.py ``to_torch_params``): LSTM rows i, f, g, o = Γu, Γf, c̃, Γo;
GRU rows r, z, n with z = 1 − Γu, i.e. W_z = −W_u, b_z = −b_u, and b_hh's n block = b_cc;
the vanilla RNN's W_ax, W_aa are already torch's weight_ih, weight_hh. b_hh is zero except
for the GRU's n block (the cells hold one bias per gate).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.nn.cells import GRUCell, LSTMCell, RNNCell


@dataclass(frozen=True)
class CellSpec:
    """How one cell's parameters map onto torch's (weight_ih, weight_hh[, bias_ih, bias_hh]).

    gates G (1 RNN, 3 GRU, 4 LSTM), hidden H, inputs D; ``stacked``: the weights are the
    notes' (H, H + D) = [W_h | W_x] matrices, one per gate (GRU, LSTM), else W_ax (H, D) and
    W_aa (H, H) (RNN); ``negated``: the gate block whose sign flips (GRU's z, block 1);
    ``n_block_bias``: the cell has b_cc, torch's bias_hh n block (GRU).
    """

    gates: int
    hidden: int
    inputs: int
    bias: bool
    stacked: bool
    negated: int | None = None
    n_block_bias: bool = False

    @property
    def n_weights(self) -> int:
        return self.gates if self.stacked else 2

    @property
    def n_params(self) -> int:
        n_bias = (self.gates + int(self.n_block_bias)) if self.bias else 0
        return self.n_weights + n_bias

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """torch's shapes for this cell: (G·H, D), (G·H, H)[, (G·H,), (G·H,)]."""
        GH = self.gates * self.hidden
        out: list[tuple[int, ...]] = [(GH, self.inputs), (GH, self.hidden)]
        return out + [(GH,), (GH,)] if self.bias else out


def cell_params(cell: nn.Module) -> tuple[list[Tensor], CellSpec]:
    """The cell's parameters in the order :class:`PackWeights` reads them, and its spec."""
    H, D, bias = cell.hidden_size, cell.input_size, cell.bias
    if isinstance(cell, LSTMCell):  # torch rows i, f, g, o
        weights = [cell.W_u, cell.W_f, cell.W_c, cell.W_o]
        biases = [cell.b_u, cell.b_f, cell.b_c, cell.b_o]
        spec = CellSpec(4, H, D, bias, stacked=True)
    elif isinstance(cell, GRUCell):  # torch rows r, z, n; z = 1 − Γu
        cell._require_reset_after()
        weights = [cell.W_r, cell.W_u, cell.W_c]
        biases = [cell.b_r, cell.b_u, cell.b_cx, cell.b_cc]
        spec = CellSpec(3, H, D, bias, stacked=True, negated=1, n_block_bias=True)
    elif isinstance(cell, RNNCell):
        weights, biases = [cell.W_ax, cell.W_aa], [cell.b_a]
        spec = CellSpec(1, H, D, bias, stacked=False)
    else:
        raise TypeError(f"not a recurrent cell: {type(cell).__name__}")
    return weights + (biases if bias else []), spec


@dataclass(frozen=True)
class Layout:
    """Where each flat weight lives in the buffer: element offsets, shapes, buffer size."""

    offsets: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    numel: int

    def views(self, buffer: Tensor) -> list[Tensor]:
        """The flat weights as views of ``buffer`` (one ``as_strided`` each)."""
        return [
            buffer.as_strided(s, (s[1], 1) if len(s) == 2 else (1,), o)
            for o, s in zip(self.offsets, self.shapes, strict=True)
        ]


def contiguous_layout(shapes: list[tuple[int, ...]]) -> Layout:
    """The flat weights one after another, in torch's order (any kernel accepts it)."""
    offsets, at = [], 0
    for s in shapes:
        offsets.append(at)
        at += math.prod(s)
    return Layout(tuple(offsets), tuple(shapes), at)


_TORCH_MODULES = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn_tanh": nn.RNN, "rnn_relu": nn.RNN}


@functools.lru_cache(maxsize=64)
def cudnn_layout(
    mode: str,
    input_size: int,
    hidden: int,
    num_layers: int,
    bidirectional: bool,
    bias: bool,
    dtype: torch.dtype,
    device: str,
) -> Layout:
    """cuDNN's layout of the flat weights, read off a throwaway ``nn.RNNBase`` of the same
    shape after ``flatten_parameters`` (torch's own flattening: its weights become views of
    one buffer). Falls back to :func:`contiguous_layout` where torch did not flatten."""
    kwargs: dict[str, Any] = {}
    if mode.startswith("rnn_"):
        kwargs["nonlinearity"] = mode.removeprefix("rnn_")
    module = _TORCH_MODULES[mode](
        input_size, hidden, num_layers, bias=bias, batch_first=True,
        bidirectional=bidirectional, device=device, dtype=dtype, **kwargs,
    )  # fmt: skip
    module.flatten_parameters()
    weights = module._flat_weights
    shapes = [tuple(w.shape) for w in weights]
    storage = weights[0].untyped_storage()
    base = storage.data_ptr()
    if any(w.untyped_storage().data_ptr() != base for w in weights):
        return contiguous_layout(shapes)
    item = weights[0].element_size()
    offsets = tuple((w.data_ptr() - base) // item for w in weights)
    return Layout(offsets, tuple(shapes), storage.nbytes() // item)


def kernel_dtype(x: Tensor, param_dtype: torch.dtype) -> torch.dtype:
    """The dtype torch's fused kernel runs in on ``x``'s device: fp16 for cuDNN under CUDA
    autocast (module docstring), else the parameters' dtype."""
    if x.is_cuda and torch.is_autocast_enabled("cuda"):
        return torch.float16
    return param_dtype


class PackWeights(torch.autograd.Function):
    """Cells' parameters -> torch's flat weight list, as views of one buffer (module doc).

    forward(specs, layout, dtype, *params) -> the flat weights, layer-major then direction:
    per cell weight_ih (G·H, D), weight_hh (G·H, H)[, bias_ih (G·H,), bias_hh (G·H,)].
    """

    @staticmethod
    def forward(ctx: Any, specs: tuple[CellSpec, ...], layout: Layout, dtype: torch.dtype,
                *params: Tensor) -> tuple[Tensor, ...]:  # fmt: skip
        ctx.specs, ctx.param_dtype = specs, params[0].dtype
        buffer = params[0].new_zeros(layout.numel, dtype=dtype)
        flat = layout.views(buffer)
        p = w = 0
        for spec in specs:
            n_flat = 4 if spec.bias else 2
            _write_cell(spec, params[p : p + spec.n_params], flat[w : w + n_flat])
            p, w = p + spec.n_params, w + n_flat
        return tuple(flat)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor | None, ...]:
        out: list[Tensor | None] = [None, None, None]
        w = 0
        for spec in ctx.specs:
            n_flat = 4 if spec.bias else 2
            out.extend(_cell_grads(spec, grads[w : w + n_flat], ctx.param_dtype))
            w += n_flat
        return tuple(out)


@torch.no_grad()
def _write_cell(spec: CellSpec, params: tuple[Tensor, ...], flat: list[Tensor]) -> None:
    """Copy one cell's parameters into its flat views (the buffer starts zeroed): one
    ``torch.cat`` per flat weight, written straight into the buffer (cast on the way)."""
    G, H = spec.gates, spec.hidden
    if spec.stacked:  # W_k = [W_kh | W_kx], k in torch's gate order
        torch.cat([W[:, H:] for W in params[:G]], out=flat[0])  # weight_ih (G·H, D)
        torch.cat([W[:, :H] for W in params[:G]], out=flat[1])  # weight_hh (G·H, H)
    else:
        flat[0].copy_(params[0])  # weight_ih = W_ax (H, D)
        flat[1].copy_(params[1])  # weight_hh = W_aa (H, H)
    if spec.bias:
        n_w = spec.n_weights
        torch.cat(params[n_w : n_w + G], out=flat[2])  # bias_ih (G·H,)
        if spec.n_block_bias:
            flat[3][(G - 1) * H :].copy_(params[n_w + G])  # bias_hh's n block = b_cc
    if spec.negated is not None:  # W_z = −W_u, b_z = −b_u
        rows = slice(spec.negated * H, (spec.negated + 1) * H)
        for w in flat[:3] if spec.bias else flat[:2]:
            w[rows].neg_()


def _cell_grads(spec: CellSpec, grads: tuple[Tensor, ...], dtype: torch.dtype) -> list[Tensor]:
    """The gradients of one cell's parameters from those of its flat weights."""
    G, H, D = spec.gates, spec.hidden, spec.inputs
    if spec.stacked:
        # [∂W_h | ∂W_x] per gate, one cat: (G, H, H + D)
        g = torch.cat([grads[1].view(G, H, H), grads[0].view(G, H, D)], dim=2).to(dtype)
        if spec.negated is not None:
            g[spec.negated].neg_()  # g is a fresh tensor
        out = list(g.unbind(0))
    else:
        out = [grads[0].to(dtype), grads[1].to(dtype)]
    if not spec.bias:
        return out
    g_b = grads[2].view(G, H)
    if spec.negated is not None:
        sign = torch.ones(G, 1, dtype=g_b.dtype, device=g_b.device)
        sign[spec.negated] = -1
        g_b = g_b * sign  # out of place: grads[2] is autograd's
    out.extend(g_b.to(dtype).unbind(0))
    if spec.n_block_bias:
        out.append(grads[3].view(G, H)[G - 1].to(dtype))
    return out


def packed_flat_weights(cells: list[nn.Module], layout: Layout, dtype: torch.dtype) -> list[Tensor]:
    """torch's flat weight list for ``cells`` as views of one ``dtype`` buffer in ``layout``;
    gradients flow back to the cells' parameters."""
    params: list[Tensor] = []
    specs = []
    for cell in cells:
        p, spec = cell_params(cell)
        params.extend(p)
        specs.append(spec)
    return list(PackWeights.apply(tuple(specs), layout, dtype, *params))


def layout_shapes(cells: list[nn.Module]) -> list[tuple[int, ...]]:
    """torch's flat weight shapes for ``cells`` (layer-major, then direction)."""
    return [s for cell in cells for s in cell_params(cell)[1].shapes]
