"""What a run shows and records: a tqdm bar, ``metrics.jsonl`` and (optionally) TensorBoard.

Rank 0 only. The bar (``total = max_steps``, or the planned updates of a schedule fitted to
the wall-clock budget; postfix loss / lr / tok/s, tqdm's own ETA) is
drawn when ``train.progress`` is true and stderr is a terminal; otherwise each log event is
one plain line on stdout, e.g.::

    step   200/300 | epoch 0 | loss 0.8123 | ppl 2.25 | lr 2.1e-03 | |g| 0.92 | 21,030 tok/s

``train.progress=false`` keeps only the start and end lines. Every event — whatever is
shown — is appended to ``metrics.jsonl`` as one JSON object (flushed at once, so a killed run
leaves whole lines) and, with ``train.tensorboard=true`` and the ``tensorboard`` package
installed, written as scalars under ``<run>/tensorboard``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger("seqlab.train")


def format_event(record: dict[str, Any], total: int) -> str:
    """One human line for a metrics record (train or validation)."""
    step = int(record.get("step", 0))
    head = f"step {step:>{len(str(total))}}/{total}"
    if record.get("event") == "train":
        parts = [head, f"epoch {record.get('epoch', 0)}"]
        parts.append(f"loss {record['loss']:.4f}")
        parts.append(f"ppl {record['ppl']:.2f}")
        parts.append(f"lr {record['lr']:.1e}")
        parts.append(f"|g| {record['grad_norm']:.2f}")
        parts.append(f"{record['tokens_per_s']:,.0f} tok/s")
        if record.get("skipped"):
            parts.append(f"skipped {record['skipped']}")
        return " | ".join(parts)
    split = record.get("split", "valid")
    values = [
        f"{k.split('/', 1)[1]} {_num(v)}"
        for k, v in record.items()
        if k.startswith(f"{split}/") and isinstance(v, (int, float))
    ]
    tail = " (best)" if record.get("best") else ""
    return f"{record.get('event', 'valid')} {head} | " + " | ".join(values) + tail


def _num(v: float) -> str:
    return f"{v:.4f}" if isinstance(v, float) and math.isfinite(v) and abs(v) < 1e4 else f"{v}"


class Progress:
    """Bar + plain lines + metrics.jsonl + TensorBoard for one run.

    Args:
        total: max_steps (the bar's length; a budget fit's ``schedule`` record shortens it
            to the planned number of updates); initial: the step a resumed run starts from.
        show: rank 0 and ``train.progress``; bar only when stderr is a TTY.
        metrics_path: ``<run>/metrics.jsonl`` or None (nothing written).
        tensorboard_dir: directory for TensorBoard event files, or None.
    """

    def __init__(
        self,
        total: int,
        initial: int = 0,
        *,
        show: bool = True,
        quiet: bool = False,
        metrics_path: Path | None = None,
        tensorboard_dir: Path | None = None,
    ) -> None:
        self.total = self.max_steps = total
        self.show = show and not quiet
        self.quiet = quiet
        self.metrics_path = metrics_path
        self._bar = None
        if self.show and sys.stderr.isatty():
            from tqdm.auto import tqdm

            # Some pseudo-terminals report a 0×0 size, on which tqdm draws nothing.
            sized = _terminal_columns() > 0
            self._bar = tqdm(
                total=total,
                initial=initial,
                unit="step",
                dynamic_ncols=sized,
                ncols=None if sized else 100,
                nrows=None if sized else 20,
            )
        self._tb = _tensorboard_writer(tensorboard_dir) if tensorboard_dir else None

    def set_total(self, total: int) -> None:
        """The run's planned length changed (a schedule fitted to the wall-clock budget,
        seqlab.train.budget): the bar and the ``step N/TOTAL`` lines follow it, never
        past ``max_steps``."""
        self.total = max(1, min(self.max_steps, int(total)))
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def echo(self, message: str, always: bool = False) -> None:
        """Print a line (above the bar when there is one). ``always``: even if not ``show``."""
        if self.quiet or not (self.show or always):
            return
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, flush=True)

    def advance(self, postfix: dict[str, float] | None = None) -> None:
        """One optimizer step done; refresh the bar's postfix."""
        if self._bar is None:
            return
        if postfix:
            shown = {
                "loss": f"{postfix['loss']:.3f}",
                "lr": f"{postfix['lr']:.1e}",
                "tok/s": f"{postfix['tokens_per_s']:,.0f}",
            }
            self._bar.set_postfix(shown, refresh=False)
        self._bar.update(1)

    def record(self, record: dict[str, Any], echo: bool = True) -> None:
        """Append ``record`` to metrics.jsonl, TensorBoard, and print it (if shown)."""
        if self.metrics_path is not None:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
        if self._tb is not None:
            step = int(record.get("step", 0))
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    if key in ("step", "epoch"):
                        continue
                    tag = key if "/" in key else f"{record.get('event', 'train')}/{key}"
                    self._tb.add_scalar(tag, value, step)
        if record.get("event") == "schedule" and isinstance(record.get("total_steps"), int):
            self.set_total(record["total_steps"])
        if echo and record.get("event") in ("train", "valid", "final"):
            self.echo(format_event(record, self.total))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _terminal_columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 0


def _tensorboard_writer(log_dir: Path) -> Any | None:
    """``torch.utils.tensorboard.SummaryWriter`` if the ``tensorboard`` package is installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.warning(
            "train.tensorboard=true but the 'tensorboard' package is not installed "
            "(pip install tensorboard); metrics.jsonl is still written"
        )
        return None
    return SummaryWriter(log_dir=str(log_dir))
