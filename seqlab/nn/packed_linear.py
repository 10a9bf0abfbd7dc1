"""Linear layers with their bf16 weights pre-packed for oneDNN, while decoding on a CPU.

    y = x Wᵀ + b        (the same function as ``F.linear`` under bf16 autocast)

Under CPU autocast, each ``F.linear`` casts its weight to bf16 once per autocast region,
but oneDNN then reorders that weight into its blocked layout on **every call**. For a
decoder step's narrow products (32 rows, greedy) the reorder is a third of the call:
(32 × 256)·(256 × 256) took 36.5 µs as a bf16 ``F.linear`` and 26.4 µs on a pre-packed
weight, the (8,000 × 256) output layer 483 → 346 µs, with identical outputs
(docs/perf-notes-decoding.md §34). inductor's freezing does the same for the compiled step
(§23); this is the eager form.

``packed_linears(module)`` is entered by ``seqlab.decode``'s greedy and beam searches. It
applies only on a CPU, under bf16 autocast, with grad off, where oneDNN has bf16; then
every ``nn.Linear`` of ``module`` and every ``linear()`` call (``tied_logits``) multiplies by
a packed copy of its weight, made on first use and dropped when the search ends (weights
cannot change while no grad is taken). Elsewhere it does nothing. The packed product
uses ``torch.ops.mkldnn``'s ``_reorder_linear_weight`` / ``_linear_pointwise``, the ops
inductor emits.

Shapes: x (..., in) any float dtype, W (out, in), b (out,) -> (..., out) bf16 when packed,
else what ``F.linear`` gives
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# id(weight) -> (weight, packed weight, bias in bf16 or None); None outside packed_linears
_PACKED: ContextVar[dict[int, tuple[Tensor, Tensor, Tensor | None]] | None] = ContextVar(
    "packed_linear_weights", default=None
)


@functools.lru_cache(maxsize=1)
def _bf16_packing_available() -> bool:
    ops = torch.ops.mkldnn
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(ops, "_reorder_linear_weight")
        and hasattr(ops, "_linear_pointwise")
        and bool(ops._is_mkldnn_bf16_supported())
    )


def packing_applies(module: nn.Module) -> bool:
    """CPU parameters, bf16 CPU autocast on, grad off, and oneDNN with bf16."""
    if torch.is_grad_enabled() or not torch.is_autocast_enabled("cpu"):
        return False
    if torch.get_autocast_dtype("cpu") != torch.bfloat16 or not _bf16_packing_available():
        return False
    p = next(module.parameters(), None)
    return p is not None and p.device.type == "cpu"


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x Wᵀ + b: on a packed weight inside ``packed_linears``, else ``F.linear``.
    (..., in) -> (..., out)"""
    packed = _PACKED.get()
    if packed is None:
        return F.linear(x, weight, bias)
    entry = packed.get(id(weight))
    if entry is None or entry[0] is not weight:
        w16 = weight.detach().to(torch.bfloat16)
        b16 = None if bias is None else bias.detach().to(torch.bfloat16)
        entry = (weight, torch.ops.mkldnn._reorder_linear_weight(w16), b16)
        packed[id(weight)] = entry
    return torch.ops.mkldnn._linear_pointwise(
        x.to(torch.bfloat16), entry[1], entry[2], "none", [], ""
    )  # (..., out) bf16


def _packed_forward(layer: nn.Linear, x: Tensor) -> Tensor:
    return linear(x, layer.weight, layer.bias)


@contextlib.contextmanager
def packed_linears(module: nn.Module) -> Iterator[bool]:
    """Pack ``module``'s linear weights for the duration (module doc); yields whether it
    applies. Not re-entrant: an inner call inside an active one does nothing more."""
    if _PACKED.get() is not None or not isinstance(module, nn.Module):
        yield False
        return
    if not packing_applies(module):
        yield False
        return
    layers = [m for m in module.modules() if type(m) is nn.Linear]
    token = _PACKED.set({})
    for layer in layers:
        layer.forward = functools.partial(_packed_forward, layer)  # type: ignore[method-assign]
    try:
        yield True
    finally:
        for layer in layers:
            del layer.forward
        _PACKED.reset(token)


def with_packed_linears(search):
    """Decorator for a search ``search(decoder, ...)``: runs it inside
    ``packed_linears(decoder)`` (a no-op unless the module doc's conditions hold)."""

    @functools.wraps(search)
    def run(decoder, *args, **kwargs):
        with packed_linears(decoder):
            return search(decoder, *args, **kwargs)

    return run
