"""Tables, ratios and the ``## Performance vs peers`` section of ``benchmarks/peers.py``.

A result is a list of row dicts (the JSON record's ``rows``), one per variant::

    {"section": "train" | "decode" | "rnn", "what": "small" | "beam 5" | "lstm", "impl",
     "precision", "status": "ok" | "not installed: …", "rate": work/s, "unit",
     "ms": ms per step, "gflop_s", "mfu", "cv", "rss_mib", "rss_delta_mib"}

Ratios compare seqlab with each peer in the same section, ``what`` and precision (same
round-robin run, so machine drift cancels).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from seqlab.inspect.figures import markdown_table

HEADING = "## Performance vs peers"
HEADING_GPU = "## Performance vs peers on a GPU"


def heading(device: str = "cpu") -> str:
    """The section a run on ``device`` writes (a GPU run does not replace the CPU's)."""
    return HEADING if device.split(":")[0] == "cpu" else HEADING_GPU


TITLES = {
    "train": "Training step (forward, label-smoothed loss, backward, Adam)",
    "decode": "Decoding (exactly N new tokens per sentence, K/V cache)",
    "rnn": "Recurrent layers (forward + backward)",
}
UNITS = {"train": "tgt tok/s", "decode": "sent/s", "rnn": "tok/s"}
# issue 11's targets: (section, what, precision, peer) -> minimum seqlab / peer ratio
TARGETS = {
    ("train", "small", "bf16", "hf"): 2.0,
    ("train", "small", "bf16", "fastest peer"): 1.5,
    ("decode", "beam 5", "bf16", "hf"): 2.0,
    ("decode", "greedy", "bf16", "hf"): 1.5,
    ("rnn", "lstm", "bf16", "nn"): 0.95,
    ("rnn", "gru", "bf16", "nn"): 0.95,
    ("rnn", "lstm", "fp32", "nn"): 0.95,
    ("rnn", "gru", "fp32", "nn"): 0.95,
}


def _f(x: Any, fmt: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return format(x, fmt)


def rows_table(rows: list[dict[str, Any]], section: str) -> str:
    """One markdown table of a section's rows (failed/missing ones say why)."""
    head = ["what", "implementation", "precision", UNITS[section], "ms/step"]
    if section != "decode":
        head += ["GFLOP/s", "MFU"]
    head += ["cv", "peak RSS MiB (Δ)"]
    gpu = any("gpu_mib" in r for r in rows if r["section"] == section)
    if gpu:
        head += ["peak GPU MiB (Δ)"]
    body = []
    for r in (r for r in rows if r["section"] == section):
        if r["status"] != "ok":
            body.append(
                [r["what"], r["impl"], r["precision"], r["status"], *[""] * (len(head) - 4)]
            )
            continue
        cells = [
            r["what"],
            r.get("label", r["impl"]),
            r["precision"],
            _f(r["rate"], ",.1f"),
            _f(r["ms"], ".1f"),
        ]
        if section != "decode":
            cells += [_f(r["gflop_s"], ".0f"), _f(100 * r["mfu"], ".1f") + " %"]
        rss = f"{_f(r['rss_mib'], ',.0f')} ({_f(r['rss_delta_mib'], '+,.0f')})"
        cells += [_f(100 * r["cv"], ".0f") + " %", rss]
        if gpu:
            cells += [f"{_f(r.get('gpu_mib'), ',.0f')} ({_f(r.get('gpu_delta_mib'), '+,.0f')})"]
        body.append(cells)
    return markdown_table(head, body)


def ratios(rows: list[dict[str, Any]], with_targets: bool = True) -> list[dict[str, Any]]:
    """seqlab rate / peer rate for every (section, what, precision) with both measured;
    in training also against the fastest peer. ``with_targets``: look up issue 11's target
    (False for runs on other shapes than the issue's)."""
    ok = [r for r in rows if r["status"] == "ok"]
    groups: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in ok:
        groups.setdefault((r["section"], r["what"], r["precision"]), {})[r["impl"]] = r["rate"]
    out = []
    for (section, what, precision), rates in groups.items():
        if "seqlab" not in rates:
            continue
        peers = {k: v for k, v in rates.items() if k != "seqlab"}
        if section == "train" and len(peers) > 1:
            best = max(peers, key=peers.__getitem__)
            peers["fastest peer"] = peers[best]
        for peer, rate in peers.items():
            ratio = rates["seqlab"] / rate if rate > 0 else float("nan")
            target = TARGETS.get((section, what, precision, peer)) if with_targets else None
            out.append(
                {
                    "section": section,
                    "what": what,
                    "precision": precision,
                    "peer": peer,
                    "ratio": ratio,
                    "target": target,
                    "met": None if target is None else ratio >= target,
                }
            )
    return out


def ratios_table(items: list[dict[str, Any]]) -> str:
    body = [
        [
            r["section"],
            r["what"],
            r["precision"],
            f"seqlab / {r['peer']}",
            _f(r["ratio"], ".2f") + "×",
            "—" if r["target"] is None else f"≥ {r['target']:.2f}×",
            "—" if r["met"] is None else ("yes" if r["met"] else "**no**"),
        ]
        for r in items
    ]
    head = ["section", "what", "precision", "ratio", "value", "issue 11 target", "met"]
    return markdown_table(head, body)


def peak_line(peak: dict[str, float]) -> str:
    rates = [f"{p} {peak[p]:,.0f} GFLOP/s" for p in ("fp32", "bf16") if p in peak]
    if not rates:
        return "Matmul peak: not measured (no training or RNN rows, so no MFU)."
    return (
        f"Matmul peak measured in the same run ({peak['n']}×{peak['n']} `torch.matmul`, "
        f"median): {', '.join(rates)} (the MFU denominators, per precision)."
    )


def check_lines(checks: list[dict[str, Any]]) -> list[str]:
    return [
        f"- seqlab {c['search']}: batched K/V-cached decode == unbatched uncached decode for "
        f"**{c['same']} / {c['total']}** sentences (fp32, {c['n_new']} tokens)."
        for c in checks
    ]


def render(
    record: dict[str, Any],
    command: str,
    machine: str,
    title: str = HEADING,
    json_path: str = "docs/figures/peers.json",
) -> str:
    """The markdown section (heading ``title`` first, no trailing newline); its last line
    points to the record at ``json_path``."""
    rows = record["rows"]
    parts = [
        title,
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine}  ",
        f"Date: {datetime.date.today().isoformat()}. Versions: {record['versions']}.",
        "",
        "All variants in one process, timed round-robin after untimed warm-up, median of "
        f"{record['settings']} (../shared/docs/PEERS.md's method). GFLOP/s counts matmul "
        "FLOPs analytically on the padded shapes (formulas: benchmarks/peers_models.py, "
        "benchmarks/peers_rnn.py); MFU = GFLOP/s ÷ the same-precision matmul peak below. "
        "Peak RSS is the process's during the variant's warm-up (Δ: growth during it); "
        "everything loaded before counts too, so compare Δ, or run one implementation per "
        "process (`--impls`). What each implementation runs: docs/perf-notes.md.",
        "",
        peak_line(record["peak"]),
    ]
    for section in ("train", "decode", "rnn"):
        if any(r["section"] == section for r in rows):
            parts += ["", f"### {TITLES[section]}", "", rows_table(rows, section)]
    if record.get("checks"):
        parts += ["", *check_lines(record["checks"])]
    if record.get("ratios"):
        parts += ["", "### Ratios (same run)", "", ratios_table(record["ratios"])]
    parts += ["", f"Numbers: `{json_path}`."]
    return "\n".join(parts)
