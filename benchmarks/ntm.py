"""Neural Turing Machine benchmark: the NTM on the paper's tasks, next to an LSTM baseline.

    python benchmarks/ntm.py [--problems copy,repeat_copy,recall,priority_sort]
        [--seeds 0,1,2] [--minutes 30] [--baseline-minutes M] [--no-baseline]
        [--out docs/results.md] [--figures docs/figures] [--runs-dir runs] [--verbose]
        [key=value ...]

For every problem: train ``configs/ntm-<problem>.yaml`` for ``--minutes`` (per run,
``train.max_minutes``) into ``<runs-dir>/bench-ntm-<problem>-s<seed>`` — every seed of
``--seeds`` for copy (the issue's target is 3 of 3 seeds), the first seed for the others —
and the LSTM baseline ``configs/lstm-<problem>.yaml`` (first seed). Each run is
scored with its checkpoint of fewest validation bit errors (``best``), on the validation
split (fresh sequences of every training length) and on the test lengths. A memory-trace
figure of the first seed's NTM per problem goes to ``--figures`` (``ntm-<problem>.png``;
copy also at length 50), with the trace arrays (npz + json) in the run directory.

The table goes to stdout and replaces the section ``## Neural Turing Machine`` of ``--out``;
the tables and figures of problems not run now are kept from it, so separate invocations
(e.g. copy with 3 seeds, then the other problems with a shorter budget) build one section.
Overrides ``key=value`` apply to every run (e.g. ``train.threads=2``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.results_doc import (  # noqa: E402
    machine_description,
    section_body,
    write_section,
)
from seqlab import api  # noqa: E402
from seqlab.inspect.memory import plot_memory, save_trace  # noqa: E402

HEADING = "## Neural Turing Machine"
PROBLEMS = ("copy", "repeat_copy", "recall", "priority_sort")
TARGET_BIT_ERRORS = 0.1  # copy: every held-out length 1–20 below this, in every seed
# problem → the lengths whose memory traces are drawn (the first is ntm-<problem>.png)
TRACE_LENGTHS = {"copy": (20, 50), "repeat_copy": (5,), "recall": (6,), "priority_sort": (20,)}


@dataclass
class Row:
    """One trained run, scored with its best checkpoint."""

    problem: str
    model: str
    seed: int
    params: int
    minutes: float
    updates: int
    checkpoint_step: int
    valid: dict[str, float]
    test: dict[str, float]
    figures: list[str] = field(default_factory=list)

    @property
    def met(self) -> bool | None:
        if self.problem != "copy" or self.model != "ntm":
            return None
        return self.valid["bit_errors_max"] < TARGET_BIT_ERRORS


def preset_path(problem: str, model: str) -> Path:
    name = f"{'ntm' if model == 'ntm' else 'lstm'}-{problem.replace('_', '-')}"
    return ROOT / "configs" / f"{name}.yaml"


def run_one(
    problem: str,
    model: str,
    seed: int,
    minutes: float,
    overrides: list[str],
    runs_dir: Path,
    figures: Path | None,
    quiet: bool,
) -> Row:
    """Train one preset for ``minutes``, score its best checkpoint, draw its traces."""
    tag = "ntm" if model == "ntm" else "lstm"
    run_dir = runs_dir / f"bench-{tag}-{problem}-s{seed}"
    texts = [f"train.max_minutes={minutes}", f"train.seed={seed}", *overrides]
    run = api.train(
        preset_path(problem, model), run_dir=run_dir, overrides=texts, overwrite=True, quiet=quiet
    )
    loaded = api.load(run_dir, prefer="best")
    row = Row(
        problem=problem,
        model=loaded.config.model,
        seed=seed,
        params=sum(p.numel() for p in loaded.model.parameters()),
        minutes=float(run.metrics["elapsed"]) / 60.0,
        updates=int(run.metrics["step"]),
        checkpoint_step=loaded.step,
        valid=loaded.evaluate("valid"),
        test=loaded.evaluate("test"),
    )
    if figures is not None and model == "ntm":
        for i, length in enumerate(TRACE_LENGTHS[problem]):
            trace = loaded.trace(length)
            name = f"ntm-{problem.replace('_', '-')}" + ("" if i == 0 else f"-{length}")
            save_trace(trace, run_dir / f"trace-{problem}-{length}")
            title = f"NTM {problem}, length {length}, seed {seed} (step {loaded.step})"
            row.figures.append(str(plot_memory(trace, figures / f"{name}.png", title=title)))
    return row


# ---------------------------------------------------------------------------- reporting


def format_table(rows: list[Row]) -> str:
    """Bit errors per sequence (σ > 0.5 vs target) on validation and each test length."""
    lengths = sorted({int(k.split("@")[1]) for r in rows for k in r.test if "errors@" in k})
    head = (
        "| problem | model | seed | params | train min | updates | best step | "
        "valid bit err/seq (mean / worst length) | valid cost bits/seq | "
        + " | ".join(f"test L={n}" for n in lengths)
        + " | target met |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [
            f"{r.test[f'bit_errors@{n}']:.2f}" if f"bit_errors@{n}" in r.test else "—"
            for n in lengths
        ]
        met = "—" if r.met is None else ("yes" if r.met else "**no**")
        lines.append(
            f"| {r.problem} | `{r.model}` | {r.seed} | {r.params / 1e3:.1f}k | {r.minutes:.1f} "
            f"| {r.updates} | {r.checkpoint_step} | {r.valid['bit_errors']:.3f} / "
            f"{r.valid['bit_errors_max']:.3f} | {r.valid['cost_bits']:.3f} | "
            + " | ".join(cells)
            + f" | {met} |"
        )
    return "\n".join(lines)


def earlier_parts(path: Path, problems: list[str]) -> dict[str, list[str]]:
    """From the section already in ``path``: the ``### <problem>`` tables, figure lines
    and copy verdict of the problems not run now, with the earlier Command/Machine lines,
    so that separate invocations (different budgets) build up one section."""
    kept: dict[str, list[str]] = {"runs": [], "tables": [], "figures": [], "verdict": []}
    tables: dict[str, list[str]] = {}
    current = None  # the problem whose table is being read
    for line in section_body(path, HEADING):
        if line.startswith("### "):
            current = line[4:].strip()
            tables[current] = []
        elif line.startswith("|") and current is not None:
            tables[current].append(line)
        elif line.strip():
            current = None
            if line.startswith("![NTM ") and line.split(" ")[1] not in problems:
                kept["figures"] += [line, ""]
            elif line.startswith(("Command: ", "Machine: ")):
                kept["runs"] += [line, ""]
            elif "Copy target" in line and "copy" not in problems:
                kept["verdict"] = [line[line.index("Copy target") :]]
    for prob, table in tables.items():
        if prob not in problems and table:
            kept["tables"] += [f"### {prob}", "", *table, ""]
    if not kept["tables"]:
        kept["runs"] = []
    return kept


def render_section(
    rows: list[Row],
    command: str,
    args: argparse.Namespace,
    out: Path,
    earlier: dict[str, list[str]] | None = None,
) -> str:
    earlier = earlier or {"runs": [], "tables": [], "figures": [], "verdict": []}
    copy = [r for r in rows if r.met is not None]
    verdict = (
        f"Copy target (< {TARGET_BIT_ERRORS} bit errors per sequence at every held-out "
        f"length 1–20): {sum(r.met for r in copy)} of {len(copy)} seeds."
        if copy
        else (earlier["verdict"] or ["Copy was not run."])[0]
    )
    figures = list(earlier["figures"])
    for r in rows:
        for f in r.figures:
            rel = os.path.relpath(f, out.parent)
            figures += [f"![NTM {r.problem} memory trace]({rel})", ""]
    parts = [
        HEADING,
        "",
        *earlier["runs"],
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
        f"Budget: {args.minutes:g} min of training per run (`train.max_minutes`).",
        "",
        *earlier["tables"],
        *[
            line
            for prob in dict.fromkeys(r.problem for r in rows)
            for line in (
                f"### {prob}",
                "",
                format_table([r for r in rows if r.problem == prob]),
                "",
            )
        ],
        "Bit errors per sequence: output bits on the wrong side of 0.5, summed over the "
        "output phase, averaged over 64 sequences per length (validation: every training "
        "length, fresh sequences; test: longer sequences, generalisation). Cost: binary "
        "cross-entropy in bits per sequence. Scored with the checkpoint of fewest validation "
        "bit errors. " + verdict,
        "",
        "Memory traces (Graves et al. 2014 Fig. 6): inputs, targets, outputs, then each "
        "head's weighting w_t(i) over time (rows: the memory locations the heads visited).",
        "",
        *figures,
    ]
    return "\n".join(parts).rstrip("\n")


# ---------------------------------------------------------------------------- entry point


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/ntm.py", description="Train and score the NTM and its LSTM baseline."
    )
    p.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated problems")
    p.add_argument("--seeds", default="0,1,2", help="copy seeds (other problems: the first)")
    p.add_argument("--minutes", type=float, default=30.0, help="training budget per run")
    p.add_argument("--baseline-minutes", type=float, default=None, help="default: --minutes")
    p.add_argument("--no-baseline", action="store_true", help="skip the LSTM baseline")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--figures", default=str(ROOT / "docs" / "figures"), help="PNG folder")
    p.add_argument("--runs-dir", default="runs", help="run folders go to RUNS/bench-…")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = p.parse_args(argv)
    args.problems = [x.strip() for x in args.problems.split(",") if x.strip()]
    args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    for prob in args.problems:
        if prob not in PROBLEMS:
            p.error(f"unknown problem {prob!r} (choose from {', '.join(PROBLEMS)})")
    if not args.seeds:
        p.error("--seeds needs at least one seed")
    for text in args.overrides:
        if "=" not in text:
            p.error(f"override {text!r} is not key=value")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    """Run the benchmark; print the table and write the section; return the rows."""
    torch.set_num_threads(1)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/ntm.py", *argv])
    plan = []
    for prob in args.problems:
        seeds = args.seeds if prob == "copy" else args.seeds[:1]
        plan += [(prob, "ntm", s, args.minutes) for s in seeds]
        if not args.no_baseline:
            plan.append((prob, "lstm", args.seeds[0], args.baseline_minutes or args.minutes))
    for prob, model, _, minutes in plan:  # check every config before the first long run
        api.resolve_config(preset_path(prob, model), [f"train.max_minutes={minutes}"])
    rows = []
    for prob, model, seed, minutes in plan:
        t0 = time.perf_counter()
        print(f"[{prob} {model} seed {seed}] training {minutes:g} min …", flush=True)
        row = run_one(
            prob,
            model,
            seed,
            minutes,
            args.overrides,
            Path(args.runs_dir),
            Path(args.figures) if model == "ntm" and seed == args.seeds[0] else None,
            quiet=not args.verbose,
        )
        rows.append(row)
        took = (time.perf_counter() - t0) / 60.0
        print(
            f"[{prob} {model} seed {seed}] valid bit errors {row.valid['bit_errors']:.3f} "
            f"(worst length {row.valid['bit_errors_max']:.3f}) after {row.updates} updates "
            f"({took:.1f} min with evaluation)",
            flush=True,
        )
    out = Path(args.out)
    for prob in dict.fromkeys(r.problem for r in rows):
        print(format_table([r for r in rows if r.problem == prob]))
    earlier = earlier_parts(out, args.problems)
    write_section(out, render_section(rows, command, args, out, earlier), HEADING)
    print(f"wrote {out} ({HEADING[3:]})")
    return rows


if __name__ == "__main__":
    main()
