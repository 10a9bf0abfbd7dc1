"""Decoder steps with SDPA vs the single-query matmul path of ``MultiHeadAttention``.

    python benchmarks/decode_single_query.py [--beams 1,5] [--precisions fp32,bf16]
        [--sentences 64] [--batch 32] [--new-tokens 30] [--reps 7] [--threads 2]

A random-weight Transformer of ``configs/multi30k-transformer.yaml`` (d 256, 3 + 3 layers,
joint vocabulary 8,000), the workload of ``benchmarks/peers.py``'s decoding section:
sources of U[14, 20] tokens + EOS in batches of ``--batch``, exactly ``--new-tokens``
tokens per sentence (EOS forbidden until then), through ``benchmarks/peers_decode.py``'s
``decode_rep`` (autocast for bf16, as seqlab decodes).

Two variants per (beam, precision), in this one process, interleaved (the order alternates
every repetition):

- ``sdpa``: inside ``seqlab.nn.multihead.always_sdpa()``, every attention call of a
  decoder step goes through ``torch.nn.functional.scaled_dot_product_attention``
  (seqlab before the single-query path);
- ``matmul``: the library's default, a single query row on CPU is computed by two
  float32 matmuls and a softmax (``MultiHeadAttention._single_query``).

Printed per variant, median over ``--reps``: ms per decoder step (steps = batches × new
tokens), sentences/s, the speed-up as the median over repetitions of the paired time ratio
sdpa / matmul (the two runs of a repetition are back to back, so the drift of a shared
machine cancels), and whether the 1-best tokens of the two variants are identical.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from seqlab.nn.multihead import always_sdpa  # noqa: E402
from seqlab.train.precision import autocast_context  # noqa: E402


def variant(sdpa: bool) -> contextlib.AbstractContextManager:
    return always_sdpa() if sdpa else contextlib.nullcontext()


def one_best(model, batches, beam: int, n_new: int, precision: str, sdpa: bool) -> list:
    """The 1-best tokens of every batch under one variant."""
    with torch.no_grad(), variant(sdpa), autocast_context(precision, "cpu"):  # type: ignore[arg-type]
        return [pdec.seqlab_decode(model, s, m, beam, n_new) for s, m in batches]


def measure(model, batches, beam: int, precision: str, args: argparse.Namespace) -> list[str]:
    """Markdown rows for one (beam, precision): sdpa vs matmul."""
    n_new = args.new_tokens
    same = all(
        torch.equal(a, b)
        for a, b in zip(
            one_best(model, batches, beam, n_new, precision, True),
            one_best(model, batches, beam, n_new, precision, False),
        )
    )
    run = pdec.decode_rep("seqlab", model, batches, beam, n_new, precision)
    run()  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.reps):
        for sdpa in (True, False) if r % 2 == 0 else (False, True):
            t0 = time.perf_counter()
            with variant(sdpa):
                run()
            times[sdpa].append(time.perf_counter() - t0)
        print(f"  beam {beam} {precision} rep {r + 1}: sdpa {times[True][-1]:.2f}s, "
              f"matmul {times[False][-1]:.2f}s", flush=True)  # fmt: skip
    steps = len(batches) * n_new
    n = sum(src.size(0) for src, _ in batches)
    paired = statistics.median(a / b for a, b in zip(times[True], times[False]))
    what = "greedy" if beam == 1 else f"beam {beam}"
    rows = []
    for sdpa in (True, False):
        wall = statistics.median(times[sdpa])
        speedup = "1" if sdpa else f"{paired:.2f}×"
        rows.append(
            f"| {what} | {precision} | {'sdpa' if sdpa else 'matmul'} | "
            f"{1000 * wall / steps:.1f} | {n / wall:.1f} | {speedup} | "
            f"{'yes' if same else 'no'} |"
        )
    return rows


def main(argv: list[str] | None = None) -> list[str]:
    """Run the comparison, print and return the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--beams", default="1,5")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = pm.build_seqlab(pm.SMALL)[0].eval()
    sources = [s for s, _ in pm.make_pairs(args.sentences, pm.SMALL, seed=1)]
    batches = pdec.source_batches(sources, args.batch)
    print(
        f"{args.sentences} sentences in batches of {args.batch}, {args.new_tokens} new "
        f"tokens, {args.reps} reps, {args.threads} threads"
    )
    rows = [
        "| search | precision | attention of a step | ms / step | sentences / s "
        "| speed-up (median of paired reps) | same 1-best |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for precision in args.precisions.split(","):
        for beam in (int(b) for b in args.beams.split(",")):
            rows += measure(model, batches, beam, precision, args)
    print("\n".join(rows))
    return rows


if __name__ == "__main__":
    main()
