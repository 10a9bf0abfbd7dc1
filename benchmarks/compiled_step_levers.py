"""Four levers of the compiled decoder step, each measured as before / after in one process
(docs/perf-notes-amx.md §49, §50; docs/perf-notes-compiled-beam.md §53, §54).

    python benchmarks/compiled_step_levers.py --lever attention|log-probs|stacked-qkv|select
        [--searches 1,5]
        [--precisions bf16,fp32] [--reps 7] [--threads 2] [--out FILE]

``--lever attention`` (§49): inductor rewrites a ``q kᵀ → softmax → · v`` subgraph it
recognises into ``aten._scaled_dot_product_flash_attention`` (``torch/_inductor/fx_passes/
fuse_attention.py``). In seqlab's compiled decoder step (``seqlab.decode.compiled``) that
replaces one of a layer's two single-query attentions, which the eager step runs as two
small float32 matmuls because SDPA's CPU kernel was slower for one query row
(docs/perf-notes-decoding.md §13). Variants, each its own copy of the same random-weight
model and so its own compiled step:

- ``before``: inductor as it comes (the library before §49);
- ``after``: compiled with the replacement's parameter check answering "no"
  (``seqlab.decode.compiled.attention_pattern_off``), so the graph keeps the matmuls.

``--lever log-probs`` (§50): the searches take log p = log_softmax(logits) in float32 at
every step. ``before``: eagerly, after the compiled step returned its (bf16 under autocast)
logits (``CompiledStep.log_probs_in_graph = False``); ``after``: inside the step's graph
(``CompiledStep.log_prob_step``), where inductor fuses the cast and the normalisation.

``--lever stacked-qkv`` (§53): self-attention's q, k, v in the compiled step. ``before``:
three products by W_q, W_k, W_v (traced inside ``seqlab.nn.multihead.
separate_projections()``); ``after``: one product by the stacked [W_q; W_k; W_v], whose
concatenation of frozen weights inductor folds into a constant (the library since §53,
where the SDPA rewrite is off: on a CPU with AMX, greedy's "after" keeps three products).
Both variants share the compiled function; dynamo guards the module flag that
``separate_projections`` sets, so each gets its own graph.

``--lever select`` (§54): beam search's candidate selection (chunk maxima, top-k, gathers;
``seqlab.decode.beam.select_candidates``). ``before``: eagerly, on the (A·K, V) log p the
compiled step returned (``CompiledStep.select_in_graph = False``); ``after``: inside the
step's graph (``CompiledStep.select_step``), which returns the 2K best extensions per
input instead of log p. Greedy search is not affected (``--searches 5``).

The workload of ``benchmarks/peers.py``'s decoding section (small Transformer, 100
sources in batches of 32, exactly 30 new tokens), the variants back to back in every
round (``paired_variants.round_robin``). Printed: ms per decoder step (median), the
paired speed-up of ``after`` over ``before``, and whether the 1-best tokens are equal.
"""

from __future__ import annotations

import argparse
import copy
import functools
import sys
from pathlib import Path

import torch

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
from seqlab.decode import compiled  # noqa: E402
from seqlab.nn.multihead import separate_projections  # noqa: E402


def prepare(lever: str, name: str, model: torch.nn.Module, beams: list[int]) -> None:
    """Set ``model``'s compiled steps (one per search width in ``beams``) up as ``name``
    ("before" or "after") of ``lever``, the other lever as the library has it (each variant
    has its own model copy and so its own ``CompiledStep``, which the searches reuse).
    ``attention``: "before" rewrites into SDPA, "after" does not, for every search."""
    for beam in beams:
        step = compiled.compiled_decoder(model, beam)
        if lever == "log-probs":
            step.log_probs_in_graph = name == "after"
        elif lever == "attention":
            step.sdpa_rewrite = name == "before"
        elif lever == "select":
            step.select_in_graph = name == "after"


def traced_as(lever: str, name: str, fn):
    """``fn`` run as variant ``name`` of ``lever``: for ``stacked-qkv``'s "before" inside
    ``separate_projections()`` (every call, so dynamo picks that variant's graph)."""
    if lever != "stacked-qkv" or name == "after":
        return fn

    def run(*args, **kwargs):
        with separate_projections():
            return fn(*args, **kwargs)

    return run


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    levers = ("attention", "log-probs", "stacked-qkv", "select")
    p.add_argument("--lever", choices=levers, required=True)
    p.add_argument("--searches", default="1,5", help="beam widths; 1 = greedy")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    torch._dynamo.config.recompile_limit = 64  # two steps × searches × precisions
    size = pm.TINY if args.tiny else pm.SMALL
    model, batches = decode_workload(size, args.sentences, 32, args.threads)
    models = {"before": model, "after": copy.deepcopy(model)}
    beams = [int(b) for b in args.searches.split(",")]
    for name, m in models.items():
        prepare(args.lever, name, m, beams)
    head = (f"lever {args.lever}: {args.sentences} sentences, {args.new_tokens} new tokens, "
            f"{args.reps} reps, {args.threads} threads, torch {torch.__version__}")  # fmt: skip
    rows = [
        "| search | precision | before ms / step | after ms / step | speed-up | same tokens |",
        "|---|---|---:|---:|---:|---|",
    ]
    print(head + "\n" + "\n".join(rows), flush=True)
    n = args.new_tokens
    for beam in beams:
        for precision in args.precisions.split(","):
            runs, best = {}, {}
            for name, m in models.items():
                rep = pdec.decode_rep("seqlab-compiled", m, batches, beam, n, precision)
                runs[name] = traced_as(args.lever, name, rep)
                impl = "seqlab-compiled"
                best_of = functools.partial(one_best, m, batches, beam, n, impl, precision)
                best[name] = traced_as(args.lever, name, best_of)()
            vs = against_first(round_robin(runs, args.reps), best, len(batches) * n)
            search = "greedy" if beam == 1 else f"beam {beam}"
            row = f"| {search} | {precision} " + versus_cells(vs, "before", "after")
            rows.append(row)
            print(row, flush=True)
    if args.out:
        args.out.write_text(head + "\n\n" + "\n".join(rows) + "\n")
    return rows


if __name__ == "__main__":
    main()
