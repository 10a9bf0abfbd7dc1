"""``seqlab train``, ``seqlab evaluate`` and ``seqlab config show|validate``.

    seqlab train CONFIG [key=value …] [--run-dir DIR] [--data-dir DIR] [--overwrite]
    seqlab train --resume RUN_DIR [train.key=value …]
    torchrun --standalone --nproc_per_node=2 -m seqlab train CONFIG …
    seqlab evaluate RUN_OR_CHECKPOINT [--split valid] [--ensemble RUN …]
    seqlab config show CONFIG [key=value …]
    seqlab config validate CONFIG [key=value …]

Each command calls the function of ``seqlab.api`` of the same name; errors are
``SeqlabError``s that ``seqlab.cli.main`` prints as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from seqlab.cli.translate_cmd import (
    add_exported_option,
    add_search_arguments,
    decoding_precision,
    load_run_or_ensemble,
    search_overrides,
    use_compiled_decoding,
)
from seqlab.errors import SeqlabError


def _is_main_rank() -> bool:
    return os.environ.get("RANK", "0") in ("", "0")


def _data_dir(args: argparse.Namespace) -> Path | None:
    return Path(args.data_dir) if args.data_dir else None


def _split_config(items: list[str], command: str) -> tuple[str, list[str]]:
    if not items:
        raise SeqlabError(f"seqlab {command}: give a preset, e.g. seqlab {command} CONFIG.yaml")
    config, overrides = items[0], items[1:]
    if "=" in config and not Path(config).exists():
        raise SeqlabError(
            f"seqlab {command}: the first argument must be the preset file, got '{config}' "
            f"(usage: seqlab {command} CONFIG [key=value …])"
        )
    return config, overrides


def _cmd_train(args: argparse.Namespace) -> int:
    from seqlab import api

    if args.resume:
        bad = [a for a in args.items if "=" not in a]
        if bad:
            raise SeqlabError(
                f"seqlab train --resume takes only key=value overrides (the config comes from "
                f"the run), got '{bad[0]}'"
            )
        if args.run_dir and Path(args.run_dir) != Path(args.resume):
            raise SeqlabError("seqlab train: --resume RUN_DIR already names the run dir")
        if args.overwrite:
            raise SeqlabError("seqlab train: --overwrite and --resume contradict each other")
        run = api.resume(args.resume, data_dir=_data_dir(args), overrides=args.items)
    else:
        config, overrides = _split_config(args.items, "train")
        run = api.train(
            config,
            run_dir=args.run_dir,
            data_dir=_data_dir(args),
            overrides=overrides,
            overwrite=args.overwrite,
        )
    if _is_main_rank():
        print(json.dumps(run.metrics))
    return 0


def format_table(rows: list[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    lines = [f"{'metric':<{width}}  value"]
    for key, value in rows:
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(lines)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from seqlab.decode.precision import quantized_nothing, resolve_decode_precision

    precision = decoding_precision(args)  # refused before the checkpoint is loaded
    resolved = resolve_decode_precision(args.precision, args.device)  # "auto" made concrete
    loaded = load_run_or_ensemble(args, _data_dir(args))  # --ensemble: the runs pooled
    if args.src or args.ref:
        with precision:
            return _evaluate_files(loaded, args, resolved)
    splits = getattr(loaded.task, "splits", None)
    if isinstance(splits, dict) and args.split not in splits:
        raise SeqlabError(
            f"task {loaded.config.task} has no split '{args.split}'; it has: {', '.join(splits)}"
        )
    if getattr(args, "compile", False):
        use_compiled_decoding(loaded)
    with precision as entered:
        metrics = loaded.evaluate(args.split)
    decoded_in = resolved
    if quantized_nothing(args.precision, entered):  # no search ran: nothing was int8
        decoded_in = "fp32"
        print(
            f"seqlab: warning: --precision int8 quantized nothing: task "
            f"{loaded.config.task}'s evaluation runs no greedy or beam search (int8 applies "
            "to their linear layers); the metrics are fp32's",
            file=sys.stderr,
        )
    signatures = dict(getattr(metrics, "signatures", None) or {})
    record = {"checkpoint": str(loaded.checkpoint), "step": loaded.step, "split": args.split}
    record["precision"] = decoded_in  # of the decoding (--precision, as it ran)
    if "members" in loaded.extra:
        record["ensemble"] = loaded.extra["members"]
    record |= {k: float(v) for k, v in metrics.items()}
    if signatures:
        record["signatures"] = signatures
    if not args.json:  # --json: the JSON object alone, so that it can be piped
        members = loaded.extra.get("members")
        what = f"ensemble of {', '.join(members)}" if members else f"checkpoint {loaded.checkpoint}"
        step = "" if members else f" (step {loaded.step})"
        print(f"{what}{step}, split {args.split}, decoded in {decoded_in}")
        print(format_table([(k, float(v)) for k, v in metrics.items()]))
        for name, sig in signatures.items():
            print(f"{name} signature: {sig}")
    print(json.dumps(record))
    return 0


def _evaluate_files(loaded: Any, args: argparse.Namespace, precision: str) -> int:
    """``seqlab evaluate CKPT --src F --ref F``: decode any parallel test set and score it."""
    from seqlab.cli.translate_cmd import print_file_scores

    if not (args.src and args.ref):
        raise SeqlabError("evaluate: give both --src FILE and --ref FILE (a parallel test set)")
    evaluate_files = getattr(loaded, "evaluate_files", None)
    if evaluate_files is None:
        raise SeqlabError(
            f"evaluate --src/--ref needs a translation model; {args.path} is task "
            f"'{loaded.config.task}' — use --split instead"
        )
    result = evaluate_files(
        args.src,
        args.ref,
        beam=args.beam,
        plot_path=args.plot,
        hyp_path=args.hyp,
        **search_overrides(args),
    )
    result["precision"] = precision  # of the decoding (--precision, "auto" resolved)
    print_file_scores(result, as_json=args.json)
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from seqlab import api
    from seqlab.cli.preflight import preflight

    config, overrides = _split_config(args.items, f"config {args.action}")
    cfg = api.resolve_config(config, overrides)
    if args.action == "show":
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
    else:
        checked = preflight(cfg, _data_dir(args) or api.default_data_dir())
        print(
            f"ok: {config} — task {cfg.task}, model {cfg.model}, schedule {cfg.schedule}, "
            f"train.max_steps {cfg.train.max_steps}"
        )
        for line in checked:
            print(f"  {line}")
    return 0


def _cmd_average(args: argparse.Namespace) -> int:
    from seqlab.train.averaging import average_checkpoints, last_checkpoints

    if args.last is not None:
        if len(args.paths) != 1:
            raise SeqlabError("--last N takes one run directory: seqlab average RUN --last N")
        paths = last_checkpoints(args.paths[0], args.last)
        run = Path(args.paths[0])
        default = (run / "checkpoints" if (run / "checkpoints").is_dir() else run) / (
            f"average-last{args.last}"
        )
    else:
        if len(args.paths) < 2 or args.out is None:
            raise SeqlabError(
                "give a run directory with --last N, or two or more checkpoints with --out DIR"
            )
        paths, default = [Path(p) for p in args.paths], None
    out = Path(args.out) if args.out else default
    average_checkpoints(paths, out)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) → {out}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register train / evaluate / average / config on the top-level parser's subcommands."""
    p = sub.add_parser("train", help="train a preset (or resume a run)")
    p.add_argument("items", nargs="*", metavar="CONFIG [key=value ...]")
    p.add_argument("--run-dir", help="output directory (default runs/<preset>-<timestamp>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    p.add_argument("--data-dir", help="data folder of file-based tasks (default ../shared/data)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty run dir")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("evaluate", help="metrics of a run's best checkpoint (or a checkpoint)")
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--split", default="valid")
    p.add_argument("--data-dir")
    p.add_argument("--device", default="cpu")
    p.add_argument("--src", help="source file of a parallel test set (translation)")
    p.add_argument("--ref", help="reference file of that test set")
    p.add_argument("--beam", type=int, default=5, help="beam width for --src/--ref")
    add_search_arguments(p)
    p.add_argument("--plot", help="write BLEU by source length as a PNG here")
    p.add_argument("--hyp", help="write the detokenised hypotheses here")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument(
        "--ensemble",
        nargs="+",
        action="extend",
        metavar="RUN",
        help="more runs decoded with RUN_OR_CHECKPOINT as one model (the mean of their "
        "probabilities; runs of one task, model type and vocabulary)",
    )
    add_exported_option(p)
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("average", help="average the weights of a run's last checkpoints")
    p.add_argument("paths", nargs="+", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--last", type=int, help="average the run's newest N step checkpoints")
    p.add_argument("--out", help="output checkpoint directory")
    p.set_defaults(func=_cmd_average)

    p = sub.add_parser(
        "config",
        help="show a resolved config, or validate it: types, device, precision, input files",
    )
    p.add_argument("action", choices=["show", "validate"])
    p.add_argument("items", nargs="*", metavar="CONFIG [key=value ...]")
    p.add_argument("--data-dir", help="where validate looks for relative input files")
    p.set_defaults(func=_cmd_config)
