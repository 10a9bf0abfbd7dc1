"""Levers of the training step, each against what it replaced (docs/perf-notes-training.md).

    python benchmarks/step_levers.py [--lever loss|rows|attention|buckets] [--precision bf16|fp32]
    python benchmarks/step_levers.py --lever buckets --fresh

``--lever loss`` (§32): the training loss through ``seqlab.nn.smoothed_cross_entropy``
against ``F.cross_entropy``. ``--lever rows`` (§36): the FFNs, the output layer and the
loss on the real positions alone (``seqlab.nn.row_packing``) against every position
(``padded_positions()``). ``--lever attention`` (§37): on CPU the attention of a training
step through the readable path's matmuls against SDPA's kernels (``always_sdpa()``).
``--lever buckets`` (perf-notes-amx.md §44): under CPU autocast the packed row count
rounded up to a few buckets (``row_packing.row_bucket``) against the exact count
(``exact_row_counts()``); it matters only where shapes are new, so measure it with
``--fresh``: every repetition trains on batches neither variant has seen (the same new
batches for both), as real training does, instead of cycling over the same ones.
(§33's dropout words were measured with a ``--lever dropout`` that left with the change
it measured, not adopted: commit history.)

The training step of ``benchmarks/peers.py`` (seqlab's small config, 64 pairs of 14–20
tokens, label smoothing 0.1, Adam; ``benchmarks/peers_train.py``'s ``seqlab_trainee``),
two variants on the same model and batches, back to back with the order rotating
(``benchmarks/paired_variants.round_robin``): ``before``, what the lever replaced, and
``seqlab``, the code as shipped. For ``--lever loss``:

* ``before`` — the loss as before §32: ``F.cross_entropy`` with ``label_smoothing`` for the
  loss and a second, no-grad ``F.cross_entropy`` for the NLL (what nn.Transformer and HF
  Marian users call);
* ``seqlab`` — ``token_cross_entropy``'s fast path as shipped (``path="auto"``: the
  softmax-once function from 2¹⁹ logits on, so not for ``--tiny``).

For ``--lever rows``: ``before`` runs inside ``padded_positions()``; ``--pack-on-gpu`` lets
the layers pack on CUDA too (``row_packing.PACK_DEVICES``), to measure it there.
``--size base`` times the base config instead of the small one.

Printed: ms per step of each (median) and the paired speed-up of seqlab over before
(median over repetitions of before's time / seqlab's). ``--micro`` (loss only) times the
loss alone on (N, V) logits of the step's shape (forward, backward and the NLL), on
``--device``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_models as pm  # noqa: E402
from benchmarks import peers_train as ptrain  # noqa: E402
from benchmarks.paired_variants import round_robin, train_workload  # noqa: E402
from seqlab.nn import row_packing  # noqa: E402
from seqlab.nn.multihead import always_sdpa  # noqa: E402
from seqlab.nn.row_packing import exact_row_counts, padded_positions  # noqa: E402
from seqlab.nn.smoothed_cross_entropy import (  # noqa: E402
    SmoothedCrossEntropy,
    torch_cross_entropy,
)
from seqlab.train.allocator import keep_freed_memory  # noqa: E402
from seqlab.train.precision import autocast_context  # noqa: E402

REPLACED: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "loss": lambda: mock.patch("seqlab.tasks.base.smoothed_cross_entropy", torch_cross_entropy),
    "rows": padded_positions,
    "attention": always_sdpa,
    "buckets": exact_row_counts,
}


def variant(name: str, lever: str, run: Callable[[], object]) -> Callable[[], object]:
    """``seqlab``: ``run`` as it is; ``before``: ``run`` with the lever undone."""
    if name == "seqlab":
        return run

    def before() -> object:
        with REPLACED[lever]():
            return run()

    return before


def micro(args: argparse.Namespace) -> dict:
    """The loss alone on logits of the step's shape (module doc)."""
    N, V = 64 * 21, pm.SMALL.vocab
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    x0 = torch.randn(N, V).to(device=args.device, dtype=dtype)
    y = torch.randint(1, V, (N,))
    y[::10] = 0  # padding rows
    y = y.to(args.device)

    calls = 1 if args.device == "cpu" else 20  # a GPU's call is shorter than a sync

    def run(fn) -> Callable[[], object]:
        def go() -> object:
            for _ in range(calls):
                x = x0.detach().requires_grad_()
                with autocast_context(args.precision, x.device.type):  # type: ignore[arg-type]
                    loss, _ = fn(x, y, 0, 0.1)
                loss.float().sum().backward()
            return x.grad

        return go

    runs = {"before": run(torch_cross_entropy), "seqlab": run(SmoothedCrossEntropy.apply)}
    times = round_robin(runs, args.reps * 5, args.device)
    ms = {k: 1000 * statistics.median(t) / calls for k, t in times.items()}
    print(
        f"loss alone, ({N} x {V}) logits, {args.device}, {args.precision}: "
        f"torch {ms['before']:.3f} ms, seqlab {ms['seqlab']:.3f} ms"
    )
    return ms


