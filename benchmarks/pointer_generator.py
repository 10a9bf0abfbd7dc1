"""Pointer-generator benchmark: the same preset without and with coverage (See et al. 2017)
on Multi30k de→en at word level with a 2,000-word target vocabulary, scored on test2016.

    python benchmarks/pointer_generator.py [--minutes 30] [--data-dir DIR]
        [--out docs/results.md] [--runs-dir runs] [key=value ...]

For each preset (``configs/multi30k-pointer-generator.yaml``, then
``…-coverage.yaml``): train for ``--minutes`` of wall-clock time (``train.max_minutes``;
``key=value`` overrides apply to both, ``coverage:key=value`` / ``plain:key=value`` to one)
into ``<runs-dir>/bench-<preset>``; take the checkpoint with the better validation BLEU
(best or last); decode test2016 with the preset's beam (``task.test_beam``). Reports
lowercase BLEU, chrF, the OOV copy rate (reference tokens outside the target vocabulary
that occur in the source and that the output contains), the repeated-trigram rate of the
output (and of the references), ``<unk>`` and mean p_gen; prints the table and replaces
the section ``## Pointer-generator (Multi30k de→en, test2016)`` of ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from seqlab import api
from seqlab.inspect.figures import write_json

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.translation import (  # noqa: E402  (shared helpers of the benchmarks)
    machine_description,
    overrides_for,
    train_tokens_per_s,
    write_section,
)

HEADING = "## Pointer-generator (Multi30k de→en, test2016)"
PRESETS = {"plain": "multi30k-pointer-generator", "coverage": "multi30k-pointer-generator-coverage"}
COPY_TARGET = 90.0  # issue 7: copies ≥ 90% of the source OOV words the reference keeps


@dataclass
class Row:
    """One preset's result; rates in % (0–100)."""

    variant: str
    preset: str
    coverage: bool
    cov_lambda: float
    params: int
    minutes: float
    updates: int
    tokens_per_s: float
    beam: int
    metrics: dict[str, float]
    checkpoint: str


def run_preset(
    variant: str,
    minutes: float,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    quiet: bool,
) -> Row:
    preset = PRESETS[variant]
    run_dir = runs_dir / f"bench-{preset}"
    run = api.train(
        ROOT / "configs" / f"{preset}.yaml",
        run_dir=run_dir,
        data_dir=data_dir,
        overrides=[f"train.max_minutes={minutes}", *overrides],
        overwrite=True,
        quiet=quiet,
    )
    summary = run.metrics
    best, final = summary.get("best") or {}, summary.get("valid") or {}
    use_best = best.get("value") is not None and best["value"] > final.get("bleu_lc", -1.0)
    loaded = api.load(run_dir, data_dir=data_dir, prefer="best" if use_best else "latest")
    metrics = dict(loaded.evaluate("test"))
    cfg = loaded.config
    return Row(
        variant=variant,
        preset=preset,
        coverage=bool(cfg.model_cfg.coverage),
        cov_lambda=float(cfg.task_cfg.cov_lambda),
        params=sum(p.numel() for p in loaded.model.parameters()),
        minutes=float(summary["elapsed"]) / 60.0,
        updates=int(summary["step"]),
        tokens_per_s=train_tokens_per_s(run_dir / "metrics.jsonl"),
        beam=int(cfg.task_cfg.test_beam),
        metrics=metrics,
        checkpoint=f"{loaded.checkpoint.name} (step {loaded.step})",
    )


