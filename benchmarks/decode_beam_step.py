"""Two levers of the beam-5 step, measured in the search: candidate selection through
chunk maxima (``seqlab.decode.top_extensions``, docs/perf-notes-decoding.md §25) against
the flat top-k over all K·V extensions; and, compiled, beam search's reorder of the
self-attention cache inside the compiled graph (``seqlab.decode.compiled.PendingReorder``,
§26) against before it.

    python benchmarks/decode_beam_step.py [--variants flat,chunked] [--searches 5]
        [--precisions bf16,fp32] [--sentences 100] [--batch 32] [--new-tokens 30]
        [--reps 5] [--threads 2] [--compiled]

Variants: ``flat`` (``top_extensions.CHUNK`` = 0) and ``chunked`` (the library's C), both
reordering before the compiled graph; ``chunked+graph`` (the library's default when
compiled: the reorder inside the graph; eager it is ``chunked``).

The workload of ``benchmarks/peers.py``'s decoding section (random-weight small
Transformer, d 256, 3 + 3 layers, vocabulary 8,000; sources of U[14, 20] tokens + EOS in
batches of ``--batch``; exactly ``--new-tokens`` tokens per sentence, EOS forbidden until
then; α 0.6), through ``benchmarks/peers_decode.py``'s ``decode_rep`` under seqlab's
autocast, with ``keep_freed_memory()`` as there; ``--compiled``: through the compiled
decoder step (``--compiled-decode`` there).

The variants run back to back in every repetition (the order rotates). Printed per
variant: ms per decoder step (median over ``--reps``; steps = batches × new tokens) and
ms per step inside ``select_candidates`` (median over ``--reps``: the selection's own
cost, far less noisy than the step's); for each variant after the first, the speed-up
over the first as the median over repetitions of its time / this time (paired, so slow
drift of a shared machine cancels), and whether the 1-best tokens equal its.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import seqlab.decode.beam as beam_module  # noqa: E402
import seqlab.decode.top_extensions as top_ext  # noqa: E402
from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.paired_variants import (  # noqa: E402
    against_first,
    decode_workload,
    one_best,
    round_robin,
)
from seqlab.decode.compiled import compiled_decoder  # noqa: E402

# variant -> (chunk size C, reorder inside the compiled graph)
VARIANTS = {
    "flat": (0, False),
    "chunked": (top_ext.CHUNK, False),
    "chunked+graph": (top_ext.CHUNK, True),
}


def with_variant(variant: str, model, compiled: bool, fn: Callable, beam: int):
    """``fn`` run with the variant's chunk size and, compiled, its reorder placement (on
    the compiled step of a width-``beam`` search)."""
    chunk, in_graph = VARIANTS[variant]

    def run():
        step = compiled_decoder(model, beam) if compiled else None
        old = (top_ext.CHUNK, step.reorder_in_graph if step else None)
        top_ext.CHUNK = chunk
        if step is not None:
            step.reorder_in_graph = in_graph
        try:
            return fn()
        finally:
            top_ext.CHUNK = old[0]
            if step is not None:
                step.reorder_in_graph = old[1]

    return run


class SelectionClock:
    """Wall time inside beam search's ``select_candidates`` (wrapped while in use): the
    selection's own cost per step, free of the whole step's run-to-run spread."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0
        self.real = beam_module.select_candidates

    def __enter__(self) -> SelectionClock:
        def timed(*args):
            t0 = time.perf_counter()
            out = self.real(*args)
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            return out

        beam_module.select_candidates = timed
        return self

    def __exit__(self, *exc) -> None:
        beam_module.select_candidates = self.real


def measure(model, batches, beam: int, precision: str, args: argparse.Namespace) -> str:
    """One markdown row: every variant at one beam width and precision."""
    impl = "seqlab-compiled" if args.compiled else "seqlab"
    variants = args.variants.split(",")
    n_new = args.new_tokens

    def best_of() -> list:
        return one_best(model, batches, beam, n_new, impl, precision)

    best = {v: with_variant(v, model, args.compiled, best_of, beam)() for v in variants}
    rep = pdec.decode_rep(impl, model, batches, beam, n_new, precision)
    select: dict[str, list[float]] = {v: [] for v in variants}  # ms in selection per call

    def clocked(v: str) -> Callable[[], None]:
        run = with_variant(v, model, args.compiled, rep, beam)

        def timed_run() -> None:
            with SelectionClock() as clock:
                run()
            select[v].append(1000 * clock.seconds / max(clock.calls, 1))

        return timed_run

    times = round_robin({v: clocked(v) for v in variants}, args.reps, args.device)
    vs = against_first(times, best, len(batches) * n_new)
    sel = {v: statistics.median(select[v][1:]) for v in variants}  # [0]: the warm-up
    cells = [f"{vs[variants[0]].ms:.2f}", f"{sel[variants[0]]:.2f}"]
    for v in variants[1:]:
        same = "yes" if vs[v].same else "NO"
        cells += [f"{vs[v].ms:.2f}", f"{sel[v]:.2f}", f"{vs[v].speed:.2f}×", same]
    search = "greedy" if beam == 1 else f"beam {beam}"
    row = f"| {search} | {precision} | " + " | ".join(cells) + " |"
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> list[str]:
    """Run the comparison, print and return the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="flat,chunked", help=", ".join(VARIANTS))
    p.add_argument("--searches", default="5", help="beam widths")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (model and batches there)")
    p.add_argument("--compiled", action="store_true", help="through the compiled decoder step")
    args = p.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variant(s) {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    model, batches = decode_workload(
        pm.SMALL, args.sentences, args.batch, args.threads, args.device
    )
    variants = args.variants.split(",")
    print(
        f"{args.sentences} sentences in batches of {args.batch}, {args.new_tokens} new tokens, "
        f"{args.reps} reps, {args.threads} threads, {args.device}, "
        f"{'compiled' if args.compiled else 'eager'}"
    )
    head = f"| search | precision | {variants[0]} ms / step | its selection ms |"
    for v in variants[1:]:
        head += f" {v} ms / step | its selection ms | speed-up | same 1-best |"
    rows = [head, "|---|---|---:|---:|" + "---:|---:|---:|---|" * (len(variants) - 1)]
    print("\n".join(rows), flush=True)
    for beam in (int(b) for b in args.searches.split(",")):
        for precision in args.precisions.split(","):
            rows.append(measure(model, batches, beam, precision, args))
    return rows


if __name__ == "__main__":
    main()
