"""Padding-free position-wise layers: layers run on the real positions of a padded batch.

A position-wise layer f (the Transformer's FFN, Vaswani et al. 2017 eq. 2; its layer norms,
dropout and residual adds; the linear projections of attention; the output projection
h W_outᵀ) maps each position on its own, f(X)_bt = f(x_bt). In a padded batch with
keep-mask m (B, T), True at real tokens, a padding position's value is never read by a real
one, since attention masks padded keys. So

    f(X)[m] = f(X[m])          N = Σ_bt m_bt rows instead of B·T

and a Transformer stack can carry its residual stream as the N real rows, putting them back
into (B, T) only for attention's core (``seqlab.nn.transformer``, ``MultiHeadAttention``'s
``rows``). On the peers' benchmark batches (64 pairs of 14–20 tokens) 14–16 % of the rows
are padding (docs/perf-notes-training.md §36).

``PaddedRows(m)`` packs with one ``index_select`` over the flattened positions and puts the
rows back with one ``index_copy`` into zeros; both are differentiable (their backward is the
other one). ``PaddedRows.of`` decides where packing pays: a CPU batch with padding. On a GPU
a small step is bound by kernel launches, not FLOPs (perf-notes-gpu.md §35), and packing
adds launches. ``padded_positions()`` turns packing off, for tests and measurements.

Row buckets: under CPU autocast (bf16 training) every GEMM goes to oneDNN, which compiles a
kernel per problem shape and caches it; N, a new number nearly every batch, would make every
GEMM of every step a cache miss (docs/perf-notes-amx.md §44: a step 39 % slower on an AMX
CPU). There ``PaddedRows.of`` packs the first few padding positions too, so that the row
count is ``row_bucket(N)``: N rounded up to a multiple of g = max(8, 2^(⌊log₂ N⌋ − 4)),
at most 1/16 more rows and 16 distinct counts per doubling. The extra rows are computed
and discarded exactly as in the padded path (attention masks padded keys; the loss gives
pad targets 0). fp32 GEMMs (MKL) have no per-shape cost, so without autocast N is exact.

Shapes: keep (B, T) bool; pack (B, T, *F) -> (N, *F); unpack (N, *F) -> (B, T, *F).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

# Device types where packing pays (module doc); a benchmark may add "cuda" to measure it.
PACK_DEVICES = {"cpu"}
# Round the packed row count up under CPU autocast (module doc, "Row buckets").
BUCKET_ROWS = True


@contextlib.contextmanager
def padded_positions() -> Iterator[None]:
    """Inside: position-wise layers run on every position, padding included (no device
    packs)."""
    global PACK_DEVICES
    saved, PACK_DEVICES = PACK_DEVICES, set()
    try:
        yield
    finally:
        PACK_DEVICES = saved


def row_bucket(n: int, total: int) -> int:
    """n rounded up to a multiple of g = max(8, 2^(⌊log₂ n⌋ − 4)), at most ``total``."""
    if n <= 0:
        return 0
    g = max(8, 1 << max(0, n.bit_length() - 5))  # 2^(⌊log₂ n⌋ − 4)
    return min(total, -(-n // g) * g)


@contextlib.contextmanager
def exact_row_counts() -> Iterator[None]:
    """Inside: ``PaddedRows.of`` packs the real positions alone, never a bucket (for tests
    and for measuring what buckets save: ``benchmarks/step_levers.py --lever buckets``)."""
    global BUCKET_ROWS
    saved, BUCKET_ROWS = BUCKET_ROWS, False
    try:
        yield
    finally:
        BUCKET_ROWS = saved


class PaddedRows:
    """The real positions of a padded (B, T) batch (module doc); with ``bucket``, also the
    first padding positions (row-major) that bring the count to ``row_bucket(N)``."""

    def __init__(self, keep: Tensor, bucket: bool = False) -> None:
        if keep.dim() != 2 or keep.dtype != torch.bool:
            raise ValueError(
                f"keep must be a (B, T) bool mask, got {tuple(keep.shape)} {keep.dtype}"
            )
        self.shape = (keep.size(0), keep.size(1))
        flat = keep.reshape(-1)  # (B·T,)
        self.n_real = int(flat.sum())
        extra = row_bucket(self.n_real, flat.numel()) - self.n_real if bucket else 0
        if extra > 0:
            padding = (~flat).nonzero().squeeze(1)[:extra]  # (extra,) first padding positions
            flat = flat.clone().index_fill_(0, padding, True)
        self.index = flat.nonzero().squeeze(1)  # (N,) flat positions, in order
        self.n = self.index.numel()

    @classmethod
    def of(cls, keep: Tensor | None) -> PaddedRows | None:
        """The rows to pack, or None where packing does not pay or cannot be: no mask, a
        batch without padding, a device not in ``PACK_DEVICES`` (the CPU), inside
        ``padded_positions()``, or while torch.compile / torch.export / ONNX export trace
        (N is data-dependent). Under CPU autocast the count is bucketed (module doc)."""
        if keep is None or keep.device.type not in PACK_DEVICES:
            return None
        if keep.dim() != 2 or torch.compiler.is_compiling() or torch.jit.is_tracing():
            return None
        rows = cls(keep, bucket=BUCKET_ROWS and torch.is_autocast_enabled("cpu"))
        return rows if rows.n < keep.numel() else None

    def pack(self, x: Tensor) -> Tensor:
        """(B, T, *F) -> (N, *F): the real positions, row-major."""
        B, T = self.shape
        if tuple(x.shape[:2]) != self.shape:
            raise ValueError(f"expected a ({B}, {T}, ...) tensor, got {tuple(x.shape)}")
        return x.reshape(B * T, *x.shape[2:]).index_select(0, self.index)  # (N, *F)

    def unpack(self, rows: Tensor) -> Tensor:
        """(N, *F) -> (B, T, *F), zeros at the padding positions not packed."""
        B, T = self.shape
        if rows.size(0) != self.n:
            raise ValueError(f"expected {self.n} rows, got {rows.size(0)}")
        out = rows.new_zeros(B * T, *rows.shape[1:])  # (B·T, *F)
        return out.index_copy(0, self.index, rows).view(B, T, *rows.shape[1:])
