"""A larger oneDNN kernel cache for the process (docs/perf-notes-amx.md §46).

On a CPU with bf16 instructions, PyTorch sends bf16 matrix products to oneDNN, which
JIT-compiles a kernel for every new problem shape and keeps it in a cache of at most
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` entries, 1,024 by default, evicting the least recently
used. Building one costs 1–25 ms (an (M × 8000)·(8000 × 256) product: 24.5 ms new against
3 ms cached, perf-notes-amx.md §44). A run whose products take more distinct shapes than the
cache holds rebuilds them for ever: a packed LSTM runs one product per time step on the rows
still running, so M takes nearly every value up to the batch size, and the RNN seq2seq
presets in bf16 saw 1,800+ distinct shapes and ~500 rebuilds every 50 updates (5–7 % of the
run) at the default size.

``enlarge_kernel_cache()`` sets the variable to ``CAPACITY`` (4,096) for this process
unless the user has set it. oneDNN reads it once, when it builds its first primitive, so it
must run before the first bf16 product: ``seqlab`` commands call it first thing, and the
Trainer and ``seqlab.load`` call it too (too late only if the process already ran one).
Memory can go either way (§46): a cached kernel holds its code and buffers, but building
one also leaves memory behind, so peak RSS fell 0.4 GB on an RNN preset that now rebuilds
less, and rose 0.9 GB on a Transformer without row buckets that kept 2,900 kernels.
Set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` yourself (1024 restores oneDNN's default) to choose.
"""

from __future__ import annotations

import os

VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
CAPACITY = 4096


def enlarge_kernel_cache(capacity: int = CAPACITY) -> bool:
    """Set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` to ``capacity`` unless already set.

    Returns True when this call set it, False when the environment already had a value
    (the user's, or an earlier call's), which is left as it is.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 (0 turns the cache off), got {capacity}")
    if os.environ.get(VARIABLE, "").strip():
        return False
    os.environ[VARIABLE] = str(capacity)
    return True