def format_table(rows: list[Row]) -> str:
    head = (
        "| model | coverage | λ | params | train min | updates | tgt tok/s | beam K | lc BLEU "
        "| chrF | OOV copy % (copied / copyable) | repeated trigrams % | ref. rep. trigrams % | "
        "<unk> % | mean p_gen | checkpoint |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        m = r.metrics
        copied = round(m["oov_copy"] * m["oov_copyable"] / 100.0)
        lines.append(
            f"| `{r.preset}` | {'yes' if r.coverage else 'no'} | {r.cov_lambda:g} "
            f"| {r.params / 1e6:.2f}M | {r.minutes:.1f} | {r.updates} | {r.tokens_per_s:,.0f} "
            f"| {r.beam} "
            f"| {m['bleu_lc']:.1f} | {m['chrf']:.1f} "
            f"| {m['oov_copy']:.1f} ({copied} / {int(m['oov_copyable'])}) "
            f"| {m['repeat_trigram']:.2f} | {m['ref_repeat_trigram']:.2f} | {m['unk']:.1f} "
            f"| {m['p_gen']:.2f} | {r.checkpoint} |"
        )
    return "\n".join(lines)


def targets(rows: list[Row]) -> list[str]:
    """Issue 7's two pointer-generator targets, each marked met or not."""
    out = []
    for r in rows:
        met = r.metrics["oov_copy"] >= COPY_TARGET
        out.append(
            f"- `{r.preset}` copies ≥ {COPY_TARGET:g}% of the source OOV words the reference "
            f"keeps: {r.metrics['oov_copy']:.1f}% — {'met' if met else '**not met**'}"
        )
    by = {r.variant: r for r in rows}
    if "plain" in by and "coverage" in by:
        a, b = by["plain"].metrics["repeat_trigram"], by["coverage"].metrics["repeat_trigram"]
        verdict = "met" if b < a else "**not met**"
        out.append(f"- coverage lowers the repeated-trigram rate: {a:.2f}% → {b:.2f}% — {verdict}")
    return out


def render_section(rows: list[Row], command: str, minutes: float) -> str:
    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
            f"Budget: {minutes:g} min of training per preset (`train.max_minutes`).",
            "",
            format_table(rows),
            "",
            *targets(rows),
            "",
            "Word-level, lowercased; target vocabulary 2,000 (specials included). lc BLEU = "
            "sacreBLEU 13a, lowercase, on detokenised output against the lowercased "
            "references. OOV copy = reference tokens outside the target vocabulary that "
            "also occur in the source, clipped counts found in the output. Repeated "
            "trigrams = trigrams equal to an earlier trigram of the same sentence. Mean "
            "p_gen over the decoded steps. docs/pointer-generator.md explains each column.",
        ]
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/pointer_generator.py",
        description="Pointer-generator without and with coverage on Multi30k de→en.",
    )
    p.add_argument("--minutes", type=float, default=30.0, help="training budget per preset")
    p.add_argument("--variants", default="plain,coverage", help="plain, coverage or both")
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--runs-dir", default="runs", help="run folders go to RUNS/bench-<preset>")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument("overrides", nargs="*", help="key=value (both) or VARIANT:key=value")
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in args.variants:
        if v not in PRESETS:
            p.error(f"unknown variant {v!r} (plain, coverage)")
    for text in args.overrides:
        if "=" not in text:
            p.error(f"override {text!r} is not key=value")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/pointer_generator.py", *argv])
    for v in args.variants:  # check every config before training
        api.resolve_config(
            ROOT / "configs" / f"{PRESETS[v]}.yaml",
            [f"train.max_minutes={args.minutes}", *overrides_for(v, args.overrides)],
        )
    rows = []
    for v in args.variants:
        t0 = time.perf_counter()
        print(f"[{PRESETS[v]}] training {args.minutes:g} min …", flush=True)
        row = run_preset(
            v,
            args.minutes,
            overrides_for(v, args.overrides),
            args.data_dir,
            Path(args.runs_dir),
            quiet=not args.verbose,
        )
        rows.append(row)
        m = row.metrics
        print(
            f"[{row.preset}] lc BLEU {m['bleu_lc']:.1f}, OOV copy {m['oov_copy']:.1f}%, "
            f"repeated trigrams {m['repeat_trigram']:.2f}% "
            f"({(time.perf_counter() - t0) / 60.0:.1f} min with evaluation)",
            flush=True,
        )
    print(format_table(rows))
    print("\n".join(targets(rows)))
    out = Path(args.out)
    write_section(out, render_section(rows, command, args.minutes), HEADING)
    sidecar = {"command": command, "rows": [dataclasses.asdict(r) for r in rows]}
    path = write_json(out.parent / "figures" / "pointer-generator.json", sidecar)
    print(f"wrote {out} ({HEADING[3:]}) and {path}")  # the JSON is read by seqlab report
    return rows


if __name__ == "__main__":
    main()
