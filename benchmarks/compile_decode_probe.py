"""Does ``torch.compile`` speed up seqlab's Transformer *decoding* here? (issue 11, lever
"torch.compile where it actually wins"; docs/perf-notes-measured.md §23)

    python benchmarks/compile_decode_probe.py [--precision bf16|fp32] [--size small|tiny]
        [--beams 1,5] [--sentences 64] [--reps 3] [--threads 2] [--freeze]

§10 found no win for the training step. A decoder step is the opposite case: one query
row per hypothesis, ~1,100 small operators per step for 32 rows, so per-operator
overhead, not the GEMMs, is most of it (docs/perf-notes-decoding.md §13, §15). Here
``model.step`` (embedding, the decoder layers with their K/V caches, the output layer) is
compiled once by ``seqlab.decode.compiled.CompiledStep`` (``torch.compile(dynamic=True)``,
inductor, default mode; with ``--freeze``, inductor's weight freezing, which pre-packs the
linear layers' weights, as ``translate --compile`` always does),
and seqlab's own ``greedy`` / ``beam_search`` call it: the same workload as
``benchmarks/peers.py``'s decoding rows (synthetic sources of 14–20 tokens, batches of 32,
exactly 30 new tokens, random weights). The compile (all shapes of a first pass) is timed
apart; then eager and compiled decode round-robin ``--reps`` times; the table gives the
median ms per step of each, their ratio, and the share of output tokens the compiled
decode has in common with the eager one (1.0 in fp32; bf16 rounds at other points when
inductor fuses operators, and random weights leave near-ties).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmarks importable
    sys.path.insert(0, str(ROOT))
from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from seqlab.decode.compiled import CompiledStep  # noqa: E402
from seqlab.train.allocator import keep_freed_memory  # noqa: E402
from seqlab.train.precision import autocast_context  # noqa: E402

SIZES = {"small": pm.SMALL, "tiny": pm.TINY}
N_NEW = 30


def decode_all(
    decoder: object,
    model: nn.Module,
    batches: list[tuple[Tensor, Tensor]],
    beam: int,
    precision: str,
) -> Tensor:
    """Every batch decoded by seqlab's search through ``decoder.step``.  -> (N, N_NEW)."""
    out = []
    with torch.no_grad(), autocast_context(precision, "cpu"):  # type: ignore[arg-type]
        for src, mask in batches:
            state = decoder.init_state(model.encode(src, mask), mask)  # type: ignore[attr-defined]
            out.append(pdec.search(decoder, state, src.size(0), beam, N_NEW))
    return torch.cat(out)


def timed(*args: object) -> tuple[float, Tensor]:
    """(seconds, tokens) of ``decode_all(*args)``."""
    t = time.perf_counter()
    out = decode_all(*args)  # type: ignore[arg-type]
    return time.perf_counter() - t, out


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    p = argparse.ArgumentParser(prog="benchmarks/compile_decode_probe.py", description=__doc__)
    p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--beams", default="1,5", help="comma-separated beam sizes (1 = greedy)")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--freeze", action="store_true", help="inductor's weight freezing")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as benchmarks/peers.py and the Trainer run
    size = SIZES[args.size]
    torch.manual_seed(0)
    sources = [s for s, _ in pm.make_pairs(args.sentences, size, seed=1)]
    batches = pdec.source_batches(sources, 32)
    model = pm.build_seqlab(size)[0].eval()
    steps = N_NEW * len(batches)
    print(
        f"{args.size}, {args.precision}, {args.threads} threads, {args.sentences} sentences, "
        f"{N_NEW} new tokens, freezing {'on' if args.freeze else 'off'}"
    )
    print(
        "| search | eager ms/step | compiled ms/step | compiled / eager speed | first pass s ",
        end="",
    )
    print("| same tokens |")
    print("|---|---|---|---|---|---|")
    rows = []
    for beam in (int(b) for b in args.beams.split(",")):
        torch._dynamo.reset()
        compiled = CompiledStep(model, freeze=args.freeze)  # the library's step
        first_s, tokens_c = timed(compiled, model, batches, beam, args.precision)
        _, tokens_e = timed(model, model, batches, beam, args.precision)
        same = (tokens_c == tokens_e).float().mean().item()
        ms: dict[str, list[float]] = {"eager": [], "compiled": []}
        for _ in range(args.reps):
            for name, dec in (("eager", model), ("compiled", compiled)):
                s, _ = timed(dec, model, batches, beam, args.precision)
                ms[name].append(1000 * s / steps)
        med = {k: statistics.median(v) for k, v in ms.items()}
        speed = med["eager"] / med["compiled"]
        what = "greedy" if beam == 1 else f"beam {beam}"
        print(
            f"| {what} | {med['eager']:.2f} | {med['compiled']:.2f} | {speed:.2f}× | "
            f"{first_s:.1f} | {same:.4f} |"
        )
        rows.append({"beam": beam, "speed": speed, "first_s": first_s, "same": same, **med})
    return rows


if __name__ == "__main__":
    main()
