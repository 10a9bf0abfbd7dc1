"""``seqlab inspect``: the experiments of seqlab.inspect, each printing its table and
writing its JSON record and PNG figures (docs/inspect.md).

    seqlab inspect gradflow [--out DIR] [--distance N] [--steps S] [--hidden H]
        [--depths 20,56] [--distractors random|ptb] [--data-dir DIR] [--seed S]
    seqlab inspect complexity [--out DIR] [--quick] [--families rnn,rnn_attention,transformer]
    seqlab inspect positional [--out DIR] [--d-model D] [--positions P] [--offsets 1,5,50]
    seqlab inspect attention-speed [--out DIR] [--lengths 16,64,256] [--width D] [--batch B]
    seqlab inspect trace CHECKPOINT [INPUT ...] [--out DIR] [--png] [--beam K] [--split S]
        [--seed S]      (attention / copy gate / coverage / pointer gate / pointer network /
                        NTM memory records)

``benchmarks/complexity.py`` runs the same sweep as ``inspect complexity`` and also writes
its section of docs/results.md.
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


def _save(out: str, stem: str, record: dict[str, Any], plot: Any) -> dict[str, Path]:
    """``OUT/<stem>.json`` (the record) and ``OUT/<stem>.png`` (``plot(record, path)``)."""
    from seqlab.inspect.figures import write_json

    folder = Path(out)
    return {
        "json": write_json(folder / f"{stem}.json", record),
        "png": plot(record, folder / f"{stem}.png"),
    }


def _cmd_complexity(args: argparse.Namespace) -> int:
    from seqlab.inspect import complexity as cx
    from seqlab.inspect.complexity_table import exponent_table, plot_against_t, top_t_table

    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(cx.FAMILIES))
    if unknown:
        raise SeqlabError(f"--families: unknown {unknown}; choose from {', '.join(cx.FAMILIES)}")
    sweep = cx.QUICK if args.quick else cx.Sweep()
    record = cx.run_sweep(sweep, families, log=lambda line: print(line, flush=True))
    files = _save(args.out, "complexity", record, plot_against_t)
    print()
    print(exponent_table(record))
    print()
    print(top_t_table(record))
    _print_files(files)
    return 0


def _cmd_positional(args: argparse.Namespace) -> int:
    from seqlab.inspect import positional_offset as po

    offsets = _ints(args.offsets, "--offsets")
    if args.d_model % 2 or args.d_model < 2:
        raise SeqlabError(f"--d-model must be even and >= 2, got {args.d_model}")
    if args.positions <= max(offsets) + args.d_model:
        raise SeqlabError(
            f"--positions must exceed the largest offset + d_model = "
            f"{max(offsets) + args.d_model}, got {args.positions}"
        )
    record = po.offset_record(args.d_model, args.positions, offsets)
    files = _save(args.out, "positional-offset", record, po.plot_offsets)
    print(po.offset_table(record))
    _print_files(files)
    return 0


def _cmd_attention_speed(args: argparse.Namespace) -> int:
    from seqlab.inspect import attention_speed as sp

    lengths = _ints(args.lengths, "--lengths")
    for flag in ("width", "batch", "repeats"):
        _positive(getattr(args, flag), f"--{flag}")
    record = sp.speed_record(lengths, args.width, args.batch, args.repeats)
    files = _save(args.out, "attention-speed", record, sp.plot_speed)
    print(sp.speed_table(record))
    _print_files(files)
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from seqlab import api
    from seqlab.inspect import traces

    loaded = api.load(args.checkpoint)
    if args.exported:  # the gate, pointer, copy and coverage computed by the exported files
        from seqlab.serve.exported_model import use_exported

        loaded = use_exported(loaded, args.exported)
    records = traces.trace(loaded, args.items, beam=args.beam, split=args.split, seed=args.seed)
    for i, record in enumerate(records):
        files = traces.save(record, Path(args.out) / f"trace-{i}", png=args.png)
        print(f"trace-{i}: {record.describe()}")
        print("  wrote " + ", ".join(str(f) for f in files))
    return 0


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

    c = inspect.add_parser("complexity", help="time and memory vs t, k, d; fitted exponents")
    c.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    c.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    c.add_argument("--families", default="rnn,rnn_attention,transformer", help="comma-separated")
    c.set_defaults(func=_cmd_complexity)

    q = inspect.add_parser("positional", help="PE(pos+k) = M_k PE(pos), measured")
    q.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    q.add_argument("--d-model", type=int, default=64)
    q.add_argument("--positions", type=int, default=512)
    q.add_argument("--offsets", default="1,2,5,10,50,100")
    q.set_defaults(func=_cmd_positional)

    a = inspect.add_parser("attention-speed", help="dot-product vs additive attention time")
    a.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    a.add_argument("--lengths", default="16,32,64,128,256", help="T = S values")
    a.add_argument("--width", type=int, default=128, help="D = A")
    a.add_argument("--batch", type=int, default=8)
    a.add_argument("--repeats", type=int, default=5, help="timings per point (median)")
    a.set_defaults(func=_cmd_attention_speed)

    t = inspect.add_parser(
        "trace", help="attention, copy gate, coverage, NTM memory of a checkpoint as npz + JSON"
    )
    t.add_argument("checkpoint", help="run directory or checkpoint")
    t.add_argument(
        "items",
        nargs="*",
        metavar="INPUT",
        help="sentences (translation, copy_translation, lm), sequence lengths (ntm) or "
        "scene indices (caption)",
    )
    t.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    t.add_argument("--png", action="store_true", help="also write the heatmaps")
    t.add_argument("--beam", type=int, default=1, help="beam width (1 = greedy)")
    t.add_argument(
        "--split", default="test", help="caption, pointer: split of the scene / example indices"
    )
    t.add_argument("--seed", type=int, default=0, help="ntm: which random example")
    t.add_argument("--exported", metavar="DIR",
                   help="trace the files seqlab export wrote there (copy_translation, "
                   "pointer_sentinel lm) instead of the checkpoint's model")  # fmt: skip
    t.set_defaults(func=_cmd_trace)
