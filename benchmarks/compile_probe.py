"""Does ``torch.compile`` speed up seqlab's Transformer training step here? (issue 11, lever
"torch.compile where it actually wins"; docs/perf-notes.md §10)

    python benchmarks/compile_probe.py [--precision bf16|fp32] [--size small|base|tiny]
        [--batches 30] [--reps 3] [--threads 2]

Two copies of seqlab's model, optimizer and step path (``benchmarks/peers_train.py``), one
eager and one after ``model.compile()`` (inductor, default mode), train on the same
batches of 64 synthetic pairs of 14–20 tokens (PEERS.md's workload). The compile and its
warm-up steps are timed apart; then the two run round-robin ``--reps`` times and the table
gives the median target tokens/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmarks importable
    sys.path.insert(0, str(ROOT))
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks import peers_train as pt  # noqa: E402

SIZES = {"small": pm.SMALL, "base": pm.BASE, "tiny": pm.TINY}


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(prog="benchmarks/compile_probe.py", description=__doc__)
    p.add_argument("--precision", choices=pt.PRECISIONS, default="bf16")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--batches", type=int, default=30, help="batches per repetition")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    size = SIZES[args.size]
    batches = pm.make_batches(args.batches, size, 64)
    tokens = sum(b.n_tokens for b in batches)
    eager, compiled = pt.seqlab_trainee(size), pt.seqlab_trainee(size)
    t0 = time.perf_counter()
    compiled.model.compile()
    for b in batches[:6]:  # the first shapes compile; later ones reuse dynamic graphs
        compiled.step(b, args.precision)
    compile_s = time.perf_counter() - t0
    for b in batches[:3]:
        eager.step(b, args.precision)
    rates: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(args.reps):
        for name, trainee in (("eager", eager), ("compiled", compiled)):
            t = time.perf_counter()
            for b in batches:
                trainee.step(b, args.precision)
            rates[name].append(tokens / (time.perf_counter() - t))
    median = {k: statistics.median(v) for k, v in rates.items()}
    print(f"{args.size}, {args.precision}, {args.threads} threads, {tokens:,} target tokens a rep")
    print("| step | target tokens/s (median) | repetitions |")
    print("|---|---|---|")
    for name, values in rates.items():
        print(f"| {name} | {median[name]:,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    ratio = median["compiled"] / median["eager"]
    print(f"compiled / eager: {ratio:.2f}×; compile + 6 warm-up steps {compile_s:.1f} s")
    return {"ratio": ratio, "compile_s": compile_s, **median}


if __name__ == "__main__":
    main()
