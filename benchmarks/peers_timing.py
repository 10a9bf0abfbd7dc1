"""Round-robin timing, the matmul peak and peak memory for ``benchmarks/peers.py``.

Method (../shared/docs/PEERS.md): every variant of a comparison lives in one process and is
timed round-robin — repetition r of every variant runs before repetition r + 1 of any —
so drift of the machine hits all of them alike; warm-up repetitions run first, one variant
after the other, and are not timed. A repetition returns its amount of work (tokens,
sentences, FLOPs); the result is the median of the per-repetition rates and the
coefficient of variation cv = stdev / mean of the repetition times.

On a CUDA device every repetition is bracketed by ``torch.cuda.synchronize`` (kernels run
asynchronously: without it the clock would stop when the last kernel is *queued*), and the
warm-up also records the peak GPU memory allocated (``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab.inspect.measure import peak_rss_mib, reset_peak_rss

Rep = Callable[[], float]  # runs one repetition, returns its amount of work


@dataclass
class Timing:
    """Repetition times (s) and work of one variant, and the peak memory of its warm-up.

    rss_mib: process peak RSS during the warm-up (everything loaded so far included);
    rss_delta_mib: that peak minus the resident size when the warm-up started;
    gpu_mib / gpu_delta_mib: the same for CUDA memory allocated (NaN on a CPU).
    """

    name: str
    seconds: list[float] = field(default_factory=list)
    work: list[float] = field(default_factory=list)
    rss_mib: float = float("nan")
    rss_delta_mib: float = float("nan")
    gpu_mib: float = float("nan")
    gpu_delta_mib: float = float("nan")

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def rate(self) -> float:
        """Median over repetitions of work / second."""
        return statistics.median(w / s for w, s in zip(self.work, self.seconds))

    @property
    def cv(self) -> float:
        if len(self.seconds) < 2:
            return 0.0
        return statistics.stdev(self.seconds) / statistics.mean(self.seconds)


def current_rss_mib() -> float:
    """Resident set size now (``VmRSS``), MiB; NaN where /proc is missing."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def peer_autocast(
    precision: str, device: str | torch.device = "cpu"
) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to bf16 on ``device``'s type for ``precision == "bf16"``, else
    nothing: how a user of a peer library asks for mixed precision."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(device: str | torch.device) -> None:
    """Wait for the device's queued kernels (a no-op on a CPU)."""
    if is_cuda(device):
        torch.cuda.synchronize(device)


def round_robin(
    variants: dict[str, Rep],
    reps: int,
    warmup: int = 1,
    log: Callable[[str], None] = lambda line: None,
    device: str | torch.device = "cpu",
) -> dict[str, Timing]:
    """Warm each variant up (peak RSS, and on CUDA peak GPU memory, recorded), then time
    ``reps`` rounds round-robin."""
    out = {name: Timing(name) for name in variants}
    cuda = is_cuda(device)
    for name, run in variants.items():
        reset_peak_rss()
        base = current_rss_mib()
        if cuda:
            synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            gpu_base = torch.cuda.memory_allocated(device) / 2**20
        for _ in range(warmup):
            run()
        synchronize(device)
        out[name].rss_mib = peak_rss_mib()
        out[name].rss_delta_mib = out[name].rss_mib - base
        if cuda:
            out[name].gpu_mib = torch.cuda.max_memory_allocated(device) / 2**20
            out[name].gpu_delta_mib = out[name].gpu_mib - gpu_base
    for r in range(reps):
        for name, run in variants.items():
            synchronize(device)
            t0 = time.perf_counter()
            work = run()
            synchronize(device)
            out[name].seconds.append(time.perf_counter() - t0)
            out[name].work.append(float(work))
        log(
            f"  rep {r + 1}/{reps}: "
            + ", ".join(f"{n} {t.seconds[-1]:.2f}s" for n, t in out.items())
        )
    return out


def matmul_rep(n: int, dtype: torch.dtype, inner: int, device: str | torch.device = "cpu") -> Rep:
    """One repetition of ``inner`` (n × n) @ (n × n) products in ``dtype``; work = FLOPs."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device, dtype)
    b = torch.randn(n, n, generator=g).to(device, dtype)
    c = torch.empty(n, n, dtype=dtype, device=device)

    def run() -> float:
        for _ in range(inner):
            torch.matmul(a, b, out=c)
        return 2.0 * n**3 * inner

    return run


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_peak(
    n: int = 2048,
    reps: int = 5,
    inner: int = 4,
    log: Callable[[str], None] = lambda s: None,
    precisions: tuple[str, ...] = ("fp32", "bf16"),
    device: str | torch.device = "cpu",
) -> dict[str, Timing]:
    """GEMM FLOP/s of this process per precision (the MFU denominators), round-robin.

    Only the ``precisions`` asked for: on a CPU without bf16 instructions (AVX2 only) a
    2048² bf16 matmul runs ~100x slower than fp32 and the bf16 peak alone takes minutes.
    fp32 on CUDA is true fp32 (PyTorch's default ``allow_tf32 = False`` for matmuls).
    """
    variants = {p: matmul_rep(n, DTYPES[p], inner, device) for p in precisions}
    return round_robin(variants, reps, warmup=1, log=log, device=device)
