"""Pointer-generator benchmark: the same preset without and with coverage (See et al. 2017)
on Multi30k de→en at word level with a 2,000-word target vocabulary, scored on test2016.

    python benchmarks/pointer_generator.py [--minutes 30] [--coverage-phase 5] [--reuse]
        [--data-dir DIR] [--out docs/results.md] [--runs-dir runs] [key=value ...]

See et al. 2017 (§5): the model is trained without coverage, and coverage is "added for a
short final training phase" (3,000 of ~233,000 iterations; trained with coverage from the
start their model was worse). So: ``plain`` trains ``configs/multi30k-pointer-generator.yaml``
for ``--minutes`` of wall-clock time (``train.max_minutes``) into
``<runs-dir>/bench-<preset>``; then, from its weights (``train.init_from``), two phases of
``--coverage-phase`` minutes each at the learning rate the plain run ended on (constant):
``coverage`` with ``…-coverage.yaml`` (coverage vector, w_c and the coverage loss, λ = 1)
and the control ``plain+`` with the plain preset, so that coverage is compared with the same
model trained as long without it. ``--coverage-phase 0`` trains the coverage preset from
scratch for ``--minutes`` instead (no control). ``key=value`` overrides apply to every run,
``coverage:key=value`` / ``plain:key=value`` to one. Each run is scored with the checkpoint
of better validation BLEU (best or last) on test2016 with the preset's beam
(``task.test_beam``). Reports
lowercase BLEU, chrF, the OOV copy rate (reference tokens outside the target vocabulary
that occur in the source and that the output contains), the repeated-trigram rate of the
output (and of the references), ``<unk>`` and mean p_gen, and the decode-time treatment
of ``<unk>`` (``task.block_unk`` / ``task.replace_unk``); prints the table and replaces
the section ``## Pointer-generator (Multi30k de→en, test2016)`` of ``--out``.

``--reuse`` trains nothing: it scores again the run folders already in ``--runs-dir``
(the same ``bench-<preset>`` names), so the table can be regenerated with other decode
settings in minutes. Its overrides may only be evaluation settings (``EVALUATION_KEYS``,
e.g. ``task.block_unk=true``); they are applied to each run's saved config before it is
scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from seqlab import api
from seqlab.inspect.claim_rules import COVERAGE_CUT
from seqlab.inspect.figures import write_json

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import machine_description, write_section  # noqa: E402
from benchmarks.translation import (  # noqa: E402  (shared helpers of the benchmarks)
    overrides_for,
    train_tokens_per_s,
)

HEADING = "## Pointer-generator (Multi30k de→en, test2016)"
PRESETS = {"plain": "multi30k-pointer-generator", "coverage": "multi30k-pointer-generator-coverage"}
CONTROL = "plain+"  # the plain model trained on for the coverage phase, without coverage
COPY_TARGET = 90.0  # issue 7: copies ≥ 90% of the source OOV words the reference keeps
# Overrides that change how a trained run is scored, not what was trained: the only ones
# --reuse accepts, and the ones applied to a run's saved config before scoring it.
EVALUATION_KEYS = (
    "task.test_beam",
    "task.test_sentences",
    "task.length_penalty",
    "task.max_len_a",
    "task.max_len_b",
    "task.eval_batch_tokens",
    "task.block_unk",
    "task.replace_unk",
    "task.unk_to_copy",
    "task.coverage_penalty",
    "task.coverage_penalty_words",
    "train.threads",
)


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
    block_unk: bool = False
    replace_unk: bool = False
    unk_to_copy: bool = False
    coverage_penalty: float = 0.0

    @property
    def beam_cell(self) -> str:
        """The table's "beam K" cell: K, and GNMT's coverage penalty β when it is on."""
        if self.coverage_penalty > 0.0:
            return f"{self.beam}, cp β {self.coverage_penalty:g}"
        return str(self.beam)

    @property
    def unk_decoding(self) -> str:
        """The table's "<unk> at decode" cell."""
        if self.unk_to_copy:
            return "to copies"
        return "blocked" if self.block_unk else "replaced" if self.replace_unk else "allowed"


def final_lr(run_dir: Path) -> float:
    """The learning rate of the last ``train`` event of a run's metrics.jsonl."""
    lr = None
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("event") == "train" and "lr" in event:
            lr = float(event["lr"])
    if lr is None:
        raise SystemExit(f"{run_dir}/metrics.jsonl has no train event with an lr")
    return lr


def phase_overrides(plain_dir: Path, minutes: float) -> list[str]:
    """A phase that continues ``plain_dir``: its weights, a constant rate equal to its last."""
    if not (plain_dir / "checkpoints").is_dir():
        raise SystemExit(f"no plain run at {plain_dir}: run the `plain` variant first")
    return [
        f"train.init_from={plain_dir}",
        f"train.max_minutes={minutes}",
        "schedule.name=constant",
        f"train.optim.lr={final_lr(plain_dir):.6g}",
    ]


