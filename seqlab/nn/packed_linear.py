"""Linear layers with their weights pre-packed (bf16 for oneDNN, or int8), while decoding on a CPU.

    y = x Wᵀ + b        (the same function as ``F.linear`` under bf16 autocast)

Under CPU autocast, each ``F.linear`` casts its weight to bf16 once per autocast region,
but oneDNN then reorders that weight into its blocked layout on **every call**. For a
decoder step's narrow products (32 rows, greedy) the reorder is a third of the call:
(32 × 256)·(256 × 256) took 36.5 µs as a bf16 ``F.linear`` and 26.4 µs on a pre-packed
weight, the (8,000 × 256) output layer 483 → 346 µs, with identical outputs
(docs/perf-notes-decoding.md §34). inductor's freezing does the same for the compiled step
(§23); this is the eager form.

``packed_linears(module)`` is entered by ``seqlab.decode``'s greedy and beam searches. It
applies only on a CPU, under bf16 autocast, with grad off, where oneDNN has bf16. Then
every ``nn.Linear`` of ``module`` (the encoder's too, packed once and unused) and every
``linear()`` call (``tied_logits``) multiplies by a packed copy of its weight. The copy is
made on first use and kept for later searches until the weight changes (its version) or
dies (``packed_weight``): packing costs 90–280 µs a weight here, more than a short search
saves on a small model. A fused optimizer step (``torch.optim.Adam(fused=True)``) changes
weights without bumping their version: after one, call
``torch.autograd.graph.increment_version`` on them, as ``seqlab.train.steps.apply_update``
does, or a later search decodes with the weights of an earlier one. Elsewhere it does
nothing. The packed product uses
``torch.ops.mkldnn``'s ``_reorder_linear_weight`` / ``_linear_pointwise``, the ops inductor
emits.

Inside ``seqlab.nn.int8_linear.int8_decoding()`` the weights are packed in int8 instead
(that module's equations), on a CPU with grad off for float32 weights, with or without
autocast: the mode ("bf16" or "int8") is decided once when a search enters.

Shapes: x (..., in) any float dtype, W (out, in), b (out,) -> (..., out) bf16 when packed
in bf16, float32 in int8, else what ``F.linear`` gives
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Iterator
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.int8_linear import (
    Int8Weight,
    count_int8_search,
    int8_product,
    int8_requested,
    quantize_weight,
)

# how the current search packs, "bf16" or "int8"; None: it does not (set by packed_linears)
_ACTIVE: ContextVar[str | None] = ContextVar("packed_linear_active", default=None)
# (id(weight), mode) -> (weakref to it, (its version, the bias' id and version), packed,
# bias bf16): packed is the oneDNN bf16 weight, or an Int8Weight (whose bias is in it)
_CACHE: dict[tuple[int, str], tuple[weakref.ref, tuple, Tensor | Int8Weight, Tensor | None]] = {}
# id(layer) -> how many active searches (any thread) use its packed forward; under _LOCK
_USERS: dict[int, int] = {}
_LOCK = threading.Lock()


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
    """bf16 packing: CPU parameters, bf16 CPU autocast on, grad off, oneDNN with bf16."""
    if torch.is_grad_enabled() or not torch.is_autocast_enabled("cpu"):
        return False
    if torch.get_autocast_dtype("cpu") != torch.bfloat16 or not _bf16_packing_available():
        return False
    p = next(module.parameters(), None)
    return p is not None and p.device.type == "cpu"


def int8_packing_applies(module: nn.Module) -> bool:
    """int8 packing: inside ``int8_decoding()``, grad off, float32 CPU parameters."""
    if not int8_requested() or torch.is_grad_enabled():
        return False
    p = next(module.parameters(), None)
    return p is not None and p.device.type == "cpu" and p.dtype == torch.float32


def packing_mode(module: nn.Module) -> str | None:
    """ "int8" where ``int8_packing_applies``, else "bf16" where ``packing_applies``, else
    None (no packing)."""
    if int8_packing_applies(module):
        return "int8"
    return "bf16" if packing_applies(module) else None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x Wᵀ + b: on a packed weight inside ``packed_linears``, else ``F.linear``.
    (..., in) -> (..., out)"""
    # a compiled step is traced, not packed (inductor's freezing packs it), and dynamo
    # cannot trace ContextVar.get: decided before it is read
    mode = None if torch.compiler.is_compiling() else _ACTIVE.get()
    if mode is None:
        return F.linear(x, weight, bias)
    packed, b16 = packed_weight(weight, bias, mode)
    return _product(mode, x, packed, b16)


