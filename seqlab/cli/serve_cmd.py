"""``seqlab serve`` and ``seqlab export`` (docs/serving.md).

    seqlab serve RUN_OR_CHECKPOINT [--ensemble RUN]... [--host 127.0.0.1] [--port 8000] ...
    seqlab export RUN_OR_CHECKPOINT --format torchscript|onnx [--out DIR]

``serve`` loads the checkpoint with ``seqlab.load`` (with ``--ensemble``, the runs pooled as
one model: ``seqlab.load_ensemble``) and runs ``seqlab.serve.app`` with uvicorn on loopback
unless ``--host`` says otherwise; it prints the address and the endpoint of the
checkpoint's task. ``export`` writes the encoder and one decoder step
(``seqlab.serve.export``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError


def compile_decoding(
    loaded: Any, beams: tuple[int, ...] = (1, 5), precision: str = "fp32"
) -> float:
    """Turn on the compiled decoder step for everything ``loaded`` decodes from now on
    (``task.test_compile``; docs/decoding.md "Compiled decoding") and compile it at once,
    translating two dummy sentences with each beam width, so that the first request does
    not wait for the compile (~1 minute on a CPU). Returns the seconds it took.

    ``precision``: the server's (resolved), under whose autocast the requests will decode;
    the compiled graphs depend on it. Only translation runs of a Transformer: any other
    run is refused with a SeqlabError.
    """
    from seqlab.cli.translate_cmd import use_compiled_decoding
    from seqlab.train.precision import autocast_context

    use_compiled_decoding(loaded)
    start = time.perf_counter()
    device = next(loaded.model.parameters()).device
    for beam in dict.fromkeys(beams):  # in order, once each
        # two sentences, then one: a batch of several rows and a batch of one row take a
        # graph each (docs/perf-notes-compiled-beam.md §56); both compile here, so that a
        # one-sentence request does not wait for its graph
        with autocast_context(precision, device):  # type: ignore[arg-type]
            loaded.task.translate(loaded.model, ["a", "a b c"], beam=beam)
            loaded.task.translate(loaded.model, ["a b"], beam=beam)
    return time.perf_counter() - start


def _cmd_serve(args: argparse.Namespace) -> int:
    from seqlab.cli.translate_cmd import load_run_or_ensemble
    from seqlab.serve.app import endpoint_of
    from seqlab.serve.schemas import Limits

    try:
        limits = Limits(
            max_chars=args.max_chars,
            max_texts=args.max_texts,
            max_new_tokens=args.max_new_tokens,
            timeout_s=args.timeout,
            batch_wait_ms=args.batch_wait_ms,
        )
    except ValueError as exc:
        raise SeqlabError(f"serve: {exc}") from None
    try:
        from seqlab.serve.app import serve
    except ImportError as exc:  # fastapi / uvicorn missing
        raise SeqlabError(
            f"serve needs fastapi and uvicorn ({exc}): pip install 'seqlab[serve]'"
        ) from None
    from seqlab.decode.precision import (
        refuse_compiled_int8,
        resolve_decode_precision,
        warn_if_int8_is_slow,
    )

    precision = resolve_decode_precision(args.precision, args.device)  # a clear error if not
    refuse_compiled_int8(precision, args.compile)
    warn_if_int8_is_slow(precision)
    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = load_run_or_ensemble(args, data_dir)  # --compile with --ensemble: refused
    if args.compile:
        beams = (5, 1, int(getattr(loaded.task.cfg, "test_beam", 5)))  # 5: a request's default
        print("seqlab serve: compiling the decoder step …", flush=True)
        took = compile_decoding(loaded, beams, precision)
        print(f"seqlab serve: compiled in {took:.0f} s", flush=True)
    endpoint = endpoint_of(loaded.config.task)
    members = len(loaded.extra.get("members", ()))
    pool = f"an ensemble of {members} runs of " if members else ""
    print(
        f"seqlab serve: {pool}{loaded.config.model} ({loaded.config.task}, step {loaded.step}) "
        f"on http://{args.host}:{args.port}/  POST /{endpoint}, GET /health, GET /info",
        flush=True,
    )
    serve(loaded, host=args.host, port=args.port, limits=limits, precision=precision)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from seqlab import api
    from seqlab.serve.export import export

    loaded = api.load(args.path, device="cpu")
    out = Path(args.out) if args.out else Path(loaded.checkpoint).parent / f"export-{args.format}"
    for path in export(loaded, out, fmt=args.format):
        print(f"wrote {path}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``serve`` and ``export`` on the top-level parser's subcommands."""
    from seqlab.cli.translate_cmd import add_ensemble_option, add_exported_option

    p = sub.add_parser("serve", help="JSON API + web page for a trained checkpoint")
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--max-chars", type=int, default=1000, help="characters per text")
    p.add_argument("--max-texts", type=int, default=32, help="texts per request")
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens per /generate")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="micro-batch gathering")
    p.add_argument("--data-dir", help="data folder (default ../shared/data)")
    p.add_argument("--device", default="cpu")
    add_ensemble_option(p, "RUN_OR_CHECKPOINT")
    add_exported_option(p)
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16", "int8", "auto"],
        default="fp32",
        help="decode in fp32 (default: the weights' dtype), under bf16/fp16 autocast, or "
        "with int8 linear layers (CPU); auto: bf16 on a CPU with avx512_bf16/amx_bf16 or "
        "a GPU that has it, else fp32 (docs/decoding.md)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="Transformer translation: decode through the compiled, weight-frozen decoder "
        "step, compiled before serving (~1 min; docs/decoding.md)",
    )
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("export", help="TorchScript / ONNX encoder + decoder step of a checkpoint")
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript")
    p.add_argument("--out", help="output folder (default <checkpoint>/../export-<format>)")
    p.set_defaults(func=_cmd_export)
