"""Named-entity benchmark: BiLSTM (softmax) and BiLSTM-CRF on CoNLL-2003, entity F1.

    python benchmarks/ner.py [--models bilstm,bilstm-crf] [--minutes 28] [--data-dir DIR]
        [--out docs/results.md] [--runs-dir runs] [--jobs N] [key=value ...]
        [MODEL:key=value ...]

For each model: train ``configs/conll-<model>.yaml`` for ``--minutes`` of wall-clock time
(``train.max_minutes``) into ``<runs-dir>/bench-conll-<model>``, load its best checkpoint
(best valid entity F1), and score valid (testa) and test (testb) with seqeval in
conlleval mode: overall precision / recall / F1 and F1 per type. The tables go to stdout
and replace the section ``## Named entities (CoNLL-2003)`` of ``--out`` (other sections
are kept), with the CRF gain (BiLSTM-CRF F1 − BiLSTM F1) when both ran. ``--jobs 2``
trains the models in parallel processes (with ``train.threads=1`` on a 2-core machine).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab import api
from seqlab.train.build import count_parameters

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import machine_description, write_section  # noqa: E402
from benchmarks.translation import (  # noqa: E402  (shared helpers of the benchmarks)
    overrides_for,
    train_tokens_per_s,
)

HEADING = "## Named entities (CoNLL-2003)"
MODELS = ("bilstm", "bilstm-crf")
LABELS = {"bilstm": "BiLSTM + char BiLSTM, softmax", "bilstm-crf": "BiLSTM-CRF + char BiLSTM"}
TYPES = ("PER", "LOC", "ORG", "MISC")
# issue 6: BiLSTM-CRF with char features and no external embeddings, test F1 ≥ 86.
TARGETS = {"bilstm-crf": 86.0}
# Lample et al. 2016, Table 1/4 (English test F1): LSTM-CRF with pretrained embeddings,
# char features and dropout 90.94; without pretraining their ablation reports less.
PUBLISHED = {"bilstm-crf": 90.94}


@dataclass
class Row:
    """One model's result; F1, precision and recall in percent."""

    model: str
    params: int
    minutes: float
    updates: int
    tokens_per_s: float
    checkpoint: str
    valid: dict[str, float] = field(default_factory=dict)
    test: dict[str, float] = field(default_factory=dict)

    @property
    def target(self) -> float | None:
        return TARGETS.get(self.model)

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.test["f1"] >= self.target


def preset_path(model: str) -> Path:
    return ROOT / "configs" / f"conll-{model}.yaml"


def run_model(
    model: str,
    minutes: float,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    quiet: bool = True,
) -> Row:
    """Train one preset for ``minutes``; score its best checkpoint on valid and test."""
    run_dir = runs_dir / f"bench-conll-{model}"
    run = api.train(
        preset_path(model),
        run_dir=run_dir,
        data_dir=data_dir,
        overrides=[f"train.max_minutes={minutes}", *overrides],
        overwrite=True,
        quiet=quiet,
    )
    loaded = api.load(run_dir, data_dir=data_dir, prefer="best")
    return Row(
        model=model,
        params=count_parameters(loaded.model),
        minutes=float(run.metrics["elapsed"]) / 60.0,
        updates=int(run.metrics["step"]),
        tokens_per_s=train_tokens_per_s(run_dir / "metrics.jsonl"),
        checkpoint=f"{loaded.checkpoint.name} (step {loaded.step})",
        valid={k: float(v) for k, v in loaded.evaluate("valid").items()},
        test={k: float(v) for k, v in loaded.evaluate("test").items()},
    )


