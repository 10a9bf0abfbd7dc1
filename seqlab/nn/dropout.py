"""Inverted dropout with a cheaper random mask (Srivastava et al. 2014).

    y = x ⊙ m / (1 − p),   m_i ~ Bernoulli(1 − p) independently      (training)
    y = x                                                             (evaluation)

On CPUs, drawing one random number per element dominates ``nn.Dropout``: for the
activations of a small Transformer it cost a quarter of a training step here. This layer
draws one 64-bit random integer per **four** elements and compares each 16-bit slice with
a threshold, so the mask costs a quarter of the random draws.

Deviations: p is rounded to a multiple of 2⁻¹⁶ (p = 0.1 becomes 6554/65536 =
0.100006…); the rescaling uses that same rounded keep probability, so E[y] = x exactly.
Masks come from the torch generator like ``nn.Dropout``'s (seeded runs and exact resume
are unaffected) but are a different stream, so the two never draw the same mask. On CUDA
the random draws are cheap and ``F.dropout`` is used.

For the backward only the bool mask is kept (1 byte an element, as ``nn.Dropout``): the
product x ⊙ m would make autograd save m in x's dtype, 4 bytes an element in float32,
~40 MiB more at the peak of a small Transformer's bf16 training step
(docs/perf-notes-measured.md §27).

Shapes:
    x: any shape, any float dtype -> same shape and dtype
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # 16-bit uniform integers: p is a multiple of 1/65536


def quantised_drop_probability(p: float) -> float:
    """The p actually used: round(p · 2¹⁶) / 2¹⁶."""
    return round(p * LEVELS) / LEVELS


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """Bool mask with P(keep) = 1 − quantised p, from 16-bit slices of 64-bit draws.

    Shapes: returns ``shape`` bool.
    """
    n = shape.numel()
    words = torch.randint(
        -(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=device
    )  # (⌈n/4⌉,)
    r = words.view(torch.int16)[:n].view(shape)  # uniform over [−2¹⁵, 2¹⁵)
    threshold = -(LEVELS // 2) + round(p * LEVELS)  # P(r < threshold) = quantised p
    return r >= threshold


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Functional form of :class:`Dropout`."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    q = quantised_drop_probability(p)
    if q == 0.0:
        return x
    m = keep_mask(x.shape, p, x.device)  # (…) bool
    return MaskScale.apply(x, m, 1.0 / (1.0 - q))


class MaskScale(torch.autograd.Function):
    """y = x ⊙ m · s, saving only the bool mask m for the backward, ∂L/∂x = ∂L/∂y ⊙ m · s.

    The mask enters each product as 0/1 in x's dtype, converted from its bytes viewed as
    uint8: on CPU that conversion is vectorised and ~6× faster than bool's (and products
    with a bool operand are slower still). Both ways the scaled tensor is multiplied by the
    mask in place, (x · s) · m and (g · s) · m: no second temporary at the peak. As m ∈
    {0, 1}, (x · s) · m = (x · m) · s exactly, so values and gradients are bit-identical to
    ``x * m.to(x.dtype) * s`` and its autograd backward (tested).

    Shapes: x (…) float, keep (…) bool, scale a float -> (…) x's dtype
    """

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(scale).mul_(keep.view(torch.uint8).to(x.dtype))  # one new tensor

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(ctx.scale).mul_(keep.view(torch.uint8).to(grad.dtype)), None, None


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` with a 4× cheaper mask on CPU (see module docstring)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
