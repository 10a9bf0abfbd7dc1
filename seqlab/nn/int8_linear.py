"""Linear layers in int8 for decoding on a CPU: vector-wise dynamic quantization.

    s_w[o]    = max_i |W[o, i]| / q_w                 one scale per output unit (once)
    Ŵ[o, i]   = round(W[o, i] / s_w[o])               int8, packed once per weight
    s_x[r]    = max_i |x[r, i]| / 127                 one scale per input row (every call)
    x̂[r, i]   = round(x[r, i] / s_x[r])               int8
    y[r, o]   = s_x[r] · s_w[o] · Σ_i x̂[r, i] Ŵ[o, i] + b[o]

Dettmers, Lewis, Belkada, Zettlemoyer 2022, "LLM.int8()", §3.1: absmax quantization,
"vector-wise" — a scale per row of the inputs and per column of Wᵀ, so that the integer
product Σ_i x̂ Ŵ (exact, in int32: ``torch._int_mm``) is rescaled by the outer product of
the two scale vectors. Every row is quantized on its own, so a row's output does not
depend on the other rows of the batch: batched decoding equals unbatched decoding, which
a per-tensor scale (``torch.ao.quantization.quantize_dynamic``, OpenNMT-py's int8) breaks.
The bias stays float32.

q_w, the weights' largest code, is 127 where ``torch._int_mm`` is exact with full-range
weights on this CPU, else 63 (``weight_q_max``, probed once per process). On x86 CPUs
without VNNI (AVX2, AVX-512 before VNNI) oneDNN multiplies u8 × s8 with ``vpmaddubsw``,
whose 16-bit sums of two products saturate: there a full-range product was off by up to
10⁵ (a (160 × 256)·(256 × 8,000) product under ``ONEDNN_MAX_CPU_ISA=AVX2`` on this
EPYC), and with 7-bit weights it is exact, as PyTorch's ``reduce_range`` does for fbgemm.
With VNNI (``vpdpbusd``) or AMX the int32 sums are exact at 127.

Error: rounding each factor to 255 levels gives ~1 % relative error per product
(tests/nn/test_int8_linear.py bounds it; ~2 % with 7-bit weights), against ~0.4 % for
bf16 and 0 for fp32.

Speed, on the 2-core avx512_vnni EPYC (docs/perf-notes-int8.md §40): the products of a
beam-5 decoder step are 1.6–3.7× faster than fp32 ``F.linear``; tiny ones (32 × 256 →
256) are slower, the per-call quantization of x dominating them. Whole decodes run
1.40–1.45× fp32's speed and 0.82–0.95× bf16's, at −0.16 lc BLEU on Multi30k; with oneDNN,
MKL and ATen limited to AVX2 (7-bit weights) 1.30–1.33× fp32's, −0.04 lc BLEU: an option for
CPUs without a bf16 dot-product unit but with VNNI or AMX. On a real AVX2-only CPU (a Zen 2
EPYC) ``torch._int_mm`` has no fast kernel and int8 decodes ran 0.10–0.18× fp32's speed
(``int8_product_slowdown``; the CLI warns there).

Entered through ``int8_decoding()``: inside it, ``seqlab.nn.packed_linear.packed_linears``
(which greedy and beam search enter) packs every linear layer of the decoder in int8
instead of bf16, on a CPU, with grad off, for float32 weights. Nothing else of the model
changes precision: attention, layer norms and softmaxes run in the weights' float32.

Shapes: x (..., in) float, W (out, in), b (out,) -> (..., out) float32
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import Tensor

# the largest |value| of a symmetric int8 code (−127 … 127; −128 unused): the inputs' q_x
Q_MAX = 127.0
# the weights' q_w where the CPU's int8 product would saturate with Q_MAX (module doc)
Q_MAX_7BIT = 63.0


@dataclass
class Int8Use:
    """What an ``int8_decoding()`` block quantized: ``searches`` that packed in int8."""

    searches: int = 0


# the Int8Use of the int8_decoding() block this context is in; None: not in one
_REQUESTED: ContextVar[Int8Use | None] = ContextVar("int8_decoding", default=None)


@dataclass(frozen=True)
class Int8Weight:
    """A weight packed for ``int8_product``: W_hat (out, in) int8, s_w (out,) float32,
    bias (out,) float32 or None."""

    W_hat: Tensor
    s_w: Tensor
    bias: Tensor | None


@functools.lru_cache(maxsize=1)
def weight_q_max() -> float:
    """q_w: 127 if ``torch._int_mm`` on this CPU is exact for full-range int8 operands, else
    63 (module doc). Probed on products whose int16 pair sums would saturate."""
    full = torch.full((4, 64), 127, dtype=torch.int8)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-127, 128, (16, 256), dtype=torch.int8, generator=g)
    w = torch.randint(-127, 128, (256, 24), dtype=torch.int8, generator=g)
    cases = [(full, full.t()), (-full, full.t()), (x, w)]
    exact = all(torch.equal(torch._int_mm(a, b).long(), a.long() @ b.long()) for a, b in cases)
    return Q_MAX if exact else Q_MAX_7BIT


SLOW_INT8 = 3.0  # int8 product time / float32's from which int8 decoding is a slowdown


@functools.lru_cache(maxsize=1)
def int8_product_slowdown() -> float:
    """How many times longer ``torch._int_mm`` takes than a float32 matmul of the same
    shape here ((64 × 256)·(256 × 1,024), median of 5 alternating calls after a warm-up).
    Without VNNI or AMX, ATen has no fast int8 kernel: on a 2-core Zen 2 EPYC (AVX2) the
    product ran ~20× slower than float32 and whole int8 decodes 0.10–0.18× fp32's speed
    (2026-12-04, benchmarks/export_speed.py); with avx512_vnni it is faster (§40)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-63, 64, (64, 256), dtype=torch.int8, generator=g)
    b = torch.randint(-63, 64, (256, 1024), dtype=torch.int8, generator=g)
    x, w = a.float(), b.float()
    times: dict[str, list[float]] = {"int8": [], "fp32": []}
    for i in range(6):
        for kind, run in (("int8", lambda: torch._int_mm(a, b)), ("fp32", lambda: x @ w)):
            t0 = time.perf_counter()
            run()
            if i:  # the first round warms both up
                times[kind].append(time.perf_counter() - t0)
    return statistics.median(times["int8"]) / max(statistics.median(times["fp32"]), 1e-9)


