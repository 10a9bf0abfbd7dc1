"""``seqlab predict``: raw sentences in, a trained model's predictions out, for any task
with a ``predict(model, texts)`` method (classify: label and probabilities; tag: tokens,
tags and entity spans).

    seqlab predict RUN_OR_CHECKPOINT [TEXT ...] [--json]
    echo "not good at all" | seqlab predict runs/mr-bilstm

Texts come from the arguments, or else from standard input (one per line, predicted in
chunks so output streams). Output, one line per input:

* classify: ``LABEL<TAB>P(LABEL)<TAB>TEXT``, e.g. ``neg	0.912	not good at all``;
* tag: ``token/TAG token/TAG …`` then, after a TAB, the entities ``[PER John Smith]``;
* ``--json``: one JSON object per input, ``{"text": …, **prediction}``: classify adds
  ``label`` and ``probs`` (label → probability), tag adds ``tokens``, ``tags`` and
  ``entities``.

The checkpoint is loaded with ``seqlab.load``; its vocabulary and labels travel inside it,
so the training data need not be present.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from seqlab.errors import SeqlabError

CHUNK = 256  # stdin lines predicted together


def _chunks(items: list[str], stdin: TextIO) -> Iterator[list[str]]:
    if items:
        yield list(items)
        return
    chunk: list[str] = []
    for line in stdin:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def format_prediction(text: str, pred: Any) -> str:
    """One human-readable line for a prediction of any task (JSON when unknown)."""
    if isinstance(pred, dict) and "label" in pred:
        p = pred.get("probs", {}).get(pred["label"])
        shown = f"{p:.3f}" if isinstance(p, (int, float)) else "-"
        return f"{pred['label']}\t{shown}\t{text}"
    if isinstance(pred, dict) and "tokens" in pred and "tags" in pred:
        words = " ".join(f"{t}/{g}" for t, g in zip(pred["tokens"], pred["tags"]))
        spans = pred.get("entities") or []
        entities = " ".join(
            f"[{e['type']} {e.get('text') or ' '.join(pred['tokens'][e['start'] : e['end']])}]"
            for e in spans
        )
        return f"{words}\t{entities}" if entities else words
    return json.dumps(pred, ensure_ascii=False)


def record(text: str, pred: Any) -> dict[str, Any]:
    """The ``--json`` object of one input."""
    return {"text": text, **pred} if isinstance(pred, dict) else {"text": text, "prediction": pred}


def _cmd_predict(args: argparse.Namespace, stdin: TextIO | None = None) -> int:
    from seqlab import api

    data_dir = Path(args.data_dir) if args.data_dir else None
    loaded = api.load(args.path, data_dir=data_dir, device=args.device)
    predict = getattr(loaded.task, "predict", None)
    if predict is None:
        raise SeqlabError(
            f"{loaded.checkpoint}: task '{loaded.config.task}' has no predict "
            "(train a classify or tag model)"
        )
    out, n = sys.stdout, 0
    for chunk in _chunks(args.items, stdin if stdin is not None else sys.stdin):
        try:
            preds = predict(loaded.model, chunk)
        except SeqlabError:
            raise
        except (TypeError, ValueError) as exc:
            raise SeqlabError(
                f"task '{loaded.config.task}' cannot predict from raw text: {exc}"
            ) from exc
        for text, pred in zip(chunk, preds):
            if args.json:
                line = json.dumps(record(text, pred), ensure_ascii=False)
            else:
                line = format_prediction(text, pred)
            out.write(line + "\n")
        out.flush()
        n += len(chunk)
    if n == 0:
        raise SeqlabError("predict: no text given (pass sentences as arguments or on stdin)")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``predict`` on the top-level parser's subcommands."""
    p = sub.add_parser("predict", help="label or tag raw sentences with a trained checkpoint")
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT")
    # "items": seqlab.cli.main appends arguments found after options to args.items
    p.add_argument("items", nargs="*", metavar="TEXT", help="default: stdin lines")
    p.add_argument("--json", action="store_true", help="one JSON object per input")
    p.add_argument("--data-dir", help="data folder (default ../shared/data; not needed)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_predict)
