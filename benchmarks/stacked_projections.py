"""Self-attention's q, k, v as one product by the stacked weights against three products
(``seqlab.nn.multihead.project_qkv`` / ``separate_projections``; docs/perf-notes-gpu.md §31).

    python benchmarks/stacked_projections.py [--device cpu] [--precision bf16] [--reps 7]
    python benchmarks/stacked_projections.py --decode [--beam 5]   # decoding instead

The training step of ``benchmarks/peers.py`` (seqlab's small config, 64 pairs of 14–20
tokens, label smoothing, Adam; ``benchmarks/peers_train.py``'s ``seqlab_trainee``), the two
variants on the same model and batches, ``--steps`` steps per repetition, back to back with
the order rotating (``benchmarks/paired_variants.round_robin``). Printed: ms per step of
each (median), the paired speed-up of stacked over separate (median over repetitions of
separate time / stacked time), and the operator calls per step of each, counted by
``torch.profiler`` over one repetition (on a GPU: also the kernels launched).

``--decode``: the decoding workload of ``benchmarks/peers.py`` instead (100 sentences in
batches of 32, exactly 30 new tokens, beam ``--beam``; ``peers_decode.decode_rep``), where
each decoder step's self-attention projects its new position's q, k, v; ms per decoder
step and the 1-best of both variants compared.
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

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.paired_variants import (  # noqa: E402
    decode_workload,
    one_best,
    round_robin,
    train_workload,
)
from benchmarks.peers_timing import is_cuda, synchronize  # noqa: E402
from benchmarks.profile_peers import per_step_counts  # noqa: E402
from seqlab.nn.multihead import separate_projections  # noqa: E402


def variant(name: str, run: Callable[[], object]) -> Callable[[], object]:
    if name == "stacked":
        return run

    def separate() -> object:
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
    return per_step_counts(prof, steps)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.add_argument("--steps", type=int, default=4, help="training steps per repetition")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--decode", action="store_true", help="the decoding workload instead")
    p.add_argument("--beam", type=int, default=5, help="with --decode: beam width (1 greedy)")
    args = p.parse_args(argv)
    if args.decode:
        return decode(args)
    size = pm.TINY if args.tiny else pm.SMALL
    rep = train_workload(size, args.steps, args.precision, args.threads, args.device)
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


def decode(args: argparse.Namespace) -> dict:
    """The decoding comparison (module doc)."""
    size = pm.TINY if args.tiny else pm.SMALL
    n_sent, n_new = (8, 5) if args.tiny else (100, 30)
    model, batches = decode_workload(size, n_sent, 32, args.threads, args.device)
    rep = pdec.decode_rep("seqlab", model, batches, args.beam, n_new, args.precision)
    runs = {v: variant(v, rep) for v in ("separate", "stacked")}

    def best_of() -> list:
        return one_best(model, batches, args.beam, n_new, "seqlab", args.precision)

    best = {v: variant(v, best_of)() for v in runs}
    times = round_robin(runs, args.reps, args.device)
    steps = len(batches) * n_new
    ms = {v: 1000 * statistics.median(t) / steps for v, t in times.items()}
    speed = statistics.median(a / b for a, b in zip(times["separate"], times["stacked"]))
    same = all(torch.equal(a, b) for a, b in zip(best["separate"], best["stacked"]))
    search = "greedy" if args.beam == 1 else f"beam {args.beam}"
    print(f"{args.device}, {args.precision}, {search}, {size.name} config, {args.reps} reps")
    print(f"ms per decoder step: separate {ms['separate']:.2f}, stacked {ms['stacked']:.2f}")
    print(f"stacked vs separate (paired): {speed:.3f}x; same 1-best: {'yes' if same else 'NO'}")
    return {"ms": ms, "speed": speed, "same": same}


if __name__ == "__main__":
    main()
