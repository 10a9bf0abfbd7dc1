"""Eager decoding with the linear layers' bf16 weights pre-packed for oneDNN against plain
bf16 autocast (``seqlab.nn.packed_linear``; docs/perf-notes-decoding.md §34).

    python benchmarks/decode_packed.py [--searches 1,5] [--reps 7] [--threads 2]

The workload of ``benchmarks/peers.py``'s decoding section (random-weight small
Transformer, d 256, 3 + 3 layers, vocabulary 8,000; 100 sources in batches of 32; exactly
30 new tokens; α 0.6), bf16 autocast on the CPU, through ``peers_decode.decode_rep``. The
variants run back to back in every repetition (order rotating): ``plain`` with packing
switched off (``packing_applies`` patched to False), ``packed`` as shipped. Printed: ms per
decoder step (median), the paired speed-up of packed over plain, and whether the 1-best
tokens are equal.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.paired_variants import (  # noqa: E402
    against_first,
    decode_workload,
    one_best,
    round_robin,
)


def variant(name: str, run: Callable[[], object]) -> Callable[[], object]:
    if name == "packed":
        return run

    def plain() -> object:
        with mock.patch("seqlab.nn.packed_linear.packing_applies", lambda module: False):
            return run()

    return plain


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--searches", default="1,5", help="beam widths; 1 = greedy")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    args = p.parse_args(argv)
    size = pm.TINY if args.tiny else pm.SMALL
    model, batches = decode_workload(size, args.sentences, 32, args.threads)
    rows = ["| search | plain ms / step | packed ms / step | speed-up | same 1-best |",
            "|---|---:|---:|---:|---|"]  # fmt: skip
    print(f"{args.sentences} sentences, {args.new_tokens} new tokens, bf16, {args.reps} reps, "
          f"{args.threads} threads")  # fmt: skip
    print("\n".join(rows), flush=True)
    for beam in (int(b) for b in args.searches.split(",")):
        n = args.new_tokens
        rep = pdec.decode_rep("seqlab", model, batches, beam, n, "bf16")
        runs = {v: variant(v, rep) for v in ("plain", "packed")}
        best_of = functools.partial(one_best, model, batches, beam, n, "seqlab", "bf16")
        best = {v: variant(v, best_of)() for v in runs}
        vs = against_first(round_robin(runs, args.reps), best, len(batches) * n)
        search = "greedy" if beam == 1 else f"beam {beam}"
        row = (f"| {search} | {vs['plain'].ms:.2f} | {vs['packed'].ms:.2f} | "
               f"{vs['packed'].speed:.3f}× | {'yes' if vs['packed'].same else 'NO'} |")  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    main()
