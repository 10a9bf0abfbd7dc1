"""Corpus BLEU and chrF the standard way: sacreBLEU on detokenised text, with signatures.

BLEU (Papineni et al. 2002):  BLEU = BP · exp(Σ_{n=1}^{4} ¼ log p_n),
BP = min(1, exp(1 − r/c)), p_n the clipped n-gram precisions, c / r the hypothesis /
reference lengths in tokens of the ``13a`` tokeniser (Post 2018, sacreBLEU).
chrF (Popović 2015): the character n-gram F_β score (n ≤ 6, β = 2).

Three numbers, each with its sacreBLEU signature string:

- ``bleu``: cased BLEU, ``tok:13a`` — sacreBLEU's default, the number to report.
- ``bleu_lc``: lowercased BLEU, ``tok:13a``, ``case:lc`` — the number comparable to the
  published Multi30k tables (docs/REFERENCES §1 scored lowercased tokens).
- ``chrf``: chrF2, cased.

Hypotheses must be detokenised text (what a person reads); :func:`tokenization_warning`
flags text that looks tokenised (`` .`` / `` ,`` / `` 's`` / ``@@`` / ``▁``), the usual
cause of scores that cannot be compared (USER-NEEDS §3). BLEU is never computed from
teacher-forced logits anywhere in seqlab: callers pass decoded text.

:func:`bleu_by_length` splits a test set by source length (in whitespace words) and
scores each bucket; :func:`bucket_table` prints it and :func:`plot_bleu_by_length`
draws a PNG bar chart (one bar group per system), for the notes' claim that attention
helps most on long sentences.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from sacrebleu.metrics import BLEU, CHRF

__all__ = [
    "LENGTH_EDGES",
    "LengthBucket",
    "MetricScore",
    "bleu_by_length",
    "bucket_index",
    "bucket_table",
    "corpus_bleu",
    "corpus_chrf",
    "merge_sparse_tail",
    "plot_bleu_by_length",
    "score_corpus",
    "tokenization_warning",
]

log = logging.getLogger("seqlab.eval")

LENGTH_EDGES: tuple[int, ...] = (10, 15, 20, 25)
"""Upper bounds of the source-length buckets: 1–10, 11–15, 16–20, 21–25, 26+ words."""

# Patterns of tokenised or sub-worded text, each with a name for the warning.
_TOKENIZED = {
    "split punctuation (' .', ' ,')": re.compile(r"\w [.,!?;:](?: |$)"),
    'split clitics (" \'s", " n\'t")': re.compile(r"\w (?:'(?:s|re|ve|ll|d|m)|n't)\b"),
    "Moses escapes (&quot; &apos;)": re.compile(r"&(?:quot|amp|apos|lt|gt|#\d+);"),
    "subword markers (@@, ▁)": re.compile(r"@@(?: |$)|▁| @-@ "),
}


@dataclass(frozen=True)
class MetricScore:
    """One corpus score: value (0–100), sacreBLEU signature, and sacreBLEU's summary line."""

    name: str
    score: float
    signature: str
    detail: str


def _check(hyps: Sequence[str], refs: Sequence[str]) -> tuple[list[str], list[str]]:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("pass lists of sentences, not a single string")
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("cannot score an empty corpus")
    return [str(h) for h in hyps], [str(r) for r in refs]


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> MetricScore:
    """sacreBLEU corpus BLEU (``tok:13a``, exp smoothing), cased or lowercased."""
    hyps, refs = _check(hyps, refs)
    metric = BLEU(tokenize="13a", lowercase=lowercase)
    result = metric.corpus_score(hyps, [refs])
    name = "bleu_lc" if lowercase else "bleu"
    return MetricScore(name, float(result.score), str(metric.get_signature()), str(result))


def corpus_chrf(hyps: Sequence[str], refs: Sequence[str]) -> MetricScore:
    """sacreBLEU corpus chrF2 (character 6-grams, β = 2), cased."""
    hyps, refs = _check(hyps, refs)
    metric = CHRF()
    result = metric.corpus_score(hyps, [refs])
    return MetricScore("chrf", float(result.score), str(metric.get_signature()), str(result))


