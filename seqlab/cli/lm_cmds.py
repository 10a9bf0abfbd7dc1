"""``seqlab generate`` and ``seqlab score``: use a trained language model (docs/lm.md).

    seqlab generate RUN_OR_CHECKPOINT [--prompt TEXT] [--max-tokens N] [--temperature T]
                    [--top-k K] [--top-p P] [--seed S] [--precision fp32|bf16|fp16|int8|auto]
    seqlab score RUN_OR_CHECKPOINT TEXT [--json] [--precision fp32|bf16|fp16|auto]

``generate`` prints the prompt followed by N sampled tokens (the same seed gives the same
text). ``score`` prints log P(TEXT) (natural log and log10, the sentence's perplexity) and
a table of every token with p(token | everything before it) and ln p; ``--json`` prints
one JSON object instead. The checkpoint carries its config and vocabulary, so neither
command needs the training data. Errors (missing checkpoint, empty prompt, characters a
character model never saw) print one line and exit with code 2.

``--precision`` (default fp32) is decoding's (``seqlab.decode.precision``): bf16/fp16
autocast, and for ``generate`` also int8 linear layers in the sampler's steps (a CPU); the
prompt is read in fp32 under int8. ``score`` has no int8: it runs no search, and its
log-probabilities are fp32's unless bf16/fp16 is asked for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError


def _load_lm(args: argparse.Namespace) -> Any:
    """The run, or with ``--ensemble RUN …`` the runs' linear pool (``api.load_ensemble``,
    seqlab.models.lm_ensemble); a run of another task is refused."""
    from seqlab.cli.translate_cmd import load_run_or_ensemble

    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = load_run_or_ensemble(args, data_dir)
    if loaded.config.task != "lm":
        raise SeqlabError(
            f"{loaded.checkpoint}: a '{loaded.config.task}' model, not a language model "
            "(train one with a configs/ptb-*.yaml or configs/shakespeare-char-*.yaml preset)"
        )
    return loaded


def _cmd_generate(args: argparse.Namespace) -> int:
    from seqlab.decode.precision import decoding_context, warn_if_int8_is_slow

    precision = decoding_context(args.precision, args.device)  # refused before loading
    warn_if_int8_is_slow(args.precision)
    loaded = _load_lm(args)
    with precision:  # entered once: int8_decoding() is a one-shot context
        text = loaded.generate(
            args.prompt,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
        )
    prompt = args.prompt or ""
    joiner = " " if prompt and not loaded.task.is_char and not prompt.endswith("\n") else ""
    print(prompt + joiner + text)
    return 0


VISIBLE = {" ": "␣", "\n": "\\n", "\t": "\\t", "\r": "\\r"}  # characters shown by name


def format_score(result: Any) -> str:
    """The human-readable ``score`` output: the total, then one row per token."""
    lines = [
        f"log P = {result.log_prob:.4f} (natural log; log10 P = {result.log10_prob:.4f}) "
        f"over {len(result.tokens)} tokens, perplexity {result.perplexity:.2f}",
        f"{'t':>3}  {'token':<20} {'p(token | before)':>18} {'ln p':>10}",
    ]
    for t, tok in enumerate(result.tokens, 1):
        shown = VISIBLE.get(tok.token, tok.token)
        lines.append(f"{t:>3}  {shown:<20} {tok.p:>18.6g} {tok.log_p:>10.4f}")
    return "\n".join(lines)


def _cmd_score(args: argparse.Namespace) -> int:
    from seqlab.decode.precision import decoding_context, warn_if_int8_is_slow

    precision = decoding_context(args.precision, args.device)  # refused before loading
    warn_if_int8_is_slow(args.precision)
    loaded = _load_lm(args)
    text = " ".join(args.items)
    with precision:
        result = loaded.score(text)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        print(format_score(result))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    from seqlab.cli.translate_cmd import add_ensemble_option, add_exported_option

    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--data-dir", help="data folder (not needed: the vocabulary is stored)")
    p.add_argument("--device", default="cpu")
    add_ensemble_option(p, "RUN_OR_CHECKPOINT")
    add_exported_option(p)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``generate`` and ``score`` on the top-level parser's subcommands."""
    from seqlab.cli.translate_cmd import add_precision_option

    p = sub.add_parser("generate", help="sample text from a trained language model")
    _common(p)
    p.add_argument("--prompt", default=None, help="text to continue (default: a line start)")
    p.add_argument("--max-tokens", type=int, default=200, help="tokens to sample (N)")
    p.add_argument("--temperature", type=float, default=1.0, help="τ (0 = greedy argmax)")
    p.add_argument("--top-k", type=int, default=0, help="keep the K most probable (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass P (1 = all)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (same seed, same text)")
    add_precision_option(p, "sample")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("score", help="log P of a sentence under a language model")
    _common(p)
    # "items": seqlab.cli.main appends arguments found after options to args.items
    p.add_argument("items", nargs="+", metavar="TEXT", help="the sentence (words joined)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    add_precision_option(p, "score", int8=False)
    p.set_defaults(func=_cmd_score)
