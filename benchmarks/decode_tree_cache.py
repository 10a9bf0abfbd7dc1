"""The decoder's self-attention cache: ``TreeKVCache`` (written in place, reordered by beam
search without a copy) and "auto" (the default: the concatenating ``KVCache`` until beam
search expands the rows, a ``TreeKVCache`` from there) against the concatenating ``KVCache``.

    python benchmarks/decode_tree_cache.py [--searches 1,5] [--precisions bf16,fp32]
        [--sentences 100] [--batch 32] [--new-tokens 30] [--reps 5] [--threads 2]

The workload of ``benchmarks/peers.py``'s decoding section (random-weight small
Transformer, d 256, 3 + 3 layers, vocabulary 8,000; sources of U[14, 20] tokens + EOS in
batches of ``--batch``; exactly ``--new-tokens`` tokens per sentence, EOS forbidden until
then; α 0.6), through ``benchmarks/peers_decode.py``'s ``decode_rep`` under seqlab's
autocast. Eager only: compiled decoding always uses the concatenating cache
(``CompiledStep.init_state``; docs/perf-notes-measured.md §24 says why).

Per search and precision, the three caches run back to back in every repetition (the
order rotates). Printed: ms per decoder step (median over ``--reps``; steps = batches ×
new tokens) and, for tree and auto, the speed-up over concat as the median over
repetitions of concat time / its time (paired, so slow drift of a shared machine
cancels), and whether their 1-best tokens equal concat's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.paired_variants import (  # noqa: E402
    against_first,
    decode_workload,
    one_best,
    round_robin,
)

CACHES = ("concat", "tree", "auto")


def measure(model, batches, beam: int, precision: str, args: argparse.Namespace) -> str:
    """One markdown row: the three caches at one beam width and precision."""
    impls = {c: "seqlab" if c == "auto" else f"seqlab-{c}" for c in CACHES}
    best = {c: one_best(model, batches, beam, args.new_tokens, impls[c], precision) for c in CACHES}
    runs = {
        c: pdec.decode_rep(impls[c], model, batches, beam, args.new_tokens, precision)
        for c in CACHES
    }
    times = round_robin(runs, args.reps, args.device)
    vs = against_first(times, best, len(batches) * args.new_tokens)
    cells = [f"{vs['concat'].ms:.2f}"]
    for c in CACHES[1:]:
        cells += [f"{vs[c].ms:.2f}", f"{vs[c].speed:.2f}×", "yes" if vs[c].same else "NO"]
    search = "greedy" if beam == 1 else f"beam {beam}"
    row = f"| {search} | {precision} | " + " | ".join(cells) + " |"
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> list[str]:
    """Run the comparison, print and return the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--searches", default="1,5", help="beam widths; 1 = greedy")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (model and batches there)")
    args = p.parse_args(argv)
    model, batches = decode_workload(
        pm.SMALL, args.sentences, args.batch, args.threads, args.device
    )
    print(
        f"{args.sentences} sentences in batches of {args.batch}, {args.new_tokens} new tokens, "
        f"{args.reps} reps, {args.threads} threads, {args.device}"
    )
    rows = [
        "| search | precision | concat ms / step | tree ms / step | tree speed-up | tree same "
        "1-best | auto ms / step | auto speed-up | auto same 1-best |",
        "|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    print("\n".join(rows), flush=True)
    for beam in (int(b) for b in args.searches.split(",")):
        for precision in args.precisions.split(","):
            rows.append(measure(model, batches, beam, precision, args))
    return rows


if __name__ == "__main__":
    main()