def fresh_workload(
    size: pm.Size, steps: int, reps: int, precision: str, threads: int
) -> dict[str, Callable[[], object]]:
    """``--fresh``: before and seqlab, each its own trainee (seed 0), and for every call of
    either the next ``steps`` batches of a pool no call has used (the k-th call of each
    variant gets the same batches, so the pair is timed on equal work)."""
    torch.set_num_threads(threads)
    keep_freed_memory()
    pool = [pm.make_batches(steps, size, 64, seed=1000 + k) for k in range(reps + 1)]

    def runs_of(trainee: ptrain.Trainee) -> Callable[[], object]:
        calls = iter(pool)
        return lambda: ptrain.train_rep(trainee, next(calls), precision)()

    torch.manual_seed(0)
    first = runs_of(ptrain.seqlab_trainee(size))
    torch.manual_seed(0)
    second = runs_of(ptrain.seqlab_trainee(size))
    return {"before": first, "seqlab": second}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lever", default="loss", choices=tuple(REPLACED))
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.add_argument("--steps", type=int, default=4, help="training steps per repetition")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (synchronised rounds)")
    p.add_argument("--size", choices=("small", "base"), default="small")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument(
        "--pack-on-gpu",
        action="store_true",
        help="--lever rows: let the padding-free layers pack on CUDA too (off by default)",
    )
    p.add_argument("--micro", action="store_true", help="the loss alone (--lever loss)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="every repetition on batches not seen before (CPU; --lever buckets)",
    )
    args = p.parse_args(argv)
    if args.fresh and args.device != "cpu":
        p.error("--fresh trains on the CPU only (it measures oneDNN's per-shape kernels)")
    if args.micro:
        torch.set_num_threads(args.threads)
        keep_freed_memory()  # as benchmarks/peers.py and the Trainer run
        return micro(args)
    size = pm.TINY if args.tiny else {"small": pm.SMALL, "base": pm.BASE}[args.size]
    if args.pack_on_gpu:
        row_packing.PACK_DEVICES.add("cuda")
    if args.fresh:
        fresh = fresh_workload(size, args.steps, args.reps, args.precision, args.threads)
        runs = {v: variant(v, args.lever, fresh[v]) for v in ("before", "seqlab")}
    else:
        rep = train_workload(size, args.steps, args.precision, args.threads, args.device)
        runs = {v: variant(v, args.lever, rep) for v in ("before", "seqlab")}
    t0 = time.perf_counter()
    times = round_robin(runs, args.reps, args.device)
    ms = {v: 1000 * statistics.median(t) / args.steps for v, t in times.items()}
    speed = statistics.median(a / b for a, b in zip(times["before"], times["seqlab"]))
    print(
        f"--lever {args.lever}: {args.device}, {args.precision}, {size.name} config, "
        f"{args.steps} steps x {args.reps} reps{', fresh batches' if args.fresh else ''} "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    print(f"| {args.lever} | ms / step |")
    print("|---|---:|")
    for v in runs:
        print(f"| {v} | {ms[v]:.2f} |")
    print(f"seqlab vs before (paired): {speed:.3f}x")
    return {"ms": ms, "speed": speed}


if __name__ == "__main__":
    main()
