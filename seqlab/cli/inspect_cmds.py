"""``seqlab inspect``: the experiments of seqlab.inspect, each printing its table and
writing its JSON record and PNG figures (docs/inspect.md).

    seqlab inspect gradflow [--out DIR] [--distance N] [--steps S] [--hidden H]
        [--depths 20,56] [--distractors random|ptb] [--data-dir DIR] [--seed S]
    seqlab inspect complexity [--out DIR] [--quick]
    seqlab inspect positional [--out DIR] [--d-model D] [--positions P]
    seqlab inspect attention-speed [--out DIR] [--sizes 64,128,256] [--src-len S]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError

DEFAULT_OUT = "runs/inspect"


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise SeqlabError(f"{what} must be positive integers separated by commas, got {text!r}")
    return values


def _positive(value: int, flag: str) -> None:
    if value < 1:
        raise SeqlabError(f"{flag} must be >= 1, got {value}")


def _cmd_gradflow(args: argparse.Namespace) -> int:
    from seqlab import api
    from seqlab.data.agreement import make_task
    from seqlab.inspect import gradient_flow as gf

    for flag in ("distance", "steps", "hidden"):
        _positive(getattr(args, flag), f"--{flag}")
    depths = _ints(args.depths, "--depths")
    bad = [d for d in depths if d < 8 or (d - 2) % 6]
    if bad:
        raise SeqlabError(f"--depths: ResNet depths are 6n + 2 (8, 14, 20, 32, 56), got {bad}")
    data_dir = args.data_dir or (api.default_data_dir() if args.distractors == "ptb" else None)
    task = make_task(args.distractors, data_dir)
    record = gf.run(
        Path(args.out),
        task,
        args.distance,
        args.steps,
        args.hidden,
        depths,
        args.seed,
        log=lambda line: print(line, flush=True),
    )
    print(f"\nthrough time ({task.source} distractors, distance {args.distance}):")
    print(gf.time_table(record["time"]))
    print("\nthrough depth (ResNet vs its plain twin, at initialisation):")
    print(gf.depth_table(record["depth"]))
    _print_files(record["files"])
    return 0


def _print_files(files: dict[str, Any]) -> None:
    print("\nwrote " + ", ".join(str(v) for v in files.values()))


def add_commands(sub: Any) -> None:
    p = sub.add_parser("inspect", help="gradient flow, complexity and other measured claims")
    inspect = p.add_subparsers(dest="inspect_command", metavar="EXPERIMENT", required=True)

    g = inspect.add_parser("gradflow", help="‖∂L/∂h_k‖ vs distance (RNN/GRU/LSTM); vs depth")
    g.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    g.add_argument("--distance", type=int, default=30, help="distractors between subject and verb")
    g.add_argument("--steps", type=int, default=300, help="training updates per variant")
    g.add_argument("--hidden", type=int, default=64, help="recurrent width H")
    g.add_argument("--depths", default="20,56", help="ResNet depths 6n+2 (default 20,56)")
    g.add_argument("--distractors", choices=("random", "ptb"), default="random")
    g.add_argument("--data-dir", help="folder holding ptb/ (for --distractors ptb)")
    g.add_argument("--seed", type=int, default=0)
    g.set_defaults(func=_cmd_gradflow)
