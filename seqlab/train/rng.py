"""Every random number generator a run uses: seed them from one seed, capture and restore them.

The generators are Python's ``random``, NumPy's global ``np.random`` (when NumPy is
importable), torch's CPU generator and — only when ``torch.cuda.is_available()`` — one
torch generator per CUDA device. CUDA is never initialised or queried beyond
``is_available()`` on a machine without it.

A captured state is split the way a checkpoint stores it (DESIGN §7): a JSON part
(Python's Mersenne-Twister words, NumPy's state) and a tensor part (torch's generator
states, ``uint8`` tensors) that goes into ``tensors.safetensors``.

    state = capture_rng_state()
    x = random.random()
    restore_rng_state(state)
    assert random.random() == x
"""

from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

try:  # NumPy is a dependency, but the RNG code must not break where it is missing.
    import numpy as np
except ImportError:  # pragma: no cover - exercised only without NumPy
    np = None  # type: ignore[assignment]

TORCH_CPU_KEY = "torch_cpu"
CUDA_KEY_PREFIX = "torch_cuda."


@dataclass
class RngState:
    """A snapshot of every generator.

    ``json``: ``{"python": {"version", "words", "gauss_next"}, "numpy": {"bit_generator",
    "key", "pos", "has_gauss", "gauss"} | None, "cuda_devices": n}`` where ``words`` and
    ``key`` are the 32-bit Mersenne-Twister words as one hex string (8 digits per word,
    so meta.json stays readable); ``tensors``: ``{"torch_cpu": uint8 (5056,),
    "torch_cuda.0": ...}``.
    """

    json: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, Tensor] = field(default_factory=dict)


def _to_hex(words) -> str:
    return "".join(f"{int(w):08x}" for w in words)


def _from_hex(text: str) -> list[int]:
    return [int(text[i : i + 8], 16) for i in range(0, len(text), 8)]


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def capture_rng_state() -> RngState:
    """Snapshot Python, NumPy, torch CPU and (if available) every CUDA generator."""
    version, words, gauss_next = random.getstate()
    data: dict[str, Any] = {
        "python": {"version": version, "words": _to_hex(words), "gauss_next": gauss_next},
        "numpy": None,
    }
    if np is not None:
        st = np.random.get_state(legacy=False)
        data["numpy"] = {
            "bit_generator": st["bit_generator"],
            "key": _to_hex(st["state"]["key"]),
            "pos": int(st["state"]["pos"]),
            "has_gauss": int(st["has_gauss"]),
            "gauss": float(st["gauss"]),
        }
    tensors = {TORCH_CPU_KEY: torch.get_rng_state()}
    n_cuda = 0
    if _cuda_available():
        cuda_states = torch.cuda.get_rng_state_all()
        n_cuda = len(cuda_states)
        for i, s in enumerate(cuda_states):
            tensors[f"{CUDA_KEY_PREFIX}{i}"] = s.cpu()
    data["cuda_devices"] = n_cuda
    return RngState(json=data, tensors=tensors)


def restore_rng_state(state: RngState) -> None:
    """Put every generator back where :func:`capture_rng_state` found it.

    A state captured on a CUDA machine restores its CPU generators anywhere; its CUDA
    states are skipped with a warning when CUDA is absent (or fewer devices are visible).
    """
    py = state.json.get("python")
    if py is not None:
        random.setstate((py["version"], tuple(_from_hex(py["words"])), py["gauss_next"]))
    npst = state.json.get("numpy")
    if npst is not None and np is not None:
        np.random.set_state(
            {
                "bit_generator": npst["bit_generator"],
                "state": {"key": np.asarray(_from_hex(npst["key"]), np.uint32), "pos": npst["pos"]},
                "has_gauss": npst["has_gauss"],
                "gauss": npst["gauss"],
            }
        )
    if TORCH_CPU_KEY in state.tensors:
        torch.set_rng_state(state.tensors[TORCH_CPU_KEY].to("cpu", torch.uint8))
    cuda = sorted(
        (int(k[len(CUDA_KEY_PREFIX) :]), v)
        for k, v in state.tensors.items()
        if k.startswith(CUDA_KEY_PREFIX)
    )
    if not cuda:
        return
    visible = torch.cuda.device_count() if _cuda_available() else 0
    if visible < len(cuda):
        warnings.warn(
            f"the RNG state holds {len(cuda)} CUDA generator(s) but {visible} CUDA device(s) "
            "are visible; the missing ones are not restored, so dropout on them will differ "
            "from the saved run",
            stacklevel=2,
        )
    for i, s in cuda[:visible]:
        torch.cuda.set_rng_state(s.to("cpu", torch.uint8), device=i)


def seed_everything(seed: int, deterministic: bool = False, warn_only: bool = False) -> None:
    """Seed Python, NumPy, torch (CPU and, lazily, CUDA) from one ``seed``.

    ``deterministic=True`` also asks for reproducible kernels:
    ``torch.use_deterministic_algorithms(True, warn_only=warn_only)`` — an operation with
    no deterministic implementation then raises (or, with ``warn_only=True``, warns and
    runs anyway) — plus ``cudnn.deterministic=True``, ``cudnn.benchmark=False`` and
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (required by deterministic cuBLAS; set only if the
    environment does not set it). ``deterministic=False`` switches these back off, so the
    call fully describes the process's setting. ``PYTHONHASHSEED`` cannot be changed from
    inside a running interpreter; seqlab never iterates over sets where order matters.

    ``torch.manual_seed`` seeds CUDA lazily: it does not initialise CUDA.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    random.seed(seed)
    if np is not None:
        np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = False
