"""The environment a run ran in, written into every run directory (USER-NEEDS §7, §13).

``environment_fingerprint(seed)`` returns a JSON-ready dict: library versions, platform,
CPU model and the CPU flags that decide precision, torch threads, the CUDA device (only
if ``torch.cuda.is_available()``), the git commit of the working directory (None where
there is no git), the seed and the time. Two runs that disagree can be compared field by
field before anyone looks at the code.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

import seqlab
from seqlab.train.precision import read_cpu_flags

RELEVANT_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma")
PACKAGES = ("numpy", "sentencepiece", "sacrebleu", "safetensors")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's marketing name (``model name`` in /proc/cpuinfo), else platform's guess."""
    try:
        for line in Path(cpuinfo_path).read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state(workdir: str | Path | None = None) -> dict[str, Any]:
    """``{"commit": sha | None, "dirty": bool | None}`` of the git checkout at ``workdir``."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _cuda() -> dict[str, Any] | None:
    if not torch.cuda.is_available():
        return None
    devices = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        devices.append({"name": torch.cuda.get_device_name(i), "capability": f"{major}.{minor}"})
    return {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "devices": devices}


def gpu_description() -> str:
    """The GPUs for the machine lines of benchmark reports, e.g. ", 1 × NVIDIA H200
    (sm 9.0), CUDA 13.0, cuDNN 91900"; "" where no CUDA device is visible."""
    info = _cuda()
    if not info or not info["devices"]:
        return ""
    kinds = sorted({f"{d['name']} (sm {d['capability']})" for d in info["devices"]})
    return (
        f", {len(info['devices'])} × {' / '.join(kinds)}, CUDA {info['cuda']}, "
        f"cuDNN {info['cudnn']}"
    )


def environment_fingerprint(seed: int | None, workdir: str | Path | None = None) -> dict[str, Any]:
    """Versions, device, threads, git commit, seed and time of this process (JSON-ready)."""
    flags = read_cpu_flags()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "seed": seed,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            "python": platform.python_version(),
            "seqlab": seqlab.__version__,
            "torch": torch.__version__,
            **{p: _version(p) for p in PACKAGES},
        },
        "platform": platform.platform(),
        "python_executable": sys.executable,
        "cpu": {
            "model": cpu_model(),
            "count": os.cpu_count(),
            "usable": affinity,
            "flags": {f: f in flags for f in RELEVANT_CPU_FLAGS},
        },
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda": _cuda(),
        "git": git_state(workdir),
    }
