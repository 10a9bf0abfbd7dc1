"""``seqlab check``: the invariance checks of ``seqlab.eval.invariants`` on a trained
translation run, on its own data or on any source file.

    seqlab check RUN_OR_CHECKPOINT [--split valid] [--src FILE] [--sentences 32]
                 [--beam K] [--dtype float64|float32] [--json]

Prints one row per check (what was compared, the largest difference, the tolerance,
ok / FAILED, and where the largest difference is); with ``--json``, one JSON object.
Exit status 0 when every check passes, 1 when any fails (usable in CI).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError

DTYPES = ("float64", "float32")


def _sources(loaded: Any, args: argparse.Namespace) -> tuple[list[list[int]], str]:
    """The first ``--sentences`` source id sequences (EOS appended) and where they came from."""
    from seqlab.data.readers import read_lines
    from seqlab.data.vocab import EOS_ID

    task = loaded.task
    if args.src:
        lines = read_lines(args.src)[: args.sentences]
        return [task.src_tok.encode(s.strip()) + [EOS_ID] for s in lines], str(args.src)
    names = task._split_names()
    if args.split not in names:
        raise SeqlabError(
            f"{loaded.checkpoint}: the run has no '{args.split}' split (it has "
            f"{', '.join(names)}); give --split one of them or --src FILE"
        )
    src_ids = task.ids[args.split][0][: args.sentences]
    return [list(s) for s in src_ids], f"{args.split} split"


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


def _cmd_check(args: argparse.Namespace) -> int:
    import torch

    from seqlab import api
    from seqlab.eval.invariants import run_checks

    if args.sentences < 1:
        raise SeqlabError(f"--sentences must be >= 1, got {args.sentences}")
    if args.beam is not None and args.beam < 1:
        raise SeqlabError(f"--beam must be >= 1, got {args.beam}")
    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = api.load(args.path, data_dir=data_dir, device=args.device)
    if loaded.config.task != "translation":
        raise SeqlabError(
            f"{loaded.checkpoint}: seqlab check runs on translation runs (task: translation); "
            f"this run's task is '{loaded.config.task}'"
        )
    sources, origin = _sources(loaded, args)
    cfg = loaded.task.cfg
    settings = loaded.task._settings(args.beam if args.beam is not None else cfg.test_beam)
    checks = run_checks(loaded.model, sources, settings, dtype=getattr(torch, args.dtype))
    failed = sum(not c.passed for c in checks)
    if args.json:
        print(json.dumps({
            "checkpoint": str(loaded.checkpoint), "step": loaded.step,
            "model": loaded.config.model, "sentences": len(sources), "source": origin,
            "beam": settings.beam, "length_penalty": settings.length_penalty,
            "coverage_penalty": settings.coverage_penalty, "dtype": args.dtype,
            "checks": [c.record() for c in checks], "passed": failed == 0,
        }, ensure_ascii=False))  # fmt: skip
    else:
        print(
            f"{loaded.checkpoint} (step {loaded.step}, {loaded.config.model}): "
            f"{len(sources)} sentences of the {origin}, beam {settings.beam} "
            f"(α {settings.length_penalty:g}, β {settings.coverage_penalty:g}), {args.dtype}"
        )
        print(format_table(checks))
        print(f"{len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``check`` on the top-level parser's subcommands."""
    p = sub.add_parser(
        "check", help="cached == full, padding, batched == unbatched, beam 1 == greedy"
    )
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--split", default="valid", help="the run's split to take sentences from")
    p.add_argument("--src", help="a source file, one sentence per line (instead of --split)")
    p.add_argument("--sentences", type=int, default=32, help="how many (the first N)")
    p.add_argument("--beam", type=int, help="beam width K (default: the run's task.test_beam)")
    p.add_argument("--dtype", choices=DTYPES, default="float64", help="precision of the checks")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--data-dir", help="data folder (default ../shared/data)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_check)
