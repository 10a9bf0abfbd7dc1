"""Beam search with and without copying the static decoder state (every reorder, and the
expansion to K hypotheses).

    OMP_NUM_THREADS=1 python benchmarks/decode_static_state.py [--models transformer,bahdanau]
        [--sentences 64] [--batch 32] [--beam 5] [--new-tokens 30] [--reps 5]
        [--precision fp32|bf16]

Random-weight models of the Multi30k presets (``configs/multi30k-<model>.yaml``, joint
vocabulary 8,000; the Transformer is d 256, 3 + 3 layers), the workload of
``benchmarks/peers.py``'s decoding section: sources of U[14, 20] tokens + EOS in batches of
``--batch``, exactly ``--new-tokens`` tokens per sentence (EOS forbidden until then), beam
``--beam``, α 0.6, through ``benchmarks/peers_decode.py``'s ``decode_rep``.

Three variants per model, in this one process, interleaved (the order rotates every
repetition), one thread:

- ``full``: inside ``seqlab.decode.state.full_reorder()``, every reorder copies the whole
  state, static fields included (seqlab before ``static_field``);
- ``skip``: inside ``seqlab.decode.state.unshared()``: beam search's within-input reorder
  leaves the static fields (cross-attention K/V, encoder annotations, Uₐh, masks) in
  place, but the expansion to B·K rows copies them K times (docs/perf-notes-decoding.md §12);
- ``share``: the library's default: as ``skip``, and the expansion keeps one
  cross-attention K/V row per input, read by its K hypotheses (``KVCache.group``,
  docs/perf-notes-decoding.md §15; only the Transformer has such a field).

Printed per variant, median over ``--reps``: ms per decoder step (wall and process CPU
time, steps = batches × new tokens), of which inside ``reorder_state``, sentences/s, and
the speed-up as the median over repetitions of full time / the variant's time (the runs
of a repetition are back to back, so slow drift of a shared machine cancels).
The 1-best tokens of every variant are checked to be identical to ``full``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from seqlab.data.vocab import PAD_ID  # noqa: E402
from seqlab.decode import beam as beam_module  # noqa: E402
from seqlab.decode.state import full_reorder, reorder_state, unshared  # noqa: E402
from seqlab.registry import MODELS  # noqa: E402
from seqlab.run_config import resolve_run  # noqa: E402

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def build(name: str, vocab: int = 8000) -> nn.Module:
    """The registered model of ``configs/multi30k-<name>.yaml``, random weights, eval."""
    cfg = resolve_run(CONFIGS / f"multi30k-{name}.yaml", [f"task.vocab_size={vocab}"])
    torch.manual_seed(0)
    model = MODELS.get(cfg.model).target(
        cfg.model_cfg, src_vocab=vocab, tgt_vocab=vocab, pad_id=PAD_ID
    )
    return model.eval()


class ReorderClock:
    """Wraps beam search's ``reorder_state`` and adds up the time spent inside it."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, state, index, **kw):
        t0 = time.perf_counter()
        out = reorder_state(state, index, **kw)
        self.seconds += time.perf_counter() - t0
        return out


VARIANTS = ("full", "skip", "share")


def variant(name: str) -> contextlib.AbstractContextManager:
    """The context a variant runs in (module docstring)."""
    return {"full": full_reorder, "skip": unshared}.get(name, contextlib.nullcontext)()


def timed(run: Callable[[], int], name: str, clock: ReorderClock) -> tuple[float, float, float]:
    """One repetition: (wall s, process CPU s, s inside reorder_state)."""
    clock.seconds = 0.0
    w0, c0 = time.perf_counter(), time.process_time()
    with variant(name):
        run()
    return time.perf_counter() - w0, time.process_time() - c0, clock.seconds


def one_best(model: nn.Module, batches, beam: int, n_new: int, name: str) -> list[torch.Tensor]:
    with torch.no_grad(), variant(name):
        return [pdec.seqlab_decode(model, s, m, beam, n_new) for s, m in batches]


def measure(name: str, args: argparse.Namespace, batches, clock: ReorderClock) -> list[str]:
    """Markdown rows for one model: full, skip, share."""
    model = build(name)
    best = {v: one_best(model, batches, args.beam, args.new_tokens, v) for v in VARIANTS}
    same = {
        v: all(torch.equal(a, b) for a, b in zip(best["full"], best[v], strict=True))
        for v in VARIANTS
    }
    run = pdec.decode_rep("seqlab", model, batches, args.beam, args.new_tokens, args.precision)
    run()  # warm-up
    times: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
    for r in range(args.reps):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
        for v in order:
            times[v].append(timed(run, v, clock))
        print(
            f"  {name} rep {r + 1}: " + ", ".join(f"{v} {times[v][-1][0]:.2f}s" for v in VARIANTS)
        )
    steps = len(batches) * args.new_tokens
    n = sum(src.size(0) for src, _ in batches)
    rows = []
    for v in VARIANTS:
        wall, cpu, reorder = (statistics.median(x[i] for x in times[v]) for i in range(3))
        # Paired: the variants of repetition r ran back to back, so drift cancels.
        paired = statistics.median(f[0] / s[0] for f, s in zip(times["full"], times[v]))
        speedup = "1" if v == "full" else f"{paired:.2f}"
        rows.append(
            f"| {name} | {v} | {1000 * wall / steps:.1f} | "
            f"{1000 * cpu / steps:.1f} | {1000 * reorder / steps:.2f} | {n / wall:.1f} "
            f"| {speedup} | {'yes' if same[v] else 'NO'} |"
        )
    return rows


def main(argv: list[str] | None = None) -> list[str]:
    """Run the comparison, print and return the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="transformer,bahdanau")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    sources = [s for s, _ in pm.make_pairs(args.sentences, pm.SMALL, seed=1)]
    batches = pdec.source_batches(sources, args.batch)
    clock = ReorderClock()
    beam_module.reorder_state = clock  # beam search's only reorder call, timed
    print(
        f"beam {args.beam}, {args.sentences} sentences in batches of {args.batch}, "
        f"{args.new_tokens} new tokens, {args.precision}, {args.reps} reps, 1 thread"
    )
    rows = [
        "| model | static state | ms / step (wall) | ms / step (CPU) | of which reorder (ms) "
        "| sentences / s (wall) | speed-up vs full (median of paired reps) | same 1-best |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for name in args.models.split(","):
        rows += measure(name, args, batches, clock)
    beam_module.reorder_state = reorder_state
    print("\n".join(rows))
    return rows


if __name__ == "__main__":
    main()