def scoring_checkpoint(summary: dict) -> str:
    """Which checkpoint a run is scored with: ``best`` (the best validation BLEU) if it
    beats the last validation's, else ``latest`` (``summary`` as ``api.train`` returns it,
    or ``saved_summary``)."""
    best, final = summary.get("best") or {}, summary.get("valid") or {}
    use_best = best.get("value") is not None and best["value"] > final.get("bleu_lc", -1.0)
    return "best" if use_best else "latest"


def load_for_scoring(run_dir: Path, data_dir: str | None, summary: dict) -> api.LoadedModel:
    """The run rebuilt from its ``scoring_checkpoint``."""
    return api.load(run_dir, data_dir=data_dir, prefer=scoring_checkpoint(summary))


def saved_summary(run_dir: Path) -> dict:
    """What ``api.train`` returns, read back from a finished run's metrics.jsonl: step and
    elapsed of the final event, its validation, and the best validation BLEU."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"no finished run at {run_dir}: run its variant first")
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    final = next((e for e in reversed(events) if e.get("event") == "final"), None)
    if final is None:
        raise SystemExit(f"{path}: the run never finished (no final event)")
    best = [e["valid/bleu_lc"] for e in events if e.get("event") == "valid" and e.get("best")]
    return {
        "step": final["step"],
        "elapsed": final["elapsed"],
        "valid": {"bleu_lc": final.get("valid/bleu_lc", -1.0)},
        "best": {"value": max(best) if best else None},
    }


def evaluation_overrides(overrides: list[str]) -> list[str]:
    """The overrides among ``overrides`` that only change scoring (``EVALUATION_KEYS``)."""
    return [o for o in overrides if o.split("=", 1)[0].strip() in EVALUATION_KEYS]


def apply_evaluation_overrides(loaded: api.LoadedModel, overrides: list[str]) -> None:
    """Score ``loaded`` with ``overrides`` (evaluation keys only) on top of its saved
    config: the task's decode settings are replaced, ``train.threads`` sets the threads."""
    if not overrides:
        return
    cfg = api.resolve_config(loaded.config.to_dict(), overrides)
    loaded.config, loaded.task.cfg = cfg, cfg.task_cfg
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)


def run_preset(
    variant: str,
    minutes: float,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    quiet: bool,
    train: bool = True,
) -> Row:
    """Train one run (``overrides`` last, so a phase's ``train.max_minutes`` wins) and score
    it; the control ``plain+`` trains the plain preset into ``bench-<preset>-continued``.
    ``train=False`` scores the run already in its folder. Either way the run is scored
    with the evaluation overrides among ``overrides`` applied to its saved config."""
    preset = PRESETS["plain" if variant == CONTROL else variant]
    run_dir = runs_dir / f"bench-{preset}{'-continued' if variant == CONTROL else ''}"
    if train:
        summary = api.train(
            ROOT / "configs" / f"{preset}.yaml",
            run_dir=run_dir,
            data_dir=data_dir,
            overrides=[f"train.max_minutes={minutes}", *overrides],
            overwrite=True,
            quiet=quiet,
        ).metrics
    else:
        summary = saved_summary(run_dir)
    loaded = load_for_scoring(run_dir, data_dir, summary)
    apply_evaluation_overrides(loaded, evaluation_overrides(overrides))
    metrics = dict(loaded.evaluate("test"))
    cfg = loaded.config
    phase = minutes if train else round(float(summary["elapsed"]) / 60.0)  # as trained
    return Row(
        variant=variant,
        preset=preset if variant != CONTROL else f"{preset} (+{phase:g} min)",
        coverage=bool(cfg.model_cfg.coverage),
        cov_lambda=float(cfg.task_cfg.cov_lambda),
        params=sum(p.numel() for p in loaded.model.parameters()),
        minutes=float(summary["elapsed"]) / 60.0,
        updates=int(summary["step"]),
        tokens_per_s=train_tokens_per_s(run_dir / "metrics.jsonl"),
        beam=int(cfg.task_cfg.test_beam),
        metrics=metrics,
        checkpoint=f"{loaded.checkpoint.name} (step {loaded.step})",
        block_unk=bool(cfg.task_cfg.block_unk),
        replace_unk=bool(cfg.task_cfg.replace_unk),
        unk_to_copy=bool(cfg.task_cfg.unk_to_copy),
        coverage_penalty=float(cfg.task_cfg.coverage_penalty),
    )


