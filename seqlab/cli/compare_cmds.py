"""``seqlab compare`` and ``seqlab report`` (library: seqlab/inspect/compare.py and
seqlab/inspect/report.py; docs/report.md).

    seqlab compare TASK --models a,b,c [--budget MIN] [--data-dir DIR] [--out DIR]
        [--runs DIR,DIR] [--decode-n N] [key=value ...] [MODEL:key=value ...]
    seqlab report [--out DIR] [--root DIR] [--claims FILE] [--runs DIR,DIR]
"""

from __future__ import annotations

import argparse
from typing import Any

from seqlab.errors import SeqlabError


def _list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _cmd_compare(args: argparse.Namespace) -> int:
    from seqlab.inspect.compare import compare, compare_table

    for text in args.items:
        if "=" not in text:
            raise SeqlabError(f"compare: override {text!r} is not key=value (or MODEL:key=value)")
    if args.decode_n < 1:
        raise SeqlabError(f"compare: --decode-n must be >= 1, got {args.decode_n}")
    out = args.out or f"runs/compare-{args.task}"
    record = compare(
        args.task,
        _list(args.models),
        budget_minutes=args.budget,
        out=out,
        data_dir=args.data_dir,
        runs=_list(args.runs),
        overrides=args.items,
        decode_n=args.decode_n,
        quiet=not args.verbose,
        log=lambda line: print(line, flush=True),
    )
    print(compare_table(record))
    print(f"\nwrote {record['files']['json']}, {record['files']['png']}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from seqlab.inspect.report import build_report

    info = build_report(args.root, args.out, _list(args.runs), args.claims)
    for c in info["claims"]:
        print(f"{c.verdict:<15} {c.statement}")
    print(f"\nwrote {info['index']} ({len(info['figures'])} figures) and {info['claims_md']}")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("compare", help="train or load models on one task; one table + PNG")
    p.add_argument("task", help="preset prefix: reverse, multi30k, mr, ptb, … (configs/TASK-*)")
    p.add_argument("--models", help="comma-separated preset suffixes or registered models")
    p.add_argument("--budget", type=float, default=5.0, help="training minutes per model")
    p.add_argument("--data-dir", help="data folder (default ../shared/data)")
    p.add_argument("--out", help="output folder (default runs/compare-TASK)")
    p.add_argument("--runs", help="comma-separated run directories to load instead of training")
    p.add_argument("--decode-n", type=int, default=200, help="sentences timed for decoding")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument("items", nargs="*", metavar="key=value", help="overrides (MODEL:key=value)")
    p.set_defaults(func=_cmd_compare)

    r = sub.add_parser("report", help="claims + results as one static HTML page, docs/claims.md")
    r.add_argument("--out", default="runs/report", help="page folder (default runs/report)")
    r.add_argument("--root", default=".", help="repository root holding docs/ and tests/")
    r.add_argument("--claims", help="claims markdown (default ROOT/docs/claims.md)")
    r.add_argument("--runs", help="comma-separated run directories to include")
    r.set_defaults(func=_cmd_report)