def packed_weight(
    weight: Tensor, bias: Tensor | None, mode: str = "bf16"
) -> tuple[Tensor | Int8Weight, Tensor | None]:
    """The packed copy of ``weight`` for ``mode``: "bf16", oneDNN's packed bf16 weight and
    the bf16 bias; "int8", an ``Int8Weight`` (its bias inside) and None. Cached for as
    long as the weight lives and neither changes: an in-place update (an optimizer step,
    ``load_state_dict``) bumps a tensor's version, and the next search packs again."""
    key = (weight._version, None if bias is None else (id(bias), bias._version))
    hit = _CACHE.get((id(weight), mode))
    if hit is not None and hit[0]() is weight and hit[1] == key:
        return hit[2], hit[3]
    packed: Tensor | Int8Weight
    if mode == "int8":
        packed, b16 = quantize_weight(weight, bias), None
    else:
        b16 = None if bias is None else bias.detach().to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16))
    if hit is None or hit[0]() is not weight:  # a new weight: forget it when it dies
        weakref.finalize(weight, _CACHE.pop, (id(weight), mode), None)
    _CACHE[(id(weight), mode)] = (weakref.ref(weight), key, packed, b16)
    return packed, b16


def _packed_product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's linear on a packed weight.  x (..., in) bf16 -> (..., out) bf16"""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _product(mode: str, x: Tensor, packed: Tensor | Int8Weight, bias: Tensor | None) -> Tensor:
    """The packed product of ``mode``.  (..., in) -> (..., out) bf16 or float32 (int8)"""
    if mode == "int8":
        return int8_product(x, packed)  # type: ignore[arg-type]
    return _packed_product(x.to(torch.bfloat16), packed, bias)  # type: ignore[arg-type]


def _packed_forward(
    layer: nn.Linear, mode: str, packed: Tensor | Int8Weight, bias: Tensor | None, x: Tensor
) -> Tensor:
    """The layer's forward while some search packs it: packed in a packing search, the
    plain ``F.linear`` for any other caller of the same module (another thread, say)."""
    if _ACTIVE.get() != mode:
        return F.linear(x, layer.weight, layer.bias)
    return _product(mode, x, packed, bias)


@contextlib.contextmanager
def packed_linears(module: nn.Module) -> Iterator[bool]:
    """Pack ``module``'s linear weights for the duration (module doc); yields whether it
    applies. Not re-entrant: an inner call inside an active one does nothing more."""
    if _ACTIVE.get() or not isinstance(module, nn.Module):
        yield False
        return
    mode = packing_mode(module)
    if mode is None:
        yield False
        return
    layers = [m for m in module.modules() if type(m) is nn.Linear]
    with _LOCK:  # searches in several threads may share the module: count its users
        # packed (or found in the cache) once per search, not per call; all before any
        # layer is changed, so a failure leaves the module as it was
        bound = [(layer, packed_weight(layer.weight, layer.bias, mode)) for layer in layers]
        for layer, (packed, b16) in bound:
            forward = functools.partial(_packed_forward, layer, mode, packed, b16)
            layer.forward = forward  # type: ignore[method-assign]
            _USERS[id(layer)] = _USERS.get(id(layer), 0) + 1
    if mode == "int8":
        count_int8_search()
    token = _ACTIVE.set(mode)
    try:
        yield True
    finally:
        with _LOCK:
            for layer in layers:
                _USERS[id(layer)] -= 1
                if not _USERS[id(layer)]:
                    del _USERS[id(layer)], layer.forward
        _ACTIVE.reset(token)


def module_to_pack(decoder: object) -> nn.Module | None:
    """The module whose linear layers a search on ``decoder`` packs: the decoder itself
    when it is a module, or the module that a step wrapper (``seqlab.tasks.
    copy_translation_decode.UnkBlockedDecoder``: ``step`` = the wrapped ``decoder.step``
    and a change of the log-probabilities) keeps as ``.decoder``; else None (a compiled
    step is traced, never packed)."""
    while not isinstance(decoder, nn.Module):
        decoder = getattr(decoder, "decoder", None)
        if decoder is None:
            return None
    return decoder


def with_packed_linears(search):
    """Decorator for a search ``search(decoder, ...)``: runs it inside
    ``packed_linears(module_to_pack(decoder))`` (a no-op unless the module doc's
    conditions hold)."""

    @functools.wraps(search)
    def run(decoder, *args, **kwargs):
        with packed_linears(module_to_pack(decoder)):
            return search(decoder, *args, **kwargs)

    return run
