"""PackWeights (seqlab/nn/recurrent_packed.py): the cells' parameters written into one buffer
equal torch's flat weight list assembled with differentiable ops (cells.py ``to_torch_params``),
values and gradients, in any layout; the fused kernel computes the same on either. The GPU
side (cuDNN's layout, no per-call copy, autocast's fp16) is in tests/test_cuda.py."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

from seqlab.nn.recurrent import Recurrent
from seqlab.nn.recurrent_fused import flat_weights_of, fused_forward
from seqlab.nn.recurrent_packed import (
    Layout,
    PackWeights,
    cell_params,
    contiguous_layout,
    layout_shapes,
    packed_flat_weights,
)

KINDS = [("lstm", {}), ("gru", {}), ("rnn", {"nonlinearity": "tanh"})]


def make(kind: str, bias: bool = True, dtype=torch.float64, **kw) -> Recurrent:
    torch.manual_seed(0)
    m = Recurrent(kind, 3, 4, num_layers=2, bidirectional=True, bias=bias, **kw)
    return m.to(dtype)


def gapped_layout(shapes: list[tuple[int, ...]]) -> Layout:
    """Every weight after a gap of 5 elements and in reverse order: a layout unlike the
    contiguous one, as cuDNN's may be (alignment)."""
    offsets, at = [0] * len(shapes), 7
    for i in reversed(range(len(shapes))):
        offsets[i] = at
        at += int(torch.Size(shapes[i]).numel()) + 5
    return Layout(tuple(offsets), tuple(shapes), at)


def grads_of(m: Recurrent, flat: list[torch.Tensor]) -> list[torch.Tensor]:
    m.zero_grad()
    g = torch.Generator().manual_seed(1)
    loss = sum(
        (w.double() * torch.randn(w.shape, generator=g, dtype=torch.float64)).sum() for w in flat
    )
    loss.backward()
    return [p.grad.clone() for p in m.parameters()]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind,kw", KINDS)
@pytest.mark.parametrize("layout_of", [contiguous_layout, gapped_layout])
def test_packed_equals_assembled_values_and_gradients(kind, kw, bias, layout_of):
    m = make(kind, bias, **kw)
    cells = list(m.cells)
    ref = flat_weights_of(cells)
    packed = packed_flat_weights(cells, layout_of(layout_shapes(cells)), torch.float64)
    assert len(packed) == len(ref)
    for a, b in zip(packed, ref, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)
    assert len({w.untyped_storage().data_ptr() for w in packed}) == 1  # one buffer
    for a, b in zip(grads_of(m, packed), grads_of(m, ref), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind,kw", KINDS)
def test_packed_in_lower_precision_is_the_cast_and_gradients_come_back_in_fp32(kind, kw):
    m = make(kind, dtype=torch.float32, **kw)
    cells = list(m.cells)
    ref = flat_weights_of(cells)
    packed = packed_flat_weights(cells, contiguous_layout(layout_shapes(cells)), torch.float16)
    for a, b in zip(packed, ref, strict=True):
        assert a.dtype == torch.float16 and torch.equal(a, b.half())
    grads_p = grads_of(m, packed)
    grads_r = grads_of(m, [w.half() for w in ref])  # autocast's casts, then the same backward
    for a, b in zip(grads_p, grads_r, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)


@pytest.mark.parametrize("kind,kw", KINDS)
def test_pack_weights_gradcheck(kind, kw):
    m = make(kind, **kw)
    cells = list(m.cells)
    specs, params = [], []
    for cell in cells:
        p, spec = cell_params(cell)
        specs.append(spec)
        params.extend(p)
    layout = gapped_layout(layout_shapes(cells))
    leaves = [p.detach().clone().requires_grad_() for p in params]
    assert gradcheck(
        lambda *ps: PackWeights.apply(tuple(specs), layout, torch.float64, *ps), leaves
    )


@pytest.mark.parametrize("kind,kw", KINDS)
def test_fused_kernel_on_packed_weights_equals_on_assembled(kind, kw):
    m = make(kind, **kw)
    cells = list(m.cells)
    x = torch.randn(3, 5, 3, dtype=torch.float64, requires_grad=True)  # (B, T, D)
    lengths = torch.tensor([5, 2, 4])
    state0 = m._initial_state(x, None)
    results = []
    for flat in (
        lambda: flat_weights_of(cells),
        lambda: packed_flat_weights(cells, gapped_layout(layout_shapes(cells)), torch.float64),
    ):
        m.zero_grad()
        x.grad = None
        out, _ = fused_forward(m.mode, x, lengths, state0, flat(), True, 2, True, 0.0, True)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        results.append([out.detach(), x.grad.clone(), *(p.grad.clone() for p in m.parameters())])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_cpu_keeps_the_assembled_path_and_reset_before_gru_is_refused():
    m = make("lstm", dtype=torch.float32)
    x = torch.randn(2, 3, 3)
    weights, x_k, state_k = m._kernel_inputs(x, m._initial_state(x, None))
    assert x_k is x  # no cast on a CPU
    assert len({w.untyped_storage().data_ptr() for w in weights}) > 1  # assembled, not packed
    with pytest.raises(ValueError, match="reset_after"):
        cell_params(Recurrent("gru", 3, 4, reset_after=False).cells[0])
