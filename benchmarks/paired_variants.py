"""Variants of one workload timed against each other in one process: decoding (shared by
``benchmarks/decode_tree_cache.py``, ``benchmarks/decode_beam_step.py``,
``benchmarks/decode_packed.py`` and ``benchmarks/stacked_projections.py --decode``) and the
peers' training step (``benchmarks/stacked_projections.py``, ``benchmarks/step_levers.py``).

Each variant runs once untimed (warm-up, and any compile), then ``reps`` rounds of every
variant back to back, the order rotating each round. A variant's speed-up over the first
is the median over rounds of first time / its time (paired, so slow drift of a shared
machine cancels), and "same" says whether its 1-best tokens equal the first's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from benchmarks import peers_decode as pdec
from benchmarks import peers_models as pm
from benchmarks import peers_train as ptrain
from benchmarks.peers_timing import synchronize
from seqlab.decode.precision import decoding_context
from seqlab.train.allocator import keep_freed_memory


def decode_workload(
    size: pm.Size, sentences: int, batch: int, threads: int, device: str = "cpu"
) -> tuple[nn.Module, list]:
    """``benchmarks/peers.py``'s decoding workload: its random-weight seqlab model of
    ``size`` (seed 0, eval mode) and ``sentences`` sources in padded batches of ``batch``,
    both on ``device``; torch's threads set and freed memory kept, as peers.py runs.
    -> (model, [(src (B, S), src_mask (B, S))])"""
    torch.set_num_threads(threads)
    keep_freed_memory()
    torch.manual_seed(0)
    sources = [s for s, _ in pm.make_pairs(sentences, size, seed=1)]
    batches = pdec.source_batches(sources, batch, device=device)
    return pm.build_seqlab(size)[0].to(device).eval(), batches


def train_workload(
    size: pm.Size, steps: int, precision: str, threads: int, device: str = "cpu"
) -> Callable[[], int]:
    """``benchmarks/peers.py``'s training workload: seqlab's trainee of ``size`` (seed 0)
    and ``steps`` batches of 64 pairs on ``device``; torch's threads set and freed memory
    kept, as peers.py runs.  -> one repetition (a step on every batch; returns the target
    tokens)"""
    torch.set_num_threads(threads)
    keep_freed_memory()
    torch.manual_seed(0)
    batches = [b.to(device) for b in pm.make_batches(steps, size, 64)]
    return ptrain.train_rep(ptrain.seqlab_trainee(size, device), batches, precision)


def one_best(model: nn.Module, batches, beam: int, n_new: int, impl: str, precision: str) -> list:
    """The 1-best tokens of every batch with ``pdec.DECODERS[impl]``, decoding in
    ``precision`` (``seqlab.decode.precision``: autocast, or int8) on the batches' device.
    -> [(B, n_new)]."""
    device = batches[0][0].device
    with torch.no_grad(), decoding_context(precision, device):
        return [pdec.DECODERS[impl](model, s, m, beam, n_new) for s, m in batches]


def round_robin(
    runs: dict[str, Callable[[], object]], reps: int, device: str = "cpu"
) -> dict[str, list[float]]:
    """Seconds per run of each variant over ``reps`` rotating rounds, after one warm-up
    (on a GPU each run is bracketed by synchronisation)."""
    for run in runs.values():
        run()  # warm-up (and, compiled, the compiles)
    names = list(runs)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            synchronize(device)
            t0 = time.perf_counter()
            runs[n]()
            synchronize(device)
            times[n].append(time.perf_counter() - t0)
    return times


@dataclass(frozen=True)
class Versus:
    """One variant against the first: median ms per step, paired speed-up, same 1-best."""

    ms: float
    speed: float
    same: bool


def against_first(times: dict[str, list[float]], best: dict[str, list], steps: int) -> dict:
    """``Versus`` for every variant (the first's speed 1.0, same True).  -> {name: Versus}"""
    base = next(iter(times))
    return {
        n: Versus(
            1000 * statistics.median(t) / steps,
            statistics.median(a / b for a, b in zip(times[base], t)),
            all(torch.equal(a, b) for a, b in zip(best[base], best[n], strict=True)),
        )
        for n, t in times.items()
    }


def versus_cells(vs: dict, before: str, after: str) -> str:
    """The table cells of ``after`` against ``before``: their ms per step, the paired
    speed-up and whether the 1-best tokens are the same.  -> "| b ms | a ms | s× | yes |" """
    new = vs[after]
    return (f"| {vs[before].ms:.2f} | {new.ms:.2f} | {new.speed:.3f}× | "
            f"{'yes' if new.same else 'NO'} |")  # fmt: skip
