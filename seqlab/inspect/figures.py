"""Small output helpers shared by the seqlab.inspect experiments: a headless matplotlib
figure, an atomic PNG write, a JSON record write and log-log line plots.

Every experiment writes its numbers as JSON next to its PNG, so a report can quote the
numbers and show the figure from one run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` on the Agg canvas (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def save_png(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` atomically (a reader never sees half a PNG)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.tight_layout()
    fig.savefig(tmp, format="png")
    tmp.replace(path)
    return path


def write_json(path: str | Path, record: Mapping[str, Any], ensure_ascii: bool = True) -> Path:
    """Write ``record`` as indented JSON (NaN/inf become null: JSON has no such numbers);
    ``ensure_ascii=False`` keeps non-ASCII text (subword marks, umlauts) readable."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, Mapping):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(clean(record), indent=1, ensure_ascii=ensure_ascii) + "\n", encoding="utf-8"
    )
    tmp.replace(path)
    return path


def line_panel(
    ax: Any,
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = True,
) -> None:
    """One panel: a marked line per named (x, y) curve; log axes where asked."""
    for name, (xs, ys) in curves.items():
        ax.plot(list(xs), list(ys), marker="o", markersize=3, label=name)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; cells are formatted with ``str``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
