"""Where a training step of benchmarks/peers.py spends its time: ``torch.profiler`` tables.

    python benchmarks/profile_peers.py --impls seqlab,nn --size small --precision bf16
    python benchmarks/profile_peers.py --device cuda --steps 20 --out /tmp/profile.txt

For each implementation: build it as ``benchmarks/peers.py`` does (same model maths, same
batches), run warm-up steps, then profile ``--steps`` steps (CPU, and CUDA where the device
is a GPU) and print the operators by self CPU time and, on a GPU, by self CUDA time, with
the totals per step: wall time, operator calls and kernel launches. On a GPU at the small
size the step is bound by the host (launches, Python), which the per-step counts show.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from benchmarks import peers_models as pm  # noqa: E402
from benchmarks import peers_train as ptrain  # noqa: E402
from benchmarks.peers_timing import is_cuda, synchronize  # noqa: E402
from seqlab.train.allocator import keep_freed_memory  # noqa: E402

SIZES = {"tiny": pm.TINY, "small": pm.SMALL, "base": pm.BASE}


def per_step_counts(prof: profile, steps: int) -> tuple[float, float]:
    """Operator calls and CUDA kernels launched per step, over ``steps`` profiled steps."""
    calls = sum(e.count for e in prof.key_averages()) / steps
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA") / steps
    return calls, kernels


def profile_impl(impl: str, args: argparse.Namespace) -> str:
    """The report of one implementation (tables and per-step totals)."""
    size = SIZES[args.size]
    torch.manual_seed(0)
    batches = [b.to(args.device) for b in pm.make_batches(args.steps, size, args.batch)]
    trainee = ptrain.build_trainee(impl, size, args.device)
    for b in batches[: args.warmup]:
        trainee.step(b, args.precision)
    synchronize(args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda(args.device) else [])
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for b in batches:
            trainee.step(b, args.precision)
        synchronize(args.device)
        wall = (time.perf_counter() - t0) / len(batches)
    events = prof.key_averages()
    calls, kernels = per_step_counts(prof, len(batches))
    head = (
        f"== {impl} {args.size} {args.precision} on {args.device}: {1000 * wall:.2f} ms/step "
        f"(under the profiler), {calls:,.0f} operator calls/step, {kernels:,.0f} kernels/step"
    )
    parts = [head, events.table(sort_by="self_cpu_time_total", row_limit=args.rows)]
    if is_cuda(args.device):
        parts.append(events.table(sort_by="self_cuda_time_total", row_limit=args.rows))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(prog="benchmarks/profile_peers.py", description=__doc__)
    p.add_argument("--impls", default="seqlab,nn,hf", help="comma-separated, from seqlab,nn,hf")
    p.add_argument("--size", choices=tuple(SIZES), default="small")
    p.add_argument("--precision", choices=ptrain.PRECISIONS, default="bf16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=8, help="profiled steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--out", help="also write the report here")
    p.add_argument(
        "--allocator",
        choices=("keep", "default"),
        default="keep",
        help="keep (default): seqlab's keep_freed_memory() as its Trainer and peers.py do; "
        "default: glibc as is (freshly mapped pages then show as slow copies and log-softmaxes)",
    )
    args = p.parse_args(argv)
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if bad := sorted(set(impls) - set(ptrain.IMPLEMENTATIONS)):
        p.error(f"--impls: unknown {bad}; choose from {', '.join(ptrain.IMPLEMENTATIONS)}")
    if is_cuda(args.device) and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False on this machine")
    if args.allocator == "keep":
        keep_freed_memory()
    report = "\n\n".join(profile_impl(i, args) for i in impls)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return report


if __name__ == "__main__":
    main()
