"""``seqlab distill``: a teacher's translations of its training sources, for a student.

    seqlab distill TEACHER_RUN [--ensemble RUN]… --out FILE [--beam K]
    seqlab train configs/multi30k-pointer-generator.yaml task.distill_tgt=FILE

Sequence-level knowledge distillation (Kim & Rush 2016; seqlab.tasks.copy_distill): the
teacher (a run, or with ``--ensemble`` the linear pool of runs) decodes every raw training
source with beam search, ``<unk>`` kept; FILE gets one line of words per training pair, in
file order, written atomically (an existing FILE is replaced only when all is decoded).
A student trained with ``task.distill_tgt=FILE`` learns the teacher's outputs in place of
the references, with the teacher's vocabularies. ``copy_translation`` runs only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from seqlab.errors import SeqlabError


def _cmd_distill(args: argparse.Namespace) -> int:
    from seqlab.atomic_file import write_atomic
    from seqlab.cli.translate_cmd import load_run_or_ensemble, search_overrides
    from seqlab.tasks.copy_distill import distill_lines

    if args.beam < 1:
        raise SeqlabError(f"--beam must be >= 1, got {args.beam}")
    search = search_overrides(args)
    search.pop("test_compile", None)
    search.pop("coverage_penalty", None)  # the run's own (task.coverage_penalty)
    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = load_run_or_ensemble(args, data_dir)
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.perf_counter() - start, 1e-9)
        print(f"distill: {done}/{total} sources ({rate:.0f}/s)", file=sys.stderr, flush=True)

    lines = distill_lines(loaded.task, loaded.model, beam=args.beam, progress=progress, **search)
    write_atomic(args.out, "".join(line + "\n" for line in lines))
    print(f"wrote {len(lines)} distilled targets to {args.out}")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``distill`` on the top-level parser's subcommands."""
    from seqlab.cli.translate_cmd import add_ensemble_option

    p = sub.add_parser(
        "distill", help="a teacher run's translations of its training sources (a student's targets)"
    )
    p.add_argument("path", metavar="TEACHER_RUN")
    p.add_argument("--out", required=True, help="the file to write (one line per training pair)")
    p.add_argument("--beam", type=int, default=4, help="beam width K (1 = greedy)")
    p.add_argument("--length-penalty", type=float, help="GNMT alpha (default: the run's)")
    p.add_argument("--max-len-a", type=float, help="max output = a·|x| + b (default: the run's)")
    p.add_argument("--max-len-b", type=int, help="default: the run's task.max_len_b")
    p.add_argument("--data-dir", help="data folder (default ../shared/data)")
    p.add_argument("--device", default="cpu")
    add_ensemble_option(p, "TEACHER_RUN")
    p.set_defaults(func=_cmd_distill, coverage_penalty=None, compile=False)
