"""Character- vs word-level language models on the same text (notes 003: "character level
vs word level").

    python benchmarks/char_vs_word.py [--levels word,char] [--minutes 15] [--data-dir DIR]
        [--out docs/results.md] [--runs-dir runs] [key=value ...]

Trains ``configs/ptb-lstm.yaml`` (words) and ``configs/ptb-lstm-char.yaml`` (characters):
the same PTB files, the same 2 × 400 LSTM core, each with its preset's own batching and
optimiser, for ``--minutes`` each (``benchmarks/lm.py``'s ``run_preset``: the better of
the best and the last checkpoint). Both are scored on PTB valid and test in **bits per
character of the same text**:

    bpc_char = NLL_char / (N_char · ln 2)
    bpc_word = (NLL_word / N_word) · (W / C) / ln 2

NLL / N is the mean −ln p per predicted token, and W / C the split's words (with one
``</s>`` a line) per character (spaces and newlines included). The layout (one space
between words, a newline a line) is fixed by the words, so the word model's code length
of a split is also that of its characters. The notes' other two points are measured too:
sequence length (characters per word token) and speed (text read per second in
characters).

Each ``--levels`` entry is recorded in ``<out dir>/figures/char_vs_word.json`` and the
section ``## Character- vs word-level language models (PTB)`` is rendered from every
level recorded, so the two levels can train as two processes (one core each) and still
make one table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.lm import run_preset  # noqa: E402
from benchmarks.results_doc import machine_description, write_section  # noqa: E402
from seqlab import api  # noqa: E402
from seqlab.atomic_file import write_atomic  # noqa: E402
from seqlab.eval.perplexity import bits_per_char  # noqa: E402

HEADING = "## Character- vs word-level language models (PTB)"
PRESETS = {"word": "ptb-lstm", "char": "ptb-lstm-char"}
SPLITS = ("valid", "test")


def bpc_of_word_model(nll_per_word: float, words: int, chars: int) -> float:
    """Bits per character of a word model: (NLL / N_word) · (W / C) / ln 2, i.e. the
    split's estimated total NLL, (NLL / N_word) · W, over its C characters."""
    return bits_per_char(nll_per_word * words, chars)


def text_counts(data_dir: str | None) -> dict[str, dict[str, int]]:
    """Per split: ``words`` (word tokens, one ``</s>`` a line) and ``chars`` of PTB."""
    from seqlab.data.lm_corpus import read_ptb

    root = Path(data_dir) if data_dir else api.default_data_dir()
    words, chars = read_ptb(root, "word").splits, read_ptb(root, "char").splits
    return {s: {"words": len(words[s]), "chars": len(chars[s])} for s in SPLITS}


def score_level(level: str, minutes: float, overrides: list[str], data_dir: str | None,
                runs_dir: Path, counts: dict[str, dict[str, int]]) -> dict[str, Any]:  # fmt: skip
    """Train the level's preset and return its record (bpc per split, speed, size)."""
    row = run_preset(PRESETS[level], minutes, overrides, data_dir, runs_dir, True, True)
    ratio = {s: counts[s]["words"] / counts[s]["chars"] for s in SPLITS}
    record: dict[str, Any] = {
        "level": level, "preset": row.preset, "params": row.params, "minutes": row.minutes,
        "updates": row.updates, "epochs": row.epochs, "tokens_per_s": row.tokens_per_s,
        "chars_per_s": row.tokens_per_s / ratio["valid"] if level == "word" else row.tokens_per_s,
        "checkpoint": row.checkpoint,
    }  # fmt: skip
    for split, result in (("valid", row.valid), ("test", row.test)):
        assert result is not None, f"PTB has a {split} split"
        if level == "word":
            record[f"{split}_ppl"] = result["ppl"]
            w, c = counts[split]["words"], counts[split]["chars"]
            record[f"{split}_bpc"] = bpc_of_word_model(result["loss"], w, c)
        else:
            record[f"{split}_bpc"] = result["bpc"]
    return record


def merge(record_path: Path, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The levels recorded before, the ones run now replacing theirs; word first."""
    old = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else []
    done = {r["level"] for r in new}
    rows = [r for r in old if r["level"] not in done] + new
    return sorted(rows, key=lambda r: list(PRESETS).index(r["level"]))


def render(rows: list[dict[str, Any]], counts: dict[str, dict[str, int]]) -> str:
    lines = [HEADING, ""]
    for command, run_on in dict.fromkeys((r["command"], r["run_on"]) for r in rows):
        lines += [f"Command: `{command}`", "", run_on, ""]
    head = ("| level | preset | params | train min | updates | epochs | tokens/s | text read "
            "(chars/s) | valid bpc | test bpc | word ppl (valid / test) |")  # fmt: skip
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ppl = f"{r['valid_ppl']:.1f} / {r['test_ppl']:.1f}" if r["level"] == "word" else "—"
        lines.append(
            f"| {r['level']} | `{r['preset']}` | {r['params'] / 1e6:.2f}M | {r['minutes']:.1f} "
            f"| {r['updates']:,} | {r['epochs']:.2f} | {r['tokens_per_s']:,.0f} "
            f"| {r['chars_per_s']:,.0f} | **{r['valid_bpc']:.3f}** | **{r['test_bpc']:.3f}** "
            f"| {ppl} |"
        )
    v = counts["valid"]
    lines += [
        "",
        f"Same text: PTB valid has {v['chars']:,} characters and {v['words']:,} word tokens "
        f"(one `</s>` a line), {v['chars'] / v['words']:.2f} characters a word token, so the "
        "character model reads sequences that many times longer. Word bpc = (NLL / N_word) "
        "· (W / C) / ln 2 (benchmarks/char_vs_word.py), the code length of the same "
        "characters. PTB's `<unk>` is in the text for both models, so the character "
        "model's advantage of needing no unknown-word token does not show here.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="benchmarks/char_vs_word.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--levels", default="word,char")
    p.add_argument("--minutes", type=float, default=15.0, help="training budget per level")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("overrides", nargs="*", help="key=value for both presets")
    args = p.parse_args(argv)
    levels = [s.strip() for s in args.levels.split(",") if s.strip()]
    if not levels or any(s not in PRESETS for s in levels):
        p.error(f"--levels: choose from {', '.join(PRESETS)}")
    counts = text_counts(args.data_dir)
    command = shlex.join(["python", "benchmarks/char_vs_word.py", *argv])
    run_on = (f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
              f"Budget: {args.minutes:g} min of training.")  # fmt: skip
    new = []
    for level in levels:
        print(f"[{level}] training {args.minutes:g} min …", flush=True)
        record = score_level(level, args.minutes, args.overrides, args.data_dir,
                             Path(args.runs_dir), counts)  # fmt: skip
        record.update(command=command, run_on=run_on)
        print(f"[{level}] valid {record['valid_bpc']:.3f} bpc, test {record['test_bpc']:.3f} bpc")
        new.append(record)
    out = Path(args.out)
    record_path = out.parent / "figures" / "char_vs_word.json"
    rows = merge(record_path, new)
    write_atomic(record_path, json.dumps(rows, indent=1) + "\n")
    write_section(out, render(rows, counts), HEADING)
    print(f"wrote {out} ({HEADING[3:]}) and {record_path}")
    return rows


if __name__ == "__main__":
    main()
