"""Numeric precision of a run: pick it per device, enter autocast, scale fp16 gradients.

``precision="auto"`` (DESIGN §7, USER-NEEDS §12):

| device | auto gives |
|---|---|
| CPU whose ``/proc/cpuinfo`` flags include ``amx_bf16`` or ``avx512_bf16`` | ``bf16`` |
| other CPUs | ``fp32`` |
| CUDA GPU with ``torch.cuda.is_bf16_supported()`` (Ampere and newer) | ``bf16`` |
| other CUDA GPUs, MPS, anything else | ``fp32`` (``fp16`` + GradScaler only when forced) |

``fp32|bf16|fp16`` force a precision. ``fp16`` on CPU is refused (CPU fp16 autocast is
slow and unscaled); ``bf16`` forced on a CPU without fast bf16 runs, just slowly.

On a CPU device nothing in ``torch.cuda`` is called. On a CUDA device
``torch.cuda.is_available()`` is asked first and ``is_bf16_supported()`` only after it
said yes (karpathy/nanoGPT#293 crashed calling the latter without a GPU).

Contract with the caller: autocast runs matmuls and convolutions in the low precision;
the caller computes softmax / log-softmax, the loss and normalisation statistics in fp32,
e.g. ``F.cross_entropy(logits.float(), y)`` — ``tests/train/test_precision.py`` checks
that matmul outputs are bf16 and such a loss is fp32.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, get_args

import torch

from seqlab.errors import SeqlabError

Precision = Literal["auto", "fp32", "bf16", "fp16"]
ResolvedPrecision = Literal["fp32", "bf16", "fp16"]

FAST_BF16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class PrecisionError(SeqlabError, ValueError):
    """A precision the device cannot run (fp16 on CPU, bf16 on an old GPU, no CUDA)."""


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The ``flags`` of the first CPU in the text of ``/proc/cpuinfo`` (empty if none)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def read_cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """CPU feature flags of this machine; empty where ``/proc/cpuinfo`` is unreadable."""
    try:
        return parse_cpu_flags(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return frozenset()


def cpu_has_fast_bf16(flags: Iterable[str]) -> bool:
    """True when the flags name a bf16 dot-product unit (AVX512-BF16 or AMX-BF16)."""
    return not FAST_BF16_CPU_FLAGS.isdisjoint(flags)


def _device_type(device: str | torch.device) -> str:
    try:
        return torch.device(device).type
    except (RuntimeError, TypeError) as exc:
        raise PrecisionError(f"unknown device {device!r}: {exc}") from None


def resolve_precision(
    precision: Precision,
    device: str | torch.device,
    cpu_flags: Iterable[str] | None = None,
) -> ResolvedPrecision:
    """Turn ``auto`` into a concrete precision for ``device`` and check forced ones.

    ``cpu_flags`` overrides the flags read from ``/proc/cpuinfo`` (for tests).
    """
    if precision not in get_args(Precision):
        raise PrecisionError(
            f"precision must be one of {', '.join(get_args(Precision))}, got {precision!r}"
        )
    kind = _device_type(device)
    if kind == "cpu":
        if precision == "fp16":
            raise PrecisionError(
                "precision=fp16 is not supported on CPU (slow, and there is no loss scaling "
                "there); use precision=bf16 (fast on CPUs with avx512_bf16/amx_bf16) or fp32"
            )
        if precision == "auto":
            flags = read_cpu_flags() if cpu_flags is None else frozenset(cpu_flags)
            return "bf16" if cpu_has_fast_bf16(flags) else "fp32"
        return precision
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise PrecisionError(
                f"device {device!s} asks for CUDA but torch.cuda.is_available() is False; "
                "use device=cpu (or install a CUDA build of torch)"
            )
        if precision == "auto":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise PrecisionError(
                "precision=bf16 needs a GPU with bf16 support (Ampere or newer); "
                "use precision=fp16 (with loss scaling) or fp32"
            )
        return precision
    # MPS and other backends: fp32 unless forced.
    return "fp32" if precision == "auto" else precision


def autocast_context(
    precision: Precision, device: str | torch.device
) -> contextlib.AbstractContextManager:
    """``torch.autocast`` in bf16/fp16 for the device, ``nullcontext()`` for fp32."""
    resolved = resolve_precision(precision, device)
    if resolved == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=_device_type(device), dtype=_DTYPES[resolved])


def make_grad_scaler(precision: Precision, device: str | torch.device) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for fp16 (bf16 and fp32 need no loss scaling).

    A disabled scaler is a pass-through (``scale(loss)`` returns ``loss``, ``step(opt)``
    calls ``opt.step()``), so the training loop is the same code for every precision. Its
    ``state_dict()`` (scale and growth tracker) belongs in the checkpoint.
    """
    resolved = resolve_precision(precision, device)
    kind = _device_type(device)
    return torch.amp.GradScaler(kind, enabled=resolved == "fp16")