def tokenization_warning(hyps: Sequence[str], threshold: float = 0.1) -> str | None:
    """A warning when at least ``threshold`` of the lines look tokenised, else None.

    sacreBLEU expects detokenised text; scoring tokenised hypotheses against raw
    references (or the reverse) silently changes BLEU by points (mjpost/sacrebleu#162).
    French typography puts a space before ``; : ! ?``: ignore the punctuation pattern there.
    """
    if not hyps:
        return None
    counts = {name: sum(bool(p.search(h)) for h in hyps) for name, p in _TOKENIZED.items()}
    flagged = sum(any(p.search(h) for p in _TOKENIZED.values()) for h in hyps)
    if flagged < max(1, threshold * len(hyps)):
        return None
    found = ", ".join(f"{name}: {n} lines" for name, n in counts.items() if n)
    return (
        f"{flagged} of {len(hyps)} hypotheses look tokenised ({found}); sacreBLEU expects "
        "detokenised text — decode subwords with the tokenizer and do not Moses-tokenise "
        "hypotheses or references, or the score is not comparable"
    )


def score_corpus(
    hyps: Sequence[str], refs: Sequence[str], warn: bool = True
) -> dict[str, float | int | str]:
    """bleu, bleu_lc, chrf (0–100) with ``<name>_signature`` strings, and n_sentences.

    With ``warn`` a tokenised-looking corpus is logged and its message returned under
    ``"warning"``.
    """
    scores = [corpus_bleu(hyps, refs), corpus_bleu(hyps, refs, lowercase=True)]
    scores.append(corpus_chrf(hyps, refs))
    out: dict[str, float | int | str] = {"n_sentences": len(hyps)}
    for s in scores:
        out[s.name] = s.score
    for s in scores:
        out[f"{s.name}_signature"] = s.signature
    if warn:
        message = tokenization_warning(hyps)
        if message:
            log.warning(message)
            out["warning"] = message
    return out


# ------------------------------------------------------------------ length buckets


@dataclass(frozen=True)
class LengthBucket:
    """Scores of the sentences whose source has ``lo`` ≤ words ≤ ``hi`` (hi None = no limit).

    ``bleu`` / ``bleu_lc`` / ``chrf`` are None for an empty bucket.
    """

    label: str
    lo: int
    hi: int | None
    n: int
    bleu: float | None
    bleu_lc: float | None
    chrf: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bounds(edges: Sequence[int]) -> list[tuple[int, int | None]]:
    if list(edges) != sorted(set(edges)) or (edges and edges[0] < 1):
        raise ValueError(f"edges must be increasing positive integers, got {list(edges)}")
    los = [1, *(e + 1 for e in edges)]
    his: list[int | None] = [*edges, None]
    return list(zip(los, his))


def bucket_index(n_words: int, edges: Sequence[int] = LENGTH_EDGES) -> int:
    """Index of the bucket of a source with ``n_words`` words: the first edge ≥ n_words,
    or len(edges) beyond the last edge. 0 words count as bucket 0."""
    for i, e in enumerate(edges):
        if n_words <= e:
            return i
    return len(edges)


def merge_sparse_tail(
    sources: Sequence[str], edges: Sequence[int] = LENGTH_EDGES, min_n: int = 30
) -> tuple[int, ...]:
    """``edges`` with the top edges dropped while the open-ended bucket (beyond the last
    edge) holds fewer than ``min_n`` sources, so the longest bucket is not scored on a
    handful of sentences (test2016 has 2 sources of 26+ words: 21–25 and 26+ become 21+).
    Keeps at least one edge; ``min_n`` ≤ 0 keeps every edge."""
    _bounds(edges)
    lengths = [len(s.split()) for s in sources]
    kept = list(edges)
    while len(kept) > 1 and sum(n > kept[-1] for n in lengths) < min_n:
        kept.pop()
    return tuple(kept)


