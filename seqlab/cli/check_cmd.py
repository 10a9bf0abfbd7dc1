"""``seqlab check``: the invariance checks of ``seqlab.eval.invariants`` on a trained
translation or algorithmic run (on its own data or on any source file), of
``seqlab.eval.lm_invariants`` on a language-model run and of
``seqlab.eval.sentence_invariants`` on a classifier or tagger.

    seqlab check RUN_OR_CHECKPOINT [--split valid] [--src FILE] [--sentences 32]
                 [--beam K] [--length 64] [--dtype float64|float32] [--exported DIR]
                 [--json]

Prints one row per check (what was compared, the largest difference, the tolerance,
ok / FAILED, and where the largest difference is); with ``--json``, one JSON object.
Exit status 0 when every check passes, 1 when any fails (usable in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError

DTYPES = ("float64", "float32")


def _no_split(loaded: Any, split: str, names: Any) -> SeqlabError:
    return SeqlabError(
        f"{loaded.checkpoint}: the run has no '{split}' split (it has {', '.join(names)}); "
        "give --split one of them or --src FILE"
    )


def format_table(checks: list[Any]) -> str:
    """The checks as an aligned text table, one row each."""
    head = ("check", "compared", "max |Δ|", "tol", "result", "largest difference at")
    rows = [
        (c.name, c.compared, f"{c.max_diff:.1e}", f"{c.tol:.0e}",
         "ok" if c.passed else "FAILED" + (f" ({c.mismatches} differ)" if c.mismatches else ""),
         c.worst)
        for c in checks
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [head, *rows]
    )


def _search_checks(
    loaded: Any, dtype: Any, sources: Any, n: int, origin: str, s: Any, rule: str | None = None
) -> tuple[list, dict, str]:
    """The five translation checks; the JSON fields and the header line that describe them."""
    from seqlab.eval.invariants import run_checks

    info = {"sentences": n, "source": origin, "beam": s.beam,
            "length_penalty": s.length_penalty, "coverage_penalty": s.coverage_penalty}  # fmt: skip
    head = f"{n} sentences of the {origin}, beam {s.beam} (α {s.length_penalty:g}"
    head += f", β {s.coverage_penalty:g}"
    if rule is not None:
        info["unk_rule"], head = rule, f"{head}, <unk>: {rule}"
    return run_checks(loaded.model, sources, s, dtype=dtype), info, head + ")"


def _translation(loaded: Any, args: argparse.Namespace, dtype: Any) -> tuple[list, dict, str]:
    """A translation run: source ids of the split or of ``--src`` (EOS appended)."""
    from seqlab.data.readers import read_lines
    from seqlab.data.vocab import EOS_ID

    task = loaded.task
    if args.src:
        lines = read_lines(args.src)[: args.sentences]
        sources = [task.src_tok.encode(x.strip()) + [EOS_ID] for x in lines]
        origin = str(args.src)
    else:
        if args.split not in task._split_names():
            raise _no_split(loaded, args.split, task._split_names())
        sources = [list(x) for x in task.ids[args.split][0][: args.sentences]]
        origin = f"{args.split} split"
    s = task._settings(args.beam if args.beam is not None else task.cfg.test_beam)
    checks, info, head = _search_checks(loaded, dtype, sources, len(sources), origin, s)
    return _with_export_checks(loaded, args, sources, s, checks, info, head)


def _algorithmic(loaded: Any, args: argparse.Namespace, dtype: Any) -> tuple[list, dict, str]:
    """A copy / reverse / sort run (the README's first run): source symbols of the split,
    or of ``--src`` (one sequence a line, symbols 0 … n_symbols − 1 as in ``predict``);
    the search gets room for ⌊2·|x|⌋ + 2 tokens, as ``predict``."""
    from seqlab.data.readers import read_lines
    from seqlab.tasks.algorithmic import N_SPECIAL
    from seqlab.tasks.translation_eval import SearchSettings

    task = loaded.task
    if args.src:
        n = task.cfg.n_symbols
        sources = []
        for i, line in enumerate(read_lines(args.src)[: args.sentences], 1):
            words = line.split()
            symbols = [int(x) for x in words if x.isascii() and x.isdigit()]
            if not words or len(symbols) != len(words) or not all(x < n for x in symbols):
                raise SeqlabError(
                    f"{args.src}:{i}: expected symbols 0 … {n - 1} separated by spaces "
                    f"(this run's task.n_symbols = {n}), got {line.strip()!r}"
                )
            sources.append([x + N_SPECIAL for x in symbols])
        origin = str(args.src)
    else:
        if args.split not in task.splits:
            raise _no_split(loaded, args.split, task.splits)
        sources = [list(x) for x, _ in task.splits[args.split][: args.sentences]]
        origin = f"{args.split} split"
    beam = args.beam if args.beam is not None else 4
    s = SearchSettings(beam=beam, max_len_a=2.0, max_len_b=2)
    return _search_checks(loaded, dtype, sources, len(sources), origin, s)


def _with_export_checks(
    loaded: Any, args: argparse.Namespace, sources: Any, s: Any, checks: list, info: dict,
    head: str,
) -> tuple[list, dict, str]:  # fmt: skip
    """With ``--exported DIR``, checks 6–7 after the five, and the files named."""
    if args.exported:
        more, info["exported"], note = _export_checks(loaded, args.exported, sources, s)
        checks, head = checks + more, f"{head}; {note}"
    return checks, info, head


def _export_checks(loaded: Any, folder: str, sources: Any, s: Any) -> tuple[list, dict, str]:
    """Checks 6–7 (``seqlab.eval.export_invariants``): the run against the files
    ``seqlab export`` wrote to ``folder``; with what the header and the JSON say of them."""
    from seqlab.eval.export_invariants import run_export_checks
    from seqlab.serve.exported_model import use_exported

    exported = use_exported(loaded, folder).model
    info, note = _describe_export(exported.meta, folder)
    return run_export_checks(loaded.model, exported, sources, s), info, note


def _describe_export(meta: dict, folder: str) -> tuple[dict, str]:
    """What the JSON (``exported``) and the header line say of an export folder."""
    made = meta.get("checkpoint") or {}
    info = {"folder": str(folder), "format": meta.get("format"), "step": made.get("step")}
    note = f"exported {meta.get('format')} files in {folder}"
    if made.get("step") is not None:
        note += f" (from step {made['step']})"
    return info, note


def _copy(loaded: Any, args: argparse.Namespace, dtype: Any) -> tuple[list, dict, str]:
    """A pointer-generator run (``seqlab.eval.copy_invariants``), with its ``<unk>`` rule."""
    from seqlab.data.readers import read_lines
    from seqlab.eval.copy_invariants import CopySources

    task, cfg = loaded.task, loaded.task.cfg
    if args.src:
        examples = task._examples_of(read_lines(args.src)[: args.sentences])
        origin = str(args.src)
    else:
        if args.split not in task.examples:
            raise _no_split(loaded, args.split, task.examples)
        examples, origin = task.examples[args.split][: args.sentences], f"{args.split} split"
    beam = args.beam if args.beam is not None else cfg.test_beam
    s = dataclasses.replace(task._settings(beam), coverage_penalty=cfg.coverage_penalty)
    rule = "unk_to_copy" if cfg.unk_to_copy else "block_unk" if cfg.block_unk else "none"
    sources = CopySources(examples, len(task.tgt_vocab), cfg.block_unk, cfg.unk_to_copy,
                          cfg.coverage_penalty)  # fmt: skip
    checks, info, head = _search_checks(loaded, dtype, sources, len(examples), origin, s, rule)
    return _with_export_checks(loaded, args, sources, s, checks, info, head)


def _lm(loaded: Any, args: argparse.Namespace, dtype: Any) -> tuple[list, dict, str]:
    """The language-model checks on ``--sentences`` rows of ``--length`` tokens."""
    from seqlab.eval.lm_invariants import lm_rows, run_lm_checks

    if args.src or args.beam is not None:
        flag = "--src" if args.src else "--beam"
        raise SeqlabError(f"{flag} is for translation runs; a language model reads --split rows")
    context = getattr(getattr(loaded.model, "cfg", None), "context", None)
    length = args.length if args.length is not None else min(64, context or 64)
    if length < 2:
        raise SeqlabError(
            f"--length must be >= 2 (a state is carried between halves), got {length}"
        )
    if context is not None and length > context:  # step() would slide a window past it
        raise SeqlabError(
            f"--length {length} exceeds the model's context of {context} tokens "
            f"(model.context): give --length {context} or less"
        )
    try:
        x = lm_rows(loaded.task.ids(args.split), args.sentences, length)
    except ValueError as e:
        raise SeqlabError(f"{args.split} split: {e}") from None
    info = {"rows": x.size(0), "length": length, "source": f"{args.split} split"}
    head = f"{x.size(0)} rows of {length} tokens of the {args.split} split"
    checks = run_lm_checks(loaded.model, x, dtype=dtype)
    if args.exported:
        from seqlab.eval.export_invariants import run_lm_export_checks
        from seqlab.serve.exported_model import use_exported

        exported = use_exported(loaded, args.exported).model
        checks += run_lm_export_checks(loaded.model, exported, x.cpu())
        info["exported"], note = _describe_export(exported.meta, args.exported)
        head += f"; {note}"
    return checks, info, head


def _sentences(loaded: Any, args: argparse.Namespace, dtype: Any) -> tuple[list, dict, str]:
    """A classify or tag run: the padding checks on ``--sentences`` of a split or ``--src``."""
    from seqlab.data.readers import read_lines
    from seqlab.eval.sentence_invariants import (
        classify_batches,
        run_sentence_checks,
        tag_batches,
    )

    if args.beam is not None:
        raise SeqlabError("--beam is for translation runs; a classifier or tagger has no search")
    task, n = loaded.task, args.sentences
    if args.src:
        lines = [x.strip() for x in read_lines(args.src)[:n]]  # empty lines are refused
        origin = str(args.src)
    else:
        names = task.splits if loaded.config.task == "classify" else task.ids
        if args.split not in names:
            raise _no_split(loaded, args.split, names)
        origin = f"{args.split} split"
    if loaded.config.task == "classify":
        if args.src:
            ids, grams = [task.encode_text(x) for x in lines], task.texts_grams(lines)
        else:
            data = task.splits[args.split]
            ids, grams = data.ids[:n], None if data.grams is None else data.grams[:n]
        batches = classify_batches(task, ids, grams)
    else:
        if args.src:
            from seqlab.tasks.tagging import tokenize

            tokens = [[p[0] for p in tokenize(x)] for x in lines]
            W = task.cfg.max_word_len
            words = [[task.word_id(t) for t in s] for s in tokens]
            chars = [[task.chars.encode(t[:W]) for t in s] for s in tokens]
        else:
            words, chars, _ = task.ids[args.split]
            words, chars = words[:n], chars[:n]
        batches = tag_batches(task, words, chars)
    info = {"sentences": batches.n, "source": origin}
    head = f"{batches.n} sentences of the {origin}"
    return run_sentence_checks(loaded.model, batches, dtype=dtype), info, head


def _cmd_check(args: argparse.Namespace) -> int:
    import torch

    from seqlab import api

    if args.sentences < 1:
        raise SeqlabError(f"--sentences must be >= 1, got {args.sentences}")
    if args.beam is not None and args.beam < 1:
        raise SeqlabError(f"--beam must be >= 1, got {args.beam}")
    if args.exported and args.device != "cpu":
        raise SeqlabError(
            f"--exported runs the exported files on the CPU: drop --device {args.device}"
        )
    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = api.load(args.path, data_dir=data_dir, device=args.device)
    kinds = {"translation": _translation, "copy_translation": _copy, "lm": _lm,
             "classify": _sentences, "tag": _sentences, "algorithmic": _algorithmic}  # fmt: skip
    if loaded.config.task in kinds and loaded.config.task != "lm" and args.length is not None:
        raise SeqlabError("--length is for language models; this run checks sentences")
    if loaded.config.task not in kinds:
        raise SeqlabError(
            f"{loaded.checkpoint}: seqlab check runs on translation, language-model, "
            f"classification, tagging and algorithmic runs (task: {', '.join(kinds)}); "
            f"this run's task is '{loaded.config.task}'"
        )
    if args.exported and loaded.config.task not in ("translation", "copy_translation", "lm"):
        raise SeqlabError(
            f"--exported checks a translation, pointer-generator or language-model run "
            f"against its exported files; this run's task is '{loaded.config.task}' "
            "(seqlab export writes those models only)"
        )
    checks, info, head = kinds[loaded.config.task](loaded, args, getattr(torch, args.dtype))
    failed = sum(not c.passed for c in checks)
    if args.json:
        record = {"checkpoint": str(loaded.checkpoint), "step": loaded.step,
                  "model": loaded.config.model, "task": loaded.config.task, **info,
                  "dtype": args.dtype, "checks": [c.record() for c in checks],
                  "passed": failed == 0}  # fmt: skip
        print(json.dumps(record, ensure_ascii=False))
    else:
        print(f"{loaded.checkpoint} (step {loaded.step}, {loaded.config.model}): {head}, "
              f"{args.dtype}")  # fmt: skip
        print(format_table(checks))
        print(f"{len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``check`` on the top-level parser's subcommands."""
    p = sub.add_parser(
        "check", help="invariants of a trained run: cached == full, padding, batched == alone …"
    )
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--split", default="valid", help="the run's split to take sentences from")
    p.add_argument("--src", help="a source file, one sentence per line (instead of --split)")
    p.add_argument("--sentences", type=int, default=32, help="how many (the first N; LM: rows)")
    p.add_argument("--length", type=int, help="LM: tokens per row (default 64, ≤ its context)")
    p.add_argument("--beam", type=int, help="beam width K (default: the run's task.test_beam)")
    p.add_argument("--dtype", choices=DTYPES, default="float64", help="precision of the checks")
    p.add_argument("--exported", metavar="DIR",
                   help="also check the files seqlab export wrote there against the run "
                   "(translation, pointer-generator and LM runs: eager == exported)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--data-dir", help="data folder (default ../shared/data)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_check)
