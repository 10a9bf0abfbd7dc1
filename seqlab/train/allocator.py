"""Keep freed tensor memory in the process instead of returning it to the kernel.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves every request of
more than its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and gives it back with
``munmap`` when freed, so a training step that makes the same large temporaries every time
— the (N, V) logits and their gradient for V = 8,000 and N ≈ 4,000 target tokens are 60 MiB
each in bf16 — page-faults through them afresh on every step. On the 2-core machine of
docs/results.md that was ~230,000 minor page faults and ~0.6 s of kernel time per
Multi30k Transformer step (about 35% of it).

``keep_freed_memory()`` asks glibc (``mallopt``) to serve large blocks from the heap too
(M_MMAP_MAX = 0) and not to trim the heap top (M_TRIM_THRESHOLD), so the second step
reuses the first step's pages: ~16,000 faults per step. The resident size then stays at the
peak of the run, which it reaches anyway. It is the in-process form of the usual advice
to run PyTorch on CPU with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=…`` or jemalloc.

Only glibc on Linux has ``mallopt``; elsewhere (macOS, musl, Windows) this does nothing and
says so. Set ``SEQLAB_MALLOC=default`` in the environment to leave the allocator alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_MAX = -4
_TRIM_BYTES = 2**31 - 1  # mallopt takes an int: never trim below ~2 GiB of free heap top

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tune glibc malloc once per process (see module doc); True when it took effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("SEQLAB_MALLOC", "").lower() == "default" or not sys.platform.startswith(
        "linux"
    ):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, _TRIM_BYTES))
    return _applied
