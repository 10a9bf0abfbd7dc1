"""``seqlab`` entry point: ``seqlab --version``, ``list``, ``demo``, ``train``, ``evaluate``,
``config`` (the last three in ``seqlab.cli.train_cmds``).

User errors (bad config, missing file, invalid data) print one clear line and exit with
code 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import NoReturn

from seqlab import __version__
from seqlab.cli import (
    check_cmd,
    distill_cmd,
    embed_cmds,
    lm_cmds,
    predict_cmd,
    serve_cmd,
    train_cmds,
    translate_cmd,
)
from seqlab.errors import SeqlabError
from seqlab.train.distributed import exit_without_teardown, in_torchrun_child
from seqlab.train.kernel_cache import enlarge_kernel_cache

# Errors caused by the user's input: one line on stderr, exit code 2 (traceback: --debug).
USER_ERRORS = (SeqlabError, KeyError, FileNotFoundError, PermissionError, UnicodeDecodeError)


def _cmd_list(args: argparse.Namespace) -> int:
    from seqlab import catalog

    registries = catalog.load_all()
    for kind, reg in registries.items():
        print(f"{kind} ({len(reg)}):")
        if not len(reg):
            print("  (none yet)")
        for entry in reg:
            print(f"  {entry.name:<24} {entry.doc}")
            if args.fields and entry.config_cls is not None:
                for f in dataclasses.fields(entry.config_cls):
                    default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
                    print(f"      {f.name}: {f.type}{default}")
    found = catalog.presets()
    print(f"presets ({len(found)}):")
    if not found:
        print("  (none yet)")
    for path in found:
        print(f"  {path.stem:<24} {path}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from seqlab.demo import run_demo

    return run_demo(
        seconds=args.seconds,
        seed=args.seed,
        quick=args.quick,
        minutes=args.minutes,
        run_dir=args.run_dir,
        overrides=args.items,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seqlab", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"seqlab {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="registered models, tasks, searches, schedules, presets")
    p.add_argument("--fields", action="store_true", help="also print each config's fields")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("demo", help="the notes' worked examples + a model trained here")
    p.add_argument("--quick", action="store_true", help="1-minute sequence-reversal demo")
    p.add_argument("--minutes", type=float, default=14.0, help="translation training budget")
    p.add_argument("--seconds", type=float, default=60.0, help="--quick training budget")
    p.add_argument("--run-dir", help="where the translation run goes (default runs/demo-…)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("items", nargs="*", metavar="key=value", help="overrides for the preset")
    p.set_defaults(func=_cmd_demo)

    from seqlab.cli import compare_cmds, inspect_cmds

    inspect_cmds.add_commands(sub)
    compare_cmds.add_commands(sub)
    train_cmds.add_commands(sub)
    translate_cmd.add_command(sub)
    distill_cmd.add_command(sub)
    check_cmd.add_command(sub)
    lm_cmds.add_commands(sub)
    predict_cmd.add_command(sub)
    embed_cmds.add_command(sub)
    serve_cmd.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    enlarge_kernel_cache()  # before any bf16 product builds a oneDNN kernel (kernel_cache.py)
    parser = build_parser()
    # key=value overrides may follow options (seqlab train X.yaml --run-dir D a.b=1):
    # argparse stops at the first option, so the leftovers join the command's items.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "items") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.items = [*args.items, *extra]
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        if args.debug:
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"seqlab: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seqlab: interrupted", file=sys.stderr)
        return 130


def entry() -> NoReturn:
    """The ``seqlab`` command and ``python -m seqlab``: run :func:`main`, exit with its code.

    A rank started by torchrun leaves through ``exit_without_teardown`` (seqlab.train.
    distributed): its files are written and its process group is left by then, and the
    interpreter's teardown is where gloo's native threads can abort a finished rank.
    """
    if not in_torchrun_child():
        sys.exit(main())
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    exit_without_teardown(code)


if __name__ == "__main__":
    entry()
