"""The numeric precision of decoding: ``seqlab translate|evaluate|serve --precision``.

- ``fp32``: everything (the default: the scores the docs report); any device.
- ``bf16``: matmuls under bf16 autocast, and on a CPU the searches' linear layers on packed
  bf16 weights (``seqlab.nn.packed_linear``); CPUs with avx512_bf16 / amx_bf16 (elsewhere
  emulated, slowly) and GPUs with bf16.
- ``fp16``: matmuls under fp16 autocast; CUDA GPUs.
- ``int8``: the searches' linear layers in int8, vector-wise (``seqlab.nn.int8_linear``),
  everything else fp32; CPUs.
- ``auto``: ``bf16`` where the device has fast bf16, else ``fp32`` (``resolve_precision``).

int8 is an option for CPUs without a bf16 unit, where decoding otherwise runs in fp32
(docs/perf-notes-decoding.md §40 measures its speed and BLEU). It quantizes only what greedy
and beam search decode: a split's loss and the encoder stay float32. The compiled
decoder step (``--compile``) is traced in float32 / autocast and takes no int8.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Literal, get_args

import torch

from seqlab.nn.int8_linear import SLOW_INT8, Int8Use, int8_decoding, int8_product_slowdown
from seqlab.train.precision import PrecisionError, autocast_context, resolve_precision

DecodePrecision = Literal["fp32", "bf16", "fp16", "int8", "auto"]
DECODE_PRECISIONS: tuple[str, ...] = get_args(DecodePrecision)


def resolve_decode_precision(precision: str, device: str | torch.device) -> str:
    """``auto`` made concrete and a precision the device cannot decode in refused, with
    what to use instead (``PrecisionError``)."""
    if precision not in DECODE_PRECISIONS:
        raise PrecisionError(
            f"decoding precision must be one of {', '.join(DECODE_PRECISIONS)}, got {precision!r}"
        )
    if precision == "int8":
        kind = torch.device(device).type
        if kind != "cpu":
            raise PrecisionError(
                f"precision int8 decodes on a CPU only (its integer product is "
                f"torch._int_mm's CPU kernel), got device {device!s}: use bf16 or fp16 there"
            )
        return "int8"
    return resolve_precision(precision, device)  # type: ignore[arg-type]


def decoding_context(
    precision: str, device: str | torch.device
) -> contextlib.AbstractContextManager:
    """Enter for decoding in ``precision`` (module doc): autocast for bf16/fp16,
    ``int8_decoding()`` for int8, nothing for fp32."""
    resolved = resolve_decode_precision(precision, device)
    if resolved == "int8":
        return int8_decoding()
    return autocast_context(resolved, device)  # type: ignore[arg-type]


def slow_int8_note() -> str | None:
    """What to tell a user who asked for int8 on a CPU where ``torch._int_mm`` has no fast
    kernel (``int8_product_slowdown`` ≥ ``SLOW_INT8``); None where int8 is not slow."""
    ratio = int8_product_slowdown()
    if ratio < SLOW_INT8:
        return None
    return (
        f"--precision int8 will be slower than fp32 on this CPU: its int8 product "
        f"(torch._int_mm) runs {ratio:.0f}x slower than float32 here (no VNNI or AMX, so no "
        "fast int8 kernel); the results are right, only slow. Use --precision fp32 "
        '(docs/decoding.md, "Precision of decoding")'
    )


def warn_if_int8_is_slow(precision: str) -> None:
    """Print ``slow_int8_note`` as a ``seqlab: warning:`` line when ``precision`` is int8."""
    note = slow_int8_note() if precision == "int8" else None
    if note:
        print(f"seqlab: warning: {note}", file=sys.stderr)


def quantized_nothing(precision: str, entered: object) -> bool:
    """Whether a block entered with ``decoding_context(precision, …)`` (``entered``: what
    entering it gave) asked for int8 but ran no search that packed in int8, so that it
    ran in fp32 (a classifier's or a tagger's evaluation, say)."""
    return precision == "int8" and isinstance(entered, Int8Use) and entered.searches == 0


def refuse_compiled_int8(precision: str, compiled: bool) -> None:
    """``--compile`` with ``--precision int8``: refused, the compiled step has no int8."""
    if compiled and precision == "int8":
        raise PrecisionError(
            "--compile cannot decode in int8: the compiled decoder step is traced in "
            "float32 or under autocast; drop --compile, or use --precision bf16|fp32"
        )