def format_tables(rows: list[Row]) -> str:
    """The overall table, the per-type table and the CRF gain line (markdown)."""
    head = (
        "| model | params | train min | updates | tok/s | checkpoint | valid F1 | test F1 | "
        "test P | test R | published | target | met |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        target = "—" if r.target is None else f"≥ {r.target:.0f}"
        met = "—" if r.met is None else ("yes" if r.met else "**no**")
        published = PUBLISHED.get(r.model)
        lines.append(
            f"| {LABELS.get(r.model, r.model)} (`{r.model}`) | {r.params / 1e6:.2f}M "
            f"| {r.minutes:.1f} | {r.updates} | {r.tokens_per_s:,.0f} | {r.checkpoint} "
            f"| {r.valid['f1']:.2f} | {r.test['f1']:.2f} | {r.test['precision']:.2f} "
            f"| {r.test['recall']:.2f} | {'—' if published is None else f'{published:.2f}'} "
            f"| {target} | {met} |"
        )
    per_type = "| model | split | " + " | ".join(TYPES) + " | all |"
    lines += ["", per_type, "|" + "---|" * (len(TYPES) + 3)]
    for r in rows:
        for split, m in (("valid", r.valid), ("test", r.test)):
            cells = " | ".join(f"{m.get(f'f1_{t}', float('nan')):.2f}" for t in TYPES)
            lines.append(f"| `{r.model}` | {split} | {cells} | {m['f1']:.2f} |")
    by_name = {r.model: r for r in rows}
    if {"bilstm", "bilstm-crf"} <= set(by_name):
        crf, soft = by_name["bilstm-crf"], by_name["bilstm"]
        gain_valid = crf.valid["f1"] - soft.valid["f1"]
        gain_test = crf.test["f1"] - soft.test["f1"]
        lines += [
            "",
            f"CRF gain (BiLSTM-CRF − BiLSTM, entity F1): valid {gain_valid:+.2f}, "
            f"test {gain_test:+.2f}.",
        ]
    return "\n".join(lines)


def embeddings_note(command: str) -> str:
    """What initialised the word embeddings, read from the command's overrides."""
    words = shlex.split(command)
    paths = [a.split("=", 1)[1] for a in words if "embeddings_path=" in a]
    if not paths:
        return "Random word embeddings (no external vectors)."
    note = (
        f"Word embeddings initialised from `{paths[0]}` (`task.embeddings_path`; vectors "
        "seqlab trained on this project's own text with `seqlab embed train`: no external "
        "data, never the valid or test text; docs/tagging.md §4)."
    )
    if any(a.endswith("embeddings_vocab=extend") for a in words):
        note += (
            " `task.embeddings_vocab=extend`: the vector file's words join the vocabulary, "
            "so a test word unseen in train keeps its vector."
        )
    return note


def render_section(rows: list[Row], command: str, minutes: float) -> str:
    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
            f"Budget: {minutes:g} min of training per model (`train.max_minutes`).",
            "",
            format_tables(rows),
            "",
            "Entity-level F1 / precision / recall in percent, by seqeval in its default "
            "(conlleval-compatible) mode; valid = eng.testa, test = eng.testb. "
            + embeddings_note(command)
            + " The checkpoint is the one with the best valid F1. The published number is "
            "Lample et al. 2016 (with pretrained embeddings).",
        ]
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/ner.py",
        description="Train and score the CoNLL-2003 NER taggers (entity F1 per type).",
    )
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated preset names")
    p.add_argument("--minutes", type=float, default=28.0, help="training budget per model")
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--runs-dir", default="runs", help="runs go to RUNS/bench-conll-<model>")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument("--jobs", type=int, default=1, help="models trained at once (processes)")
    p.add_argument("overrides", nargs="*", help="key=value (all) or MODEL:key=value (one)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if not preset_path(m).is_file():
            p.error(f"no preset configs/conll-{m}.yaml (models: {', '.join(MODELS)})")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    """Run the benchmark; print the tables and write the section; return the rows."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/ner.py", *argv])
    threads = set()
    for model in args.models:  # check every config before training the first
        cfg = api.resolve_config(preset_path(model), overrides_for(model, args.overrides))
        threads.add(cfg.train.threads)
    jobs = [
        (m, args.minutes, overrides_for(m, args.overrides), args.data_dir, Path(args.runs_dir))
        for m in args.models
    ]
    t0 = time.perf_counter()
    print(f"[{', '.join(args.models)}] training {args.minutes:g} min each …", flush=True)
    if args.jobs > 1 and len(jobs) > 1:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter per model
        with ProcessPoolExecutor(min(args.jobs, len(jobs)), mp_context=context) as pool:
            futures = [pool.submit(run_model, *job, quiet=not args.verbose) for job in jobs]
            rows = [f.result() for f in futures]
        if len(threads) == 1 and None not in threads:  # the table's thread count: per model
            torch.set_num_threads(threads.pop())
    else:
        rows = [run_model(*job, quiet=not args.verbose) for job in jobs]
    took = (time.perf_counter() - t0) / 60.0
    for row in rows:
        print(f"[{row.model}] valid F1 {row.valid['f1']:.2f}, test F1 {row.test['f1']:.2f}")
    print(f"({took:.1f} min with evaluation)", flush=True)
    out = Path(args.out)
    print(format_tables(rows))
    write_section(out, render_section(rows, command, args.minutes), HEADING)
    print(f"wrote {out} ({HEADING[3:]})")
    return rows


if __name__ == "__main__":
    main()