def bleu_by_length(
    sources: Sequence[str],
    hyps: Sequence[str],
    refs: Sequence[str],
    edges: Sequence[int] = LENGTH_EDGES,
) -> list[LengthBucket]:
    """Corpus scores of each source-length bucket (source words split on whitespace).
    Pass ``merge_sparse_tail(sources, edges, n)`` as ``edges`` to merge a sparse open-ended
    bucket into the one below."""
    hyps, refs = _check(hyps, refs)
    if len(sources) != len(hyps):
        raise ValueError(f"{len(sources)} sources but {len(hyps)} hypotheses")
    members: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, s in enumerate(sources):
        members[bucket_index(len(s.split()), edges)].append(i)
    out = []
    for (lo, hi), idx in zip(_bounds(edges), members):
        label = f"{lo}-{hi}" if hi is not None else f"{lo}+"
        if not idx:
            out.append(LengthBucket(label, lo, hi, 0, None, None, None))
            continue
        h, r = [hyps[i] for i in idx], [refs[i] for i in idx]
        out.append(
            LengthBucket(
                label,
                lo,
                hi,
                len(idx),
                corpus_bleu(h, r).score,
                corpus_bleu(h, r, lowercase=True).score,
                corpus_chrf(h, r).score,
            )
        )
    return out


def _by_system(
    buckets: Sequence[LengthBucket] | Mapping[str, Sequence[LengthBucket]],
) -> dict[str, list[LengthBucket]]:
    if isinstance(buckets, Mapping):
        systems = {str(k): list(v) for k, v in buckets.items()}
    else:
        systems = {"system": list(buckets)}
    labels = {tuple(b.label for b in v) for v in systems.values()}
    if len(labels) != 1:
        raise ValueError("every system must use the same buckets")
    return systems


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def bucket_table(
    buckets: Sequence[LengthBucket] | Mapping[str, Sequence[LengthBucket]],
    metric: Literal["bleu", "bleu_lc", "chrf"] = "bleu_lc",
) -> str:
    """A markdown table: one row per bucket; sentence count and ``metric`` per system
    (one system: n, BLEU, lowercase BLEU and chrF)."""
    systems = _by_system(buckets)
    first = next(iter(systems.values()))
    if len(systems) == 1:
        lines = [
            "| source words | n | BLEU | BLEU (lc) | chrF |",
            "| --- | --- | --- | --- | --- |",
        ]
        for b in first:
            lines.append(
                f"| {b.label} | {b.n} | {_fmt(b.bleu)} | {_fmt(b.bleu_lc)} | {_fmt(b.chrf)} |"
            )
        return "\n".join(lines)
    names = list(systems)
    lines = [
        "| source words | n | " + " | ".join(f"{n} {metric}" for n in names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for i, b in enumerate(first):
        row = [_fmt(getattr(systems[n][i], metric)) for n in names]
        lines.append(f"| {b.label} | {b.n} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot_bleu_by_length(
    buckets: Sequence[LengthBucket] | Mapping[str, Sequence[LengthBucket]],
    path: str | Path,
    metric: Literal["bleu", "bleu_lc", "chrf"] = "bleu_lc",
    title: str | None = None,
) -> Path:
    """Bar chart of ``metric`` per source-length bucket (grouped bars, one per system),
    sentence counts under the bucket labels; written as PNG with the Agg renderer (no
    display, no global pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    systems = _by_system(buckets)
    first = next(iter(systems.values()))
    n_sys = len(systems)
    width = 0.8 / n_sys
    fig = Figure(figsize=(1.4 + 1.2 * len(first), 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for k, (name, values) in enumerate(systems.items()):
        heights = [0.0 if getattr(b, metric) is None else getattr(b, metric) for b in values]
        xs = [i + (k - (n_sys - 1) / 2) * width for i in range(len(values))]
        bars = ax.bar(xs, heights, width=width, label=name)
        for bar, h in zip(bars, heights):
            if h > 0 and math.isfinite(h):
                ax.annotate(
                    f"{h:.1f}",
                    (bar.get_x() + bar.get_width() / 2, h),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.set_xticks(range(len(first)), [f"{b.label}\n(n={b.n})" for b in first])
    ax.set_xlabel("source length (words)")
    names = {"bleu": "BLEU (cased)", "bleu_lc": "BLEU (lowercase)", "chrf": "chrF"}
    ax.set_ylabel(f"sacre{names[metric]}" if metric != "chrf" else "chrF")
    ax.set_title(title or f"{names[metric]} by source length")
    if n_sys > 1:  # in a row above the bars (headroom kept), never over a bar's label
        tallest = max((b.get_height() for b in ax.patches), default=0.0)
        ax.set_ylim(0, 1.3 * tallest if tallest > 0 else 1.0)
        ax.legend(fontsize=8, ncol=min(n_sys, 4), loc="upper center", frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
