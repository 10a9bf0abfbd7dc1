"""Greedy search's choice of the next token: ``Tensor.argmax`` against ``Tensor.max``'s
indices, on the peers' decoding workload (docs/perf-notes-amx.md §48).

    python benchmarks/decode_choose.py [--precisions fp32,bf16] [--compiled] [--reps 9]
        [--threads 2] [--out FILE]

Both forms give the first index of the row maximum (ties to the lowest token id, NaN
counted as the maximum), so the tokens must be identical; only the speed of torch's two
CPU reductions differs. Two measurements, each in this one process:

- **the reduction alone** on a (32, 8,000) float32 row block, the shape of a greedy step
  of the workload below (µs per call, best of the reps, and the paired ratio);
- **greedy decoding**: the workload of ``benchmarks/peers.py``'s decoding section
  (random-weight small Transformer, d 256, 3 + 3 layers, vocabulary 8,000; 100 sources in
  batches of 32; exactly 30 new tokens), through ``peers_decode.decode_rep``, eager and,
  with ``--compiled``, the compiled decoder step (``translate --compile``), with
  ``seqlab.decode.greedy.argmax_token`` patched to each form. Printed: ms per decoder
  step (median), the paired speed-up of ``max`` over ``argmax``, identical 1-best.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.paired_variants import (  # noqa: E402
    against_first,
    decode_workload,
    one_best,
    round_robin,
    versus_cells,
)


def by_argmax(log_p: Tensor) -> Tensor:
    """The first index of the row maximum by ``Tensor.argmax``.  (B, V) -> (B,)"""
    return log_p.argmax(dim=-1)  # (B,)


def by_max(log_p: Tensor) -> Tensor:
    """The first index of the row maximum by ``Tensor.max``'s indices.  (B, V) -> (B,)"""
    return log_p.max(dim=-1).indices  # (B,)


CHOOSERS: dict[str, Callable[[Tensor], Tensor]] = {"argmax": by_argmax, "max": by_max}


def with_chooser(name: str, run: Callable[[], object]) -> Callable[[], object]:
    """``run`` with greedy search choosing by ``CHOOSERS[name]``."""

    def patched() -> object:
        with mock.patch("seqlab.decode.greedy.argmax_token", CHOOSERS[name]):
            return run()

    return patched


def reduction_alone(rows: int, vocab: int, reps: int, calls: int = 200) -> str:
    """Both reductions on one (rows, vocab) float32 block, paired.  -> a table row"""
    torch.manual_seed(0)
    x = torch.randn(rows, vocab)  # (rows, V)
    assert torch.equal(by_argmax(x), by_max(x))
    times: dict[str, list[float]] = {n: [] for n in CHOOSERS}
    for r in range(reps + 1):
        for name in list(CHOOSERS)[r % 2 :] + list(CHOOSERS)[: r % 2]:
            f = CHOOSERS[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                f(x)
            if r:  # the first round warms up
                times[name].append((time.perf_counter() - t0) / calls)
    ratio = statistics.median(a / b for a, b in zip(times["argmax"], times["max"]))
    us = {n: 1e6 * min(t) for n, t in times.items()}
    shape = f"({rows}, {vocab})"
    return f"| {shape} alone | {us['argmax']:.1f} µs | {us['max']:.1f} µs | {ratio:.3f}× | yes |"


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--compiled", action="store_true", help="also the compiled decoder step")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    size = pm.TINY if args.tiny else pm.SMALL
    model, batches = decode_workload(size, args.sentences, 32, args.threads)
    head = (f"{args.sentences} sentences, {args.new_tokens} new tokens, greedy, {args.reps} "
            f"reps, {args.threads} threads, torch {torch.__version__}")  # fmt: skip
    rows = ["| workload | argmax (ms / step) | max (ms / step) | speed-up of max | same 1-best |",
            "|---|---:|---:|---:|---|"]  # fmt: skip
    print(head + "\n" + "\n".join(rows), flush=True)
    rows.append(reduction_alone(32, size.vocab, args.reps))
    print(rows[-1], flush=True)
    impls = ["seqlab", "seqlab-compiled"] if args.compiled else ["seqlab"]
    n = args.new_tokens
    for impl in impls:
        for precision in args.precisions.split(","):
            rep = pdec.decode_rep(impl, model, batches, 1, n, precision)
            runs = {c: with_chooser(c, rep) for c in CHOOSERS}
            best_of = functools.partial(one_best, model, batches, 1, n, impl, precision)
            best = {c: with_chooser(c, best_of)() for c in CHOOSERS}
            vs = against_first(round_robin(runs, args.reps), best, len(batches) * n)
            row = f"| {impl}, greedy, {precision} " + versus_cells(vs, "argmax", "max")
            rows.append(row)
            print(row, flush=True)
    if args.out:
        args.out.write_text(head + "\n\n" + "\n".join(rows) + "\n")
    return rows


if __name__ == "__main__":
    main()