def format_table(rows: list[Row]) -> str:
    head = (
        "| model | coverage | λ | params | train min | updates | tgt tok/s | beam K "
        "| <unk> at decode | lc BLEU "
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
            f"| {r.beam_cell} | {r.unk_decoding} "
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
    base = by.get(CONTROL) or by.get("plain")  # the equal-budget control when there is one
    if base is not None and "coverage" in by:
        a, b = base.metrics["repeat_trigram"], by["coverage"].metrics["repeat_trigram"]
        if a > 0 and b <= COVERAGE_CUT * a:  # the rule of seqlab report's coverage claim
            verdict = "met"
        elif b < a:
            verdict = f"**not met** (lower by {100 * (a - b) / a:.1f} %, less than the rule's 10 %)"
        else:
            verdict = "**not met**"
        out.append(
            f"- coverage lowers the repeated-trigram rate (vs `{base.preset}`): "
            f"{a:.2f}% → {b:.2f}% — {verdict}"
        )
    return out


def render_section(
    rows: list[Row], command: str, minutes: float, phase: float, reuse: bool = False
) -> str:
    if reuse:
        budget = (
            "Runs reused (`--reuse`): nothing was trained by this command; each run was "
            "scored again from its folder with the decode settings of the table (train min, "
            "updates and tgt tok/s are those recorded in its metrics.jsonl)."
        )
    elif phase > 0:
        budget = (
            f"Budget: {minutes:g} min of training without coverage (`train.max_minutes`), "
            f"then from those weights a {phase:g}-min phase with coverage and, as the "
            "control, one without (See et al. 2017 §5: coverage is added for a short final "
            "phase)."
        )
    else:
        budget = f"Budget: {minutes:g} min of training per preset, coverage from the start."
    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
            + budget,
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
            "p_gen over the decoded steps. <unk> at decode: allowed = the paper's decoding; "
            "blocked = `task.block_unk` (log P(<unk>) = −∞ at every step, so the decoder "
            "writes a vocabulary word or copies); replaced = `task.replace_unk` (each <unk> "
            "of the output becomes the source word with the most attention at its step); "
            "to copies = `task.unk_to_copy` (at every step P(<unk>) moves to the source "
            "words outside the target vocabulary, in proportion to their copy probability). "
            'beam K "4, cp β 0.2": beam 4 with GNMT\'s coverage penalty '
            "(`task.coverage_penalty`). docs/pointer-generator.md explains each column.",
        ]
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/pointer_generator.py",
        description="Pointer-generator without and with coverage on Multi30k de→en.",
    )
    p.add_argument("--minutes", type=float, default=30.0, help="training budget per preset")
    p.add_argument("--variants", default="plain,coverage", help="plain, coverage or both")
    p.add_argument(
        "--coverage-phase",
        type=float,
        default=5.0,
        help="minutes of the coverage phase from the plain run (0: coverage from scratch)",
    )
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--runs-dir", default="runs", help="run folders go to RUNS/bench-<preset>")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="train nothing: score the runs already in RUNS/bench-<preset> again "
        "(overrides: evaluation settings only, e.g. task.block_unk=true)",
    )
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
    if args.reuse:
        for v in args.variants:
            for text in overrides_for(v, args.overrides):
                if not evaluation_overrides([text]):
                    p.error(
                        f"--reuse scores runs already trained: override {text!r} cannot apply "
                        f"(evaluation settings only: {', '.join(EVALUATION_KEYS)})"
                    )
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
    # (variant, minutes, overrides, plain run to continue from or None)
    runs = [(v, args.minutes, overrides_for(v, args.overrides), None) for v in args.variants]
    if args.coverage_phase > 0 and "coverage" in args.variants:
        plain_dir = Path(args.runs_dir) / f"bench-{PRESETS['plain']}"
        runs = [r for r in runs if r[0] != "coverage"]
        if "plain" not in args.variants:  # the plain run already there: score it again
            runs.insert(0, ("plain", args.minutes, overrides_for("plain", args.overrides), None))
        for v in (CONTROL, "coverage"):
            own = overrides_for("plain" if v == CONTROL else v, args.overrides)
            runs.append((v, args.coverage_phase, own, plain_dir))
    rows = []
    for v, minutes, overrides, plain_dir in runs:
        t0 = time.perf_counter()
        trains = not args.reuse and (v in args.variants or v == CONTROL)
        doing = f"training {minutes:g} min" if trains else "scoring the saved run"
        print(f"[{v}] {doing} …", flush=True)
        if trains and plain_dir is not None:  # read only now: this invocation's plain run is done
            overrides = [*overrides, *phase_overrides(plain_dir, minutes)]
        row = run_preset(
            v, minutes, overrides, args.data_dir, Path(args.runs_dir), not args.verbose, trains
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
    section = render_section(rows, command, args.minutes, args.coverage_phase, args.reuse)
    write_section(out, section, HEADING)
    sidecar = {
        "command": command,
        "reuse": args.reuse,
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    path = write_json(out.parent / "figures" / "pointer-generator.json", sidecar)
    print(f"wrote {out} ({HEADING[3:]}) and {path}")  # the JSON is read by seqlab report
    return rows


if __name__ == "__main__":
    main()
