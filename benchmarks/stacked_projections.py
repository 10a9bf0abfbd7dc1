"""Self-attention's q, k, v as one product by the stacked weights against three products
(``seqlab.nn.multihead.project_qkv`` / ``separate_projections``; docs/perf-notes-gpu.md §31).

    python benchmarks/stacked_projections.py [--device cpu] [--precision bf16] [--reps 7]

The training step of ``benchmarks/peers.py`` (seqlab's small config, 64 pairs of 14–20
tokens, label smoothing, Adam; ``benchmarks/peers_train.py``'s ``seqlab_trainee``), the two
variants on the same model and batches, ``--steps`` steps per repetition, back to back with
the order rotating (``benchmarks/paired_variants.round_robin``). Printed: ms per step of
each (median), the paired speed-up of stacked over separate (median over repetitions of
separate time / stacked time), and the operator calls per step of each, counted by
``torch.profiler`` over one repetition (on a GPU: also the kernels launched).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_models as pm  # noqa: E402
from benchmarks import peers_train as ptrain  # noqa: E402
from benchmarks.paired_variants import round_robin  # noqa: E402
from benchmarks.peers_timing import is_cuda, synchronize  # noqa: E402
from seqlab.nn.multihead import separate_projections  # noqa: E402
from seqlab.train.allocator import keep_freed_memory  # noqa: E402


def variant(name: str, run: Callable[[], int]) -> Callable[[], int]:
    if name == "stacked":
        return run

    def separate() -> int:
        with separate_projections():
            return run()

    return separate


def counts(run: Callable[[], int], steps: int, device: str) -> tuple[float, float]:
    """Operator calls and kernels (GPU) per step over one repetition."""
    cuda = is_cuda(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        run()
        synchronize(device)
    calls = sum(e.count for e in prof.key_averages()) / steps
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA") / steps
    return calls, kernels


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.add_argument("--steps", type=int, default=4, help="training steps per repetition")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as benchmarks/peers.py and the Trainer run
    size = pm.TINY if args.tiny else pm.SMALL
    torch.manual_seed(0)
    batches = [b.to(args.device) for b in pm.make_batches(args.steps, size, 64)]
    trainee = ptrain.seqlab_trainee(size, args.device)
    rep = ptrain.train_rep(trainee, batches, args.precision)
    runs = {v: variant(v, rep) for v in ("separate", "stacked")}
    times = round_robin(runs, args.reps, args.device)
    ms = {v: 1000 * statistics.median(t) / args.steps for v, t in times.items()}
    speed = statistics.median(a / b for a, b in zip(times["separate"], times["stacked"]))
    ops = {v: counts(run, args.steps, args.device) for v, run in runs.items()}
    what = f"{args.device}, {args.precision}, {size.name} config"
    print(f"{what}, {args.steps} steps x {args.reps} reps")
    print("| variant | ms / step | operator calls / step | kernels / step |")
    print("|---|---:|---:|---:|")
    for v in runs:
        print(f"| {v} | {ms[v]:.2f} | {ops[v][0]:,.0f} | {ops[v][1]:,.0f} |")
    print(f"stacked vs separate (paired): {speed:.3f}x")
    return {"ms": ms, "speed": speed, "ops": ops}


if __name__ == "__main__":
    main()
