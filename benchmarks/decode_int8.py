"""Eager decoding in fp32, bf16 and int8 (``seqlab.decode.precision``; perf-notes-decoding §40).

    python benchmarks/decode_int8.py [--searches 1,5] [--reps 7] [--threads 2] [--no-bf16]
        [--model transformer|luong|bahdanau|sutskever|cho]

The workload of ``benchmarks/peers.py``'s decoding section (random-weight small
Transformer, d 256, 3 + 3 layers, vocabulary 8,000; 100 sources in batches of 32; exactly
30 new tokens; α 0.6), through ``peers_decode.decode_rep``, in three precisions run back
to back in every repetition (order rotating): ``fp32`` (no autocast), ``bf16`` (autocast
with §34's packed bf16 weights, as the library decodes under ``--precision bf16``; left
out with ``--no-bf16`` or on a CPU without avx512_bf16 / amx_bf16, where it is emulated)
and ``int8`` (``seqlab.nn.int8_linear``: the searches' linear layers in int8).

Printed per search: ms per decoder step of each (median), the paired speed-up of each
over fp32 (median over repetitions of fp32's time / its time), and the share of sentences
whose 1-best equals fp32's. A random-weight model's scores are close together, so that
share is a lower bound on what a trained model keeps; the BLEU of a trained model in each
precision is ``seqlab evaluate RUN --split test --precision fp32|bf16|int8``.

``--model`` other than ``transformer``: the same sources and searches, decoded by that
RNN seq2seq preset (``configs/multi30k-<model>.yaml``, source and target vocabulary as the
Transformer's, random weights, seed 0); its output layer and attention's linear layers
are what int8 quantizes (perf-notes-int8.md §42), its LSTM / GRU cells stay float32.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.paired_variants import decode_workload, one_best, round_robin  # noqa: E402
from seqlab.train.precision import cpu_has_fast_bf16, read_cpu_flags  # noqa: E402


def same_share(best: list, base: list) -> float:
    """The share of sentences whose 1-best tokens equal ``base``'s.  [(B, n)] -> [0, 1]"""
    same = sum(int((a == b).all(dim=1).sum()) for a, b in zip(best, base, strict=True))
    return same / sum(b.size(0) for b in base)


def rnn_preset(name: str, vocab: int) -> torch.nn.Module:
    """The RNN seq2seq preset ``configs/multi30k-<name>.yaml`` at ``vocab`` (source and
    target), random weights from seed 0, in eval mode."""
    import seqlab.models  # noqa: F401  (registers the model families)
    from seqlab.registry import MODELS
    from seqlab.run_config import resolve_run

    root = Path(__file__).resolve().parent.parent
    cfg = resolve_run(root / "configs" / f"multi30k-{name}.yaml")
    torch.manual_seed(0)
    entry = MODELS.get(cfg.model)
    return entry.target(cfg.model_cfg, src_vocab=vocab, tgt_vocab=vocab, pad_id=0).eval()


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--searches", default="1,5", help="beam widths; 1 = greedy")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-bf16", action="store_true", help="fp32 and int8 only")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument(
        "--model",
        choices=["transformer", "luong", "bahdanau", "sutskever", "cho"],
        default="transformer",
        help="the peers' Transformer, or an RNN seq2seq preset's shape",
    )
    args = p.parse_args(argv)
    size = pm.TINY if args.tiny else pm.SMALL
    model, batches = decode_workload(size, args.sentences, 32, args.threads)
    if args.model != "transformer":
        model = rnn_preset(args.model, size.vocab)
    precisions = ["fp32", "int8"]
    if not args.no_bf16 and cpu_has_fast_bf16(read_cpu_flags()):
        precisions.insert(1, "bf16")
    head = " | ".join(f"{q} ms / step" for q in precisions)
    vs = " | ".join(f"{q} vs fp32 | {q} same 1-best" for q in precisions[1:])
    rows = [f"| search | {head} | {vs} |", "|---" + "|---:" * (3 * len(precisions) - 2) + "|"]
    print(f"{args.model}: {args.sentences} sentences, {args.new_tokens} new tokens, "
          f"{args.reps} reps, {args.threads} threads, torch {torch.__version__}")  # fmt: skip
    print("\n".join(rows), flush=True)
    n = args.new_tokens
    for beam in (int(b) for b in args.searches.split(",")):
        runs = {q: pdec.decode_rep("seqlab", model, batches, beam, n, q) for q in precisions}
        best_of = functools.partial(one_best, model, batches, beam, n, "seqlab")
        best = {q: best_of(q) for q in precisions}
        times = round_robin(runs, args.reps)
        steps = len(batches) * n
        ms = {q: 1000 * sorted(t)[len(t) // 2] / steps for q, t in times.items()}
        cells = [f"{ms[q]:.2f}" for q in precisions]
        for q in precisions[1:]:
            ratios = sorted(a / b for a, b in zip(times["fp32"], times[q], strict=True))
            cells += [
                f"{ratios[len(ratios) // 2]:.2f}×",
                f"{same_share(best[q], best['fp32']):.0%}",
            ]
        search = "greedy" if beam == 1 else f"beam {beam}"
        rows.append(f"| {search} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
