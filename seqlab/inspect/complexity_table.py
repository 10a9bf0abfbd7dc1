"""Tables and figure of a complexity sweep (:func:`seqlab.inspect.complexity.run_sweep`):
the fitted exponents beside the notes' table, the raw measurements, and the curves
against t on log-log axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqlab.inspect.complexity import METRICS, NOTES, NOTES_COLUMN
from seqlab.inspect.figures import markdown_table

AXES = ("t", "k", "d")
COLUMN_LABELS = {
    "train": "training",
    "train_memory": "training memory",
    "test": "test",
    "test_memory": "test memory",
}
METRIC_LABELS = {
    "train_s": "training step time",
    "activation_bytes": "activation memory (saved for backward)",
    "decode_s": "greedy decoding time",
    "state_bytes": "decoder state after t steps",
}


def _exponents(fits: dict[str, Any], metric: str) -> str:
    """'p_t / p_k / p_d' of one family and metric ('–' where the axis was not swept)."""
    cell = fits.get(metric, {})
    return " / ".join(f"{cell[a]['exponent']:.2f}" if a in cell else "–" for a in AXES)


def exponent_table(record: dict[str, Any]) -> str:
    """Markdown: per model, each notes column with its implied exponents (t / k / d) and the
    fitted ones, then the notes' sequential operations and path length."""
    head = ["model"]
    for metric in METRICS:
        head += [
            f"{COLUMN_LABELS[NOTES_COLUMN[metric]]} (notes)",
            f"{METRIC_LABELS[metric]}: fitted t / k / d",
        ]
    head += ["sequential ops (notes)", "path length (notes)"]
    rows = []
    for family, fits in record["fits"].items():
        notes = NOTES[family]
        row = [notes["label"]]
        for metric in METRICS:
            symbol, powers = notes[NOTES_COLUMN[metric]]
            row += [f"{symbol} ({' / '.join(map(str, powers))})", _exponents(fits, metric)]
        rows.append([*row, notes["sequential"], notes["path"]])
    return markdown_table(head, rows)


def top_t_table(record: dict[str, Any]) -> str:
    """Markdown: exponents in t fitted over the 3 largest t only (empty when not swept)."""
    t = sorted(record["sweep"]["t"])[-3:]
    head = ["model"] + [METRIC_LABELS[m] for m in METRICS]
    rows = []
    for family, fits in record["fits"].items():
        cells = [fits[m].get("t_top", {}).get("exponent") for m in METRICS]
        if all(c is None for c in cells):
            return ""
        rows.append([NOTES[family]["label"]] + ["–" if c is None else f"{c:.2f}" for c in cells])
    return f"Exponent in t over t ∈ {t} only:\n\n" + markdown_table(head, rows)


def points_table(record: dict[str, Any]) -> str:
    """Markdown: every measured configuration (the base point once)."""
    header = [
        "model",
        "t",
        "k",
        "d",
        "params",
        "train step ms",
        "activations MiB",
        "decode ms",
        "decoder state KiB",
    ]
    rows, seen = [], set()
    for p in record["points"]:
        key = (p["family"], p["t"], p["k"], p["d"])
        if key not in seen:
            seen.add(key)
            rows.append(
                [
                    NOTES[p["family"]]["label"],
                    p["t"],
                    p["k"],
                    p["d"],
                    f"{p['params']:,}",
                    f"{p['train_s'] * 1e3:.2f}",
                    f"{p['activation_bytes'] / 2**20:.2f}",
                    f"{p['decode_s'] * 1e3:.1f}",
                    f"{p['state_bytes'] / 2**10:.1f}",
                ]
            )
    return markdown_table(header, rows)


def plot_against_t(record: dict[str, Any], path: str | Path) -> Path:
    """2×2 log-log panels, one per metric, cost against t for each model."""
    from seqlab.inspect.figures import figure, line_panel, save_png

    fig = figure(10, 7.5)
    k, d = record["sweep"]["base"][1:]
    for i, metric in enumerate(METRICS):
        curves = {}
        for family in record["fits"]:
            rows = [p for p in record["points"] if p["family"] == family and p["axis"] == "t"]
            exponent = record["fits"][family][metric].get("t", {}).get("exponent")
            label = NOTES[family]["label"] + (f" (p = {exponent:.2f})" if exponent else "")
            curves[label] = ([p["t"] for p in rows], [p[metric] for p in rows])
        line_panel(
            fig.add_subplot(2, 2, i + 1),
            curves,
            "sequence length t",
            metric.replace("_s", " (s)").replace("_bytes", " (bytes)"),
            f"{METRIC_LABELS[metric]}, k = {k}, d = {d}",
            logx=True,
        )
    return save_png(fig, path)
