"""Sweep one decode-time setting of trained pointer-generator runs, on valid and test.

A decode-time lever (GNMT's α or β, the coverage penalty's words, ``<unk>`` handling …)
is chosen on the validation set and judged on test, on the same checkpoints, with the
other settings held. This loads each run once (the checkpoint ``benchmarks/pointer_generator.py``
scores: the best validation BLEU if it beats the last, else the last), and for every value
of ``--grid KEY=V1,V2,…`` applies ``--set`` and ``KEY=V`` to its saved config and evaluates
every split of ``--splits``. The valid split is decoded whole, with the test beam
(``task.valid_beam`` = ``task.test_beam``, ``task.valid_bleu_sentences=0``; with ``--grid
task.test_beam=…`` each value's beam), so the two splits are decoded alike. With
``--ensemble`` the runs are decoded as one model, the linear pool of their distributions
(``api.load_ensemble``; each member at its own scoring checkpoint), and the table has one
column, the ensemble's. It prints one table (per run
and the mean over runs: lc BLEU, chrF, copied / copyable OOV words, repeated trigrams) and
writes it as markdown to ``--out``; it trains nothing and changes no run.

    python benchmarks/pg_decode_sweep.py RUN [RUN …] --grid task.coverage_penalty=0,0.5,1 \\
        --set task.coverage_penalty_words=oov --out sweep.md
    python benchmarks/pg_decode_sweep.py RUN_A RUN_B --ensemble --grid task.test_beam=4
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script
    sys.path.insert(0, str(ROOT))

from benchmarks.pointer_generator import (  # noqa: E402
    EVALUATION_KEYS,
    apply_evaluation_overrides,
    load_for_scoring,
    saved_summary,
    scoring_checkpoint,
)
from benchmarks.results_doc import machine_description  # noqa: E402
from seqlab import api  # noqa: E402


def decode_key(flag: str, text: str) -> str:
    """The key of ``KEY=…`` after ``flag``, refused unless it is a decode-time setting."""
    key = text.split("=", 1)[0].strip()
    if key not in EVALUATION_KEYS:
        raise SystemExit(
            f"{flag} {text}: not a decode-time setting; one of {', '.join(EVALUATION_KEYS)}"
        )
    return key


def parse_grid(text: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2`` -> (KEY, [V1, V2]); KEY must be a decode-time setting."""
    _, sep, values = text.partition("=")
    if not sep or not values.strip():
        raise SystemExit(f"--grid {text!r}: write KEY=V1,V2,… (e.g. task.coverage_penalty=0,1)")
    return decode_key("--grid", text), [v.strip() for v in values.split(",") if v.strip()]


def score(loaded: api.LoadedModel, overrides: list[str], split: str) -> dict[str, float]:
    """The split's metrics with ``overrides`` on the run's saved config, plus the number of
    copied OOV words (``copies``) next to the percentage."""
    apply_evaluation_overrides(loaded, overrides)
    m = dict(loaded.evaluate(split))
    m["copies"] = round(m["oov_copy"] * m["oov_copyable"] / 100.0)
    return m


def load_models(runs: list[Path], data_dir, ensemble: bool) -> list[tuple[str, api.LoadedModel]]:
    """(name, model) per run, each at its scoring checkpoint; with ``ensemble`` one pair,
    the runs pooled (``api.load_ensemble``)."""
    if ensemble:
        prefer = [scoring_checkpoint(saved_summary(r)) for r in runs]
        name = "ensemble(" + ", ".join(r.name for r in runs) + ")"
        return [(name, api.load_ensemble(list(runs), data_dir=data_dir, prefer=prefer))]
    return [(r.name, load_for_scoring(r, data_dir, saved_summary(r))) for r in runs]


def sweep(
    runs: list[Path],
    key: str,
    values: list[str],
    fixed: list[str],
    splits: list[str],
    data_dir,
    ensemble: bool = False,
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """(split, value) -> one metrics dict per run, in ``runs`` order (one, the pool's, with
    ``ensemble``)."""
    table: dict[tuple[str, str], list[dict[str, float]]] = {}
    for name, loaded in load_models(runs, data_dir, ensemble):
        saved = loaded.config.to_dict()
        for value in values:
            chosen = [*fixed, f"{key}={value}"]
            # valid with this value's test beam (a grid over task.test_beam moves both)
            beam = api.resolve_config(saved, chosen).task_cfg.test_beam
            base = [f"task.valid_beam={beam}", "task.valid_bleu_sentences=0"]
            for split in splits:
                m = score(loaded, [*base, *chosen], split)
                table.setdefault((split, value), []).append(m)
                print(f"{name} {split} {key}={value}: " + fmt_row(m), flush=True)
    return table


def fmt_row(m: dict[str, float]) -> str:
    return (
        f"lc BLEU {m['bleu_lc']:.2f}, chrF {m['chrf']:.1f}, copies {m['copies']:.0f} / "
        f"{m['oov_copyable']:.0f}, rep. trigrams {m['repeat_trigram']:.2f} %"
    )


def markdown(table, runs: list[Path], key: str, command: str, ensemble: bool = False) -> str:
    head = ["split", key]
    for i in range(1 if ensemble else len(runs)):
        head += [f"run {i} lc BLEU", "copies", "rep. %"]
    head += ["mean lc BLEU", "mean copies", "mean rep. %"]
    lines = [
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description()}. "
        + ("Run 0 = the ensemble of " if ensemble else "Runs: ")
        + ", ".join((f"`{r}`" if ensemble else f"{i} = `{r}`") for i, r in enumerate(runs)),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for (split, value), rows in table.items():
        cells = [split, value]
        for m in rows:
            cells += [f"{m['bleu_lc']:.2f}", f"{m['copies']:.0f} / {m['oov_copyable']:.0f}"]
            cells += [f"{m['repeat_trigram']:.2f}"]
        n = len(rows)
        cells += [f"{sum(m[c] for m in rows) / n:.2f}" for c in ("bleu_lc", "copies")]
        cells += [f"{sum(m['repeat_trigram'] for m in rows) / n:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="finished pointer-generator run folders")
    p.add_argument("--grid", required=True, help="KEY=V1,V2,… (a decode-time setting)")
    p.add_argument("--set", nargs="*", default=[], help="more KEY=VALUE, held at every value")
    p.add_argument("--splits", default="valid,test", help="comma-separated (default valid,test)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", type=Path, default=None, help="markdown file for the table")
    p.add_argument(
        "--ensemble", action="store_true", help="decode the runs as one model (linear pool)"
    )
    args = p.parse_args(argv)
    key, values = parse_grid(args.grid)
    for o in args.set:
        decode_key("--set", o)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    table = sweep(args.runs, key, values, args.set, splits, args.data_dir, args.ensemble)
    command = "python benchmarks/pg_decode_sweep.py " + shlex.join(argv or sys.argv[1:])
    text = markdown(table, args.runs, key, command, args.ensemble)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
