"""Translation benchmark: every encoder–decoder on Multi30k de→en, scored on test2016.

    python benchmarks/translation.py [--models transformer,convs2s,...] [--minutes 45]
        [--data-dir DIR] [--out docs/results.md] [--runs-dir runs] [key=value ...]

For each model: train ``configs/multi30k-<model>.yaml`` for ``--minutes`` of wall-clock
time (``train.max_minutes``; then the ``key=value`` overrides, which apply to every model,
and the ``MODEL:key=value`` ones, which apply to that model only) into
``<runs-dir>/bench-<model>``; pick the checkpoint with the better greedy validation BLEU
(the run's best or its last step); decode test2016 with the preset's beam
(``task.test_beam``, 5) and greedily (beam 1); score with sacreBLEU. The table goes to
stdout and replaces the section ``## Translation (Multi30k de→en, test2016)`` of
``--out`` (other sections are kept). Columns: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from seqlab import api
from seqlab.inspect.measure import (  # shared with seqlab compare; re-exported here
    overrides_for,
    peak_rss_mib,
    train_tokens_per_s,
)
from seqlab.inspect.measure import reset_peak_rss as _reset_peak_rss

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import (  # noqa: E402
    machine_description,
    section_body,
    write_section,
)

HEADING = "## Translation (Multi30k de→en, test2016)"
MODELS = ("transformer", "convs2s", "bahdanau", "luong", "cho", "sutskever")

# model → (row label, published BLEU or None, target, the BLEU the target is read on), the
# "Targets" table of issue 4 (../shared/docs/REFERENCES.md §1). de→en rows compare
# lowercase BLEU (the published numbers are tokenised, lowercase, greedy); the en→de row
# compares cased BLEU (DGL's 35.8 is cased, Moses-tokenised).
TARGETS: dict[str, tuple[str, float | None, float, str]] = {
    "transformer": ("Transformer", 36.5, 42.0, "bleu_lc"),
    "convs2s": ("ConvS2S", 34.1, 37.0, "bleu_lc"),
    "bahdanau": ("Bahdanau (BiGRU + additive)", 28.3, 33.0, "bleu_lc"),
    "luong": ("Luong (general, input feed)", None, 33.0, "bleu_lc"),
    "cho": ("Cho GRU", 20.6, 24.0, "bleu_lc"),
    "sutskever": ("Sutskever LSTM", 13.8, 19.0, "bleu_lc"),
    "transformer-en-de": ("Transformer **en→de**, target on cased BLEU", 35.8, 35.0, "bleu"),
}


@dataclass
class Row:
    """One model's result (BLEU and chrF in sacreBLEU's 0–100 scale)."""

    model: str
    params: int
    minutes: float
    updates: int
    tokens_per_s: float
    peak_rss_mib: float
    beam: int
    bleu_lc_greedy: float
    bleu_lc_beam: float
    bleu_beam: float
    chrf_beam: float
    checkpoint: str
    signatures: dict[str, str]

    @property
    def published(self) -> float | None:
        return TARGETS[self.model][1] if self.model in TARGETS else None

    @property
    def target(self) -> float | None:
        return TARGETS[self.model][2] if self.model in TARGETS else None

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        cased = TARGETS[self.model][3] == "bleu"
        return (self.bleu_beam if cased else self.bleu_lc_beam) >= self.target


# ---------------------------------------------------------------------------- measuring


def preset_path(model: str) -> Path:
    return ROOT / "configs" / f"multi30k-{model}.yaml"


def run_model(
    model: str,
    minutes: float,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    quiet: bool = True,
    average: int = 0,
) -> Row:
    """Train one preset for ``minutes``, then score test2016 with the preset's beam and greedy
    (with ``average`` N: the mean of the last N step checkpoints, ``seqlab average``)."""
    _reset_peak_rss()
    run_dir = runs_dir / f"bench-{model}"
    texts = [f"train.max_minutes={minutes}", *overrides]
    run = api.train(
        preset_path(model),
        run_dir=run_dir,
        data_dir=data_dir,
        overrides=texts,
        overwrite=True,
        quiet=quiet,
    )
    summary = run.metrics
    if average:
        from seqlab.train.averaging import average_checkpoints, last_checkpoints

        averaged = run_dir / "checkpoints" / f"average-last{average}"
        average_checkpoints(last_checkpoints(run_dir, average), averaged)
        loaded = api.load(averaged, data_dir=data_dir)
    else:
        # checkpoints/best: the best validation, the last step's included (an off-schedule
        # stop validates it), so it is the last model whenever that scores best
        loaded = api.load(run_dir, data_dir=data_dir, prefer="best")
    beam = loaded.task.cfg.test_beam
    scored = loaded.evaluate("test")
    loaded.task.cfg = dataclasses.replace(loaded.task.cfg, test_beam=1)
    greedy = loaded.evaluate("test")
    # kept for benchmarks/bleu_by_length.py (attention vs none, by source length)
    for name, result in (("test-beam.hyp", scored), ("test-greedy.hyp", greedy)):
        (run_dir / name).write_text("\n".join(result.hypotheses) + "\n", encoding="utf-8")
    return Row(
        model=model,
        params=sum(p.numel() for p in loaded.model.parameters()),
        minutes=float(summary["elapsed"]) / 60.0,
        updates=int(summary["step"]),
        tokens_per_s=train_tokens_per_s(run_dir / "metrics.jsonl"),
        peak_rss_mib=peak_rss_mib(),
        beam=beam,
        bleu_lc_greedy=float(greedy["bleu_lc"]),
        bleu_lc_beam=float(scored["bleu_lc"]),
        bleu_beam=float(scored["bleu"]),
        chrf_beam=float(scored["chrf"]),
        checkpoint=f"{loaded.checkpoint.name} (step {loaded.step})",
        signatures=dict(getattr(scored, "signatures", {})),
    )


# ---------------------------------------------------------------------------- reporting


def _num(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def format_table(rows: list[Row], earlier: list[str] | None = None) -> str:
    """The results as a markdown table (``earlier``: rows already formatted, put first)."""
    head = (
        "| model | params | train min | updates | tgt tok/s | peak RSS MiB | "
        "lc BLEU greedy | lc BLEU beam | beam K | BLEU (cased) | chrF | checkpoint | "
        "published | target | met |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|", *(earlier or [])]
    for r in rows:
        label = TARGETS.get(r.model, (r.model, None, None))[0]
        met = "—" if r.met is None else ("yes" if r.met else "**no**")
        target = "—" if r.target is None else f"≥ {r.target:.1f}"
        lines.append(
            f"| {label} (`{r.model}`) | {r.params / 1e6:.2f}M | {r.minutes:.1f} | {r.updates} "
            f"| {r.tokens_per_s:,.0f} | {r.peak_rss_mib:,.0f} | {r.bleu_lc_greedy:.1f} "
            # the judged BLEU with two decimals, so that 41.96 never shows as "42.0 … no"
            f"| {r.bleu_lc_beam:.2f} | {r.beam} | {r.bleu_beam:.2f} | {r.chrf_beam:.1f} "
            f"| {r.checkpoint} | {_num(r.published)} | {target} | {met} |"
        )
    return "\n".join(lines)


def models_of_command(line: str) -> set[str]:
    """The models a ``Command: `python benchmarks/translation.py …``` line ran."""
    words = shlex.split(line.split("`")[1]) if line.count("`") >= 2 else []
    given = [w.split("=", 1)[1] for w in words if w.startswith("--models=")]
    given += [b for a, b in zip(words, words[1:]) if a == "--models"]
    return {m.strip() for m in (given[0] if given else ",".join(MODELS)).split(",") if m}


def earlier_lines(path: Path, models: list[str]) -> dict[str, list[str]]:
    """From the section already in ``path``: the table rows and signature lines of the
    models not run now, and (when any is kept) the earlier Command/Machine lines of runs
    with a model not rerun now, so that separate invocations build up one table."""
    kept: dict[str, list[str]] = {"rows": [], "sigs": [], "runs": []}
    stale = False
    for line in section_body(path, HEADING):
        tag = re.search(r"`([A-Za-z0-9_-]+)`", line)
        other = tag is not None and tag.group(1) not in models
        if line.startswith("| ") and "(`" in line and other:
            kept["rows"].append(line)
        elif line.startswith("- `") and other:
            kept["sigs"].append(line)
        elif line.startswith("Command: "):  # dropped with its Machine line when every
            stale = models_of_command(line) <= set(models)  # model it ran is rerun now
            if not stale:
                kept["runs"].append(line)
        elif line.startswith("Machine: ") and not stale:
            kept["runs"].append(line)
    if not kept["rows"]:
        kept["runs"] = []
    return kept


def render_section(
    rows: list[Row], command: str, minutes: float, earlier: dict[str, list[str]] | None = None
) -> str:
    """The markdown section (heading to the end of its text, no trailing blank line); rows
    of ``earlier`` (:func:`earlier_lines`) come first, under their own command lines."""
    earlier = earlier or {"rows": [], "sigs": [], "runs": []}
    before = [line for run in earlier["runs"] for line in (run, "")]
    sigs = list(earlier["sigs"])
    for r in rows:
        for metric in ("bleu_lc", "bleu", "chrf"):
            if metric in r.signatures:
                sigs.append(f"- `{r.model}` {metric}: `{r.signatures[metric]}`")
    parts = [
        HEADING,
        "",
        *before,
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
        f"Budget: {minutes:g} min of training per model (`train.max_minutes`).",
        "",
        format_table(rows, earlier["rows"]),
        "",
        "lc BLEU = lowercase sacreBLEU (13a) on detokenised output, the number compared with "
        "the published (tokenised, lowercase, greedy) one; the target is issue 4's and "
        "is met when the beam lc BLEU reaches it, except for the en→de row, whose "
        "published number (DGL, Moses-tokenised) and target are cased BLEU. "
        "Column meanings: docs/benchmarks.md.",
        "",
        "sacreBLEU signatures (beam):",
        "",
        *sigs,
    ]
    return "\n".join(parts)


# ---------------------------------------------------------------------------- entry point


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/translation.py",
        description="Train and score the translation models on Multi30k de→en (test2016).",
    )
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
    p.add_argument("--minutes", type=float, default=45.0, help="training budget per model")
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--runs-dir", default="runs", help="run folders go to RUNS/bench-<model>")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument(
        "--average",
        type=int,
        default=0,
        metavar="N",
        help="score the average of the last N step checkpoints (Vaswani 2017 §6.1; set "
        "train.keep_last >= N and a train.save_every that gives N checkpoints)",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        help="key=value overrides for every model; MODEL:key=value for one model only",
    )
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if not preset_path(m).is_file():
            p.error(f"no preset configs/multi30k-{m}.yaml (models: {', '.join(MODELS)})")
    if args.average < 0:
        p.error(f"--average must be >= 0, got {args.average}")
    for text in args.overrides:
        if "=" not in text:
            p.error(f"override {text!r} is not key=value")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    """Run the benchmark; print the table and write the section; return the rows."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/translation.py", *argv])
    for model in args.models:  # check every config before spending hours on the first
        api.resolve_config(
            preset_path(model),
            [f"train.max_minutes={args.minutes}"] + overrides_for(model, args.overrides),
        )
    rows = []
    for model in args.models:
        t0 = time.perf_counter()
        print(f"[{model}] training {args.minutes:g} min …", flush=True)
        row = run_model(
            model,
            args.minutes,
            overrides_for(model, args.overrides),
            args.data_dir,
            Path(args.runs_dir),
            quiet=not args.verbose,
            average=args.average,
        )
        rows.append(row)
        took = (time.perf_counter() - t0) / 60.0
        print(
            f"[{model}] lc BLEU greedy {row.bleu_lc_greedy:.1f}, beam {row.bleu_lc_beam:.2f} "
            f"({took:.1f} min with evaluation)",
            flush=True,
        )
    out = Path(args.out)
    section = render_section(rows, command, args.minutes, earlier_lines(out, args.models))
    print(format_table(rows))
    write_section(out, section, HEADING)
    print(f"wrote {out} ({HEADING[3:]})")
    return rows


if __name__ == "__main__":
    main()