def quantize_rows(x: Tensor, q_max: float = Q_MAX) -> tuple[Tensor, Tensor]:
    """Absmax quantization of each row: x̂ = round(x / s), s = max_i |x_i| / q_max.
    A row of zeros gets s = 0 and x̂ = 0.  (N, in) float -> ((N, in) int8, (N, 1) float32)"""
    x = x.float()
    # abs + amax: 4–13× faster here than linalg.vector_norm(x, inf) (§40)
    absmax = x.abs().amax(dim=-1, keepdim=True)  # (N, 1)
    s = absmax / q_max  # (N, 1)
    # |x / s| <= q_max by construction; a zero row divides by a tiny s instead of 0
    x_hat = torch.round(x / s.clamp_min(torch.finfo(torch.float32).tiny)).to(torch.int8)
    return x_hat, s


def quantize_weight(weight: Tensor, bias: Tensor | None = None) -> Int8Weight:
    """Ŵ and s_w, one scale per output unit (a row of W), codes within ±q_w
    (``weight_q_max``).  W (out, in), b (out,)"""
    W_hat, s_w = quantize_rows(weight.detach(), weight_q_max())  # (out, in) int8, (out, 1)
    b = None if bias is None else bias.detach().float()
    return Int8Weight(W_hat, s_w.squeeze(1), b)


def int8_product(x: Tensor, w: Int8Weight) -> Tensor:
    """y = s_x s_wᵀ ⊙ (x̂ Ŵᵀ) + b, the integer product exact in int32.
    (..., in) -> (..., out) float32"""
    lead = x.shape[:-1]
    x_hat, s_x = quantize_rows(x.reshape(-1, x.shape[-1]))  # (N, in) int8, (N, 1)
    acc = torch._int_mm(x_hat, w.W_hat.t())  # (N, out) int32, exact
    y = acc * w.s_w  # (N, out) float32
    y = y.mul_(s_x) if w.bias is None else torch.addcmul(w.bias, y, s_x)
    return y.reshape(*lead, w.W_hat.shape[0])  # (..., out), zero rows too


def int8_requested() -> bool:
    """Whether ``int8_decoding()`` is on in this context."""
    return _REQUESTED.get() is not None


def count_int8_search() -> None:
    """Record, in the enclosing ``int8_decoding()``'s ``Int8Use``, a search packed in int8."""
    use = _REQUESTED.get()
    if use is not None:
        use.searches += 1


@contextlib.contextmanager
def int8_decoding() -> Iterator[Int8Use]:
    """Decode with int8 linear layers (module doc): greedy and beam search entered inside
    pack their decoder's linear weights in int8 where that applies (CPU, grad off,
    float32 weights). Yields an ``Int8Use``: a block whose ``searches`` stays 0 quantized
    nothing (no search ran, e.g. a classifier's evaluation)."""
    use = Int8Use()
    token = _REQUESTED.set(use)
    try:
        yield use
    finally:
        _REQUESTED.reset(token)
