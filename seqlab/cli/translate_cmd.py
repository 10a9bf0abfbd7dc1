"""``seqlab translate``: raw text in, detokenised translations out.

    seqlab translate RUN_OR_CHECKPOINT [--beam K] [--nbest N] [--json] [--ensemble RUN]…
                     [SENTENCE ...]
    echo "Ein Hund läuft." | seqlab translate runs/multi30k-transformer

Sentences come from the arguments, or else from standard input (one per line, decoded in
chunks so output streams). Output, one line per input: the best translation; with
``--nbest N`` > 1, N lines per input ``INDEX<TAB>SCORE<TAB>TEXT`` (best first; score =
log P / lp); with ``--json``, one JSON object per input: ``source``, ``hypotheses``,
``scores``, ``log_probs``, ``source_pieces``, ``target_pieces`` and ``attention`` (name →
nested lists, layer × head × target × source, for the best hypothesis; null when the
model exposes none). A pointer-generator (copy_translation) run gives the same, with its
copy switch ``p_gen`` and the copied words beside the attention in ``--json``. The
checkpoint is loaded with ``seqlab.load`` (its config and tokenizer travel inside it).
:func:`print_file_scores` prints ``evaluate_files`` results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torch

from seqlab.errors import SeqlabError

if TYPE_CHECKING:  # torch is imported by the command itself, not by `seqlab --version`
    from torch import Tensor

CHUNK = 256  # stdin lines decoded together


def _chunks(args: argparse.Namespace, stdin: TextIO) -> Iterator[list[str]]:
    if args.items:
        yield list(args.items)
        return
    chunk: list[str] = []
    for line in stdin:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _nested(x: Tensor) -> Any:
    return [_nested(v) for v in x] if x.dim() > 0 else round(float(x), 4)


def translation_record(t: Any) -> dict[str, Any]:
    """A ``Translation`` as a JSON-serialisable dict (attention as nested lists; for a
    pointer-generator also ``p_gen`` and ``copied`` per target piece)."""
    attention = None
    if t.attention is not None:
        attention = {name: _nested(a) for name, a in t.attention.items()}
    record = {
        "source": t.source,
        "hypotheses": [h.text for h in t.hypotheses],
        "scores": [round(h.score, 6) for h in t.hypotheses],
        "log_probs": [round(h.log_prob, 6) for h in t.hypotheses],
        "source_pieces": t.source_pieces,
        "target_pieces": t.target_pieces,
        "attention": attention,
    }
    if t.p_gen is not None:  # a pointer-generator's switch and copies, per target piece
        record["p_gen"] = _nested(t.p_gen)
        record["copied"] = t.copied
    return record


def plot_translation(t: Any, folder: Path, index: int) -> list[Path]:
    """One PNG per attention record of the best hypothesis: ``<folder>/<index>-<name>.png``,
    rows = target pieces, columns = source pieces; one panel per (layer, head) for the
    Transformer and ConvS2S, one map for RNN attention (seqlab.inspect.attention)."""
    from seqlab.inspect.attention import plot_attention

    paths: list[Path] = []
    src, tgt = t.source_pieces, t.target_pieces
    for name, weights in (t.attention or {}).items():
        w = torch.stack(list(weights)) if isinstance(weights, (list, tuple)) else weights
        # the record's axes follow its name (translation_eval._trim): encoder self-attention
        # is source × source, decoder self-attention target × target, the rest target × source
        rows, cols = (
            (src, src) if "encoder" in name else (tgt, tgt) if "self" in name else (tgt, src)
        )
        title = f"{name} attention: {t.text[:60]}"
        paths.append(plot_attention(w, cols, rows, folder / f"{index}-{name}.png", title))
    return paths


def _cmd_translate(args: argparse.Namespace, stdin: TextIO | None = None) -> int:

    if args.beam < 1 or not 1 <= args.nbest <= args.beam:
        raise SeqlabError(
            f"need 1 <= --nbest <= --beam, got --nbest {args.nbest} --beam {args.beam}"
        )
    precision = decoding_precision(args)  # refused before the checkpoint is loaded
    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = load_run_or_ensemble(args, data_dir)
    translate = getattr(loaded.task, "translate_detailed", None)
    _refuse_what_the_task_cannot(args, loaded)
    if translate is None:
        raise SeqlabError(
            f"{loaded.checkpoint}: task '{loaded.config.task}' does not translate "
            "(train a task: translation run)"
        )
    out = sys.stdout
    offset = 0
    with precision:  # entered once: int8_decoding() is a one-shot context
        for chunk in _chunks(args, stdin if stdin is not None else sys.stdin):
            results = translate(
                loaded.model,
                chunk,
                beam=args.beam,
                nbest=args.nbest,
                return_attention=args.json or bool(args.plot),
                **search_overrides(args),
            )
            if args.plot:
                for i, t in enumerate(results):
                    for path in plot_translation(t, Path(args.plot), offset + i):
                        print(f"attention heatmap: {path}", file=sys.stderr)
            for i, t in enumerate(results):
                if args.json:
                    out.write(json.dumps(translation_record(t), ensure_ascii=False) + "\n")
                elif args.nbest == 1:
                    out.write(t.text + "\n")
                else:
                    for h in t.hypotheses:
                        out.write(f"{offset + i}\t{h.score:.4f}\t{h.text}\n")
            out.flush()
            offset += len(chunk)
    return 0


def _refuse_what_the_task_cannot(args: argparse.Namespace, loaded: Any) -> None:
    """Flags the loaded task cannot honour, refused in one line each before decoding: more
    hypotheses than its search keeps (a task's ``max_nbest``, where it has one) and
    ``--compile`` where its config has no compiled decoding (no ``test_compile``)."""
    name, most = loaded.config.task, getattr(loaded.task, "max_nbest", None)
    if most is not None and args.nbest > most:
        raise SeqlabError(
            f"--nbest: task '{name}' keeps at most {most} hypothesis per sentence; drop --nbest"
        )
    if getattr(args, "compile", False) and not hasattr(
        getattr(loaded.task, "cfg", None), "test_compile"
    ):
        raise SeqlabError(f"--compile: task '{name}' has no compiled decoding; drop --compile")


def print_file_scores(result: dict[str, Any], as_json: bool = False) -> None:
    """Print ``TranslationTask.evaluate_files`` output: scores with signatures and the
    bucket table, or (``as_json``) one JSON object."""
    if as_json:
        print(json.dumps(result, ensure_ascii=False))
        return
    n, beam = result["n_sentences"], result["beam"]
    precision = f", decoded in {result['precision']}" if "precision" in result else ""
    print(f"{result['src']} → {result['ref']} ({n} sentences, beam {beam}{precision})")
    for key in ("bleu", "bleu_lc", "chrf"):
        print(f"{key:<8} {result[key]:6.2f}  {result[f'{key}_signature']}")
    if result.get("warning"):
        print(f"warning: {result['warning']}")
    print(result["bucket_table"])


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    """The beam search settings ``translate`` and ``evaluate --src/--ref`` share; each
    left out is the run's own (its ``task.*`` setting, as ``evaluate --split`` uses)."""
    run = "default: the run's task.%s"
    p.add_argument("--length-penalty", type=float, help=f"GNMT alpha ({run % 'length_penalty'})")
    p.add_argument(
        "--coverage-penalty",
        type=float,
        help=f"GNMT beta, bahdanau/luong ({run % 'coverage_penalty'})",
    )
    p.add_argument("--max-len-a", type=float, help=f"max output = a·|x| + b ({run % 'max_len_a'})")
    p.add_argument("--max-len-b", type=int, help=run % "max_len_b")
    p.add_argument(
        "--compile",
        action="store_true",
        help="Transformer only: decode through the compiled, weight-frozen decoder step "
        "(a first compile of ~1 min, then faster steps; docs/decoding.md)",
    )
    add_precision_option(p, "decode")


def add_precision_option(p: argparse.ArgumentParser, verb: str, int8: bool = True) -> None:
    """``--precision`` for a command that decodes (``seqlab.decode.precision``)."""
    choices = ["fp32", "bf16", "fp16", "int8", "auto"] if int8 else ["fp32", "bf16", "fp16", "auto"]
    with_int8 = ", or with int8 linear layers (CPU)" if int8 else " (no int8: no search runs)"
    p.add_argument(
        "--precision",
        choices=choices,
        default="fp32",
        help=f"{verb} in fp32 (default), under bf16/fp16 autocast{with_int8}; auto: bf16 "
        "where the device has it fast, else fp32 (docs/decoding.md)",
    )


def decoding_precision(args: argparse.Namespace) -> Any:
    """The context to decode in for ``--precision`` (``seqlab.decode.precision``), checked
    against ``--compile`` and the device first."""
    from seqlab.decode.precision import decoding_context, refuse_compiled_int8, warn_if_int8_is_slow

    precision = getattr(args, "precision", "fp32")
    refuse_compiled_int8(precision, bool(getattr(args, "compile", False)))
    context = decoding_context(precision, args.device)  # refused on a GPU first
    warn_if_int8_is_slow(precision)
    return context


def search_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The search flags given (None = the run's own), checked: each must be finite and
    >= 0, and --max-len-a 0 with --max-len-b 0 would allow no output at all."""
    kw = {
        name: getattr(args, name)
        for name in ("length_penalty", "coverage_penalty", "max_len_a", "max_len_b")
    }
    for name, value in kw.items():
        if value is not None and not (math.isfinite(value) and value >= 0):
            flag = "--" + name.replace("_", "-")
            raise SeqlabError(f"{flag} must be finite and >= 0, got {value}")
    if kw["max_len_a"] == 0 and kw["max_len_b"] == 0:
        raise SeqlabError("--max-len-a 0 --max-len-b 0 allows no output: give a positive limit")
    return kw | {"test_compile": True if getattr(args, "compile", False) else None}


def load_run_or_ensemble(args: argparse.Namespace, data_dir: Path | None) -> Any:
    """``api.load(args.path)``, or with ``--ensemble RUN …`` the runs decoded as one model
    (``api.load_ensemble``: the linear pool of their distributions). ``--compile`` compiles
    one Transformer's step, so it is refused with an ensemble."""
    from seqlab import api

    ensemble = getattr(args, "ensemble", None) or []
    exported = getattr(args, "exported", None)
    if exported:
        _refuse_with_exported(args, ensemble)
        from seqlab.serve.exported_model import use_exported

        loaded = api.load(args.path, data_dir=data_dir, device=args.device)
        return use_exported(loaded, exported, threads=torch.get_num_threads())
    if not ensemble:
        return api.load(args.path, data_dir=data_dir, device=args.device)
    if getattr(args, "compile", False):
        raise SeqlabError(
            "--compile compiles one Transformer's decoder step; an --ensemble is decoded "
            "eagerly: drop --compile"
        )
    return api.load_ensemble([args.path, *ensemble], data_dir=data_dir, device=args.device)


def _refuse_with_exported(args: argparse.Namespace, ensemble: list[str]) -> None:
    """``--exported DIR`` decodes one run's exported files in float32 on the CPU."""
    clash = [
        flag
        for flag, on in (
            ("--ensemble", bool(ensemble)),
            ("--compile", bool(getattr(args, "compile", False))),
            ("--precision " + str(getattr(args, "precision", "fp32")),
             getattr(args, "precision", "fp32") != "fp32"),
            ("--device " + str(args.device), str(args.device) != "cpu"),
        )
        if on
    ]  # fmt: skip
    if clash:
        raise SeqlabError(
            f"--exported decodes one run's exported files as they are (float32, CPU): "
            f"drop {', '.join(clash)}"
        )


def add_exported_option(p: argparse.ArgumentParser) -> None:
    """``--exported DIR``: decode through the files ``seqlab export`` wrote there."""
    p.add_argument(
        "--exported",
        metavar="DIR",
        help="decode through this run's exported encoder and step (seqlab export; "
        "TorchScript, or ONNX run by onnxruntime) instead of the checkpoint's model",
    )


def use_compiled_decoding(loaded: Any) -> None:
    """``--compile`` on a loaded run: its test-time decoding goes through the compiled
    decoder step from now on (``task.test_compile``); a task without it is refused."""
    cfg = getattr(loaded.task, "cfg", None)
    if not hasattr(cfg, "test_compile"):
        raise SeqlabError(
            f"--compile: task {loaded.config.task} has no compiled decoding "
            "(translation runs of a Transformer only)"
        )
    loaded.task.cfg = dataclasses.replace(cfg, test_compile=True)


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``translate`` on the top-level parser's subcommands."""
    p = sub.add_parser("translate", help="translate sentences with a trained checkpoint")
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    # "items": seqlab.cli.main appends arguments found after options to args.items
    p.add_argument("items", nargs="*", metavar="SENTENCE", help="default: stdin lines")
    p.add_argument("--beam", type=int, default=5, help="beam width K (1 = greedy)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per sentence (<= K)")
    p.add_argument("--json", action="store_true", help="JSON per input, with attention")
    p.add_argument("--plot", metavar="DIR", help="write attention heatmaps DIR/<i>-<name>.png")
    add_search_arguments(p)
    p.add_argument("--data-dir", help="data folder (default ../shared/data)")
    p.add_argument("--device", default="cpu")
    add_ensemble_option(p, "RUN_OR_CHECKPOINT")
    add_exported_option(p)
    p.set_defaults(func=_cmd_translate)


def add_ensemble_option(p: argparse.ArgumentParser, first: str) -> None:
    """``--ensemble RUN``, repeatable: more runs pooled with the first as one model
    (``load_run_or_ensemble``)."""
    p.add_argument(
        "--ensemble",
        action="append",
        metavar="RUN",
        help=f"another run decoded with {first} as one model (the mean of their "
        "probabilities); repeat it for more runs",
    )
