"""Language-model benchmark: train the LM presets in a time budget, report perplexity / bpc.

    python benchmarks/lm.py [--presets ptb-lstm,shakespeare-char-transformer,...]
        [--minutes M] [--data-dir DIR] [--out docs/results.md] [--runs-dir runs]
        [--no-fit-schedule] [key=value ...] [PRESET:key=value ...]

For each preset: train ``configs/<preset>.yaml`` for ``--minutes`` (default: the preset's
own ``train.max_minutes``) into ``<runs-dir>/bench-<preset>``, then evaluate the better of
the best and the last checkpoint on valid and (PTB) test, and sample text from it (500
characters for character models, 60 words for word models; temperature 0.8, seed 0).
Word models report perplexity, character models nats and bits per character.

A cosine schedule must end when the budget does: unless ``--no-fit-schedule``, a preset
with ``schedule.name: cosine`` runs with ``schedule.total_steps=0`` (and no step limit), so
the trainer fits T to the budget at the end of the warmup and refits it every 50 updates
from its recent speed, validations included (docs/training.md). Step-decay presets (the
PTB RNNs: η × 0.8 per epoch) need nothing.

Two presets are derived here (and shipped as configs/ptb-pointer-baseline.yaml and
configs/shakespeare-nanogpt.yaml, which a test keeps equal to the derivation):
``ptb-pointer-baseline`` is
configs/ptb-pointer-sentinel.yaml with ``model.name: rnn_lm`` (the same LSTM without the
pointer, its baseline at equal size and budget) and ``shakespeare-char-nanogpt`` is the
character Transformer preset at nanoGPT's CPU model (4 layers, width 128, context 64,
dropout 0), the model of the issue's 3-minute target, trained with batches of 32 × 64 and
Muon at η 8e-3 (AdamW for embeddings and norms), validated only at the end.

The table goes to stdout and replaces the section ``## Language models`` of ``--out``
(other sections are kept).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqlab import api
from seqlab.config import load_yaml
from seqlab.inspect.measure import overrides_for
from seqlab.run_config import resolve_run

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import (  # noqa: E402
    machine_description,
    section_body,
    write_section,
)

HEADING = "## Language models"
PRESETS = (
    "shakespeare-char-transformer",
    "shakespeare-char-lstm",
    "ptb-lstm",
    "ptb-gru",
    "ptb-rnn",
    "ptb-transformer",
    "ptb-nplm",
    "ptb-pointer-sentinel",
    "ptb-pointer-baseline",
)
DERIVED: dict[str, tuple[str, dict[str, dict[str, Any]], tuple[str, ...]]] = {
    # name: (shipped preset, section → fields to set, model fields to drop)
    "ptb-pointer-baseline": ("ptb-pointer-sentinel", {"model": {"name": "rnn_lm"}}, ("window",)),
    "shakespeare-char-nanogpt": (
        "shakespeare-char-transformer",
        {
            "model": {
                "layers": 4,
                "d_model": 128,
                "n_heads": 4,
                "d_ff": 512,
                "context": 64,
                "dropout": 0.0,
            },
            "task": {"bptt": 64, "batch_size": 32, "random_offset": True},
            "schedule": {"warmup": 100},
            # Muon on the matrices (docs/training.md "Optimizers"); no validation or step
            # checkpoint inside the 3 minutes, only the final ones (docs/lm.md §4).
            "train": {
                "optim": {
                    "name": "muon",
                    "lr": 8e-3,
                    "betas": [0.9, 0.99],
                    "weight_decay": 0.1,
                },
                "valid_every": 100000,
                "save_every": 100000,
            },
        },
        (),
    ),
}
# The derived presets are shipped too, so that ``seqlab train`` runs them directly; a test
# checks each file against its DERIVED spec. (The nanoGPT file's name sorts after
# configs/shakespeare-char-transformer.yaml, which ``seqlab compare shakespeare`` keeps as
# the transformer_lm preset.)
SHIPPED_AS = {
    "ptb-pointer-baseline": "ptb-pointer-baseline",
    "shakespeare-char-nanogpt": "shakespeare-nanogpt",
}
# preset: (split, metric, target (≤), published reference), issue 5's targets.
TARGETS: dict[str, tuple[str, str, float | None, str]] = {
    "shakespeare-char-transformer": ("valid", "loss", 1.50, "nanoGPT 6×384 GPU: 1.47"),
    "shakespeare-char-nanogpt": ("valid", "loss", 1.55, "nanoGPT CPU, 2,000 iters: 1.88"),
    "shakespeare-char-lstm": ("valid", "loss", 1.60, "—"),
    "ptb-lstm": ("test", "ppl", 90.0, "Zaremba small 114.5, medium 82.7"),
    "ptb-lstm-large": ("test", "ppl", 80.0, "Zaremba medium 82.7; pytorch/examples 650 tied 75.96"),
    "ptb-gru": ("test", "ppl", None, "—"),
    "ptb-rnn": ("test", "ppl", None, "Mikolov RNN 124.7"),
    "ptb-transformer": ("test", "ppl", None, "—"),
    "ptb-nplm": ("test", "ppl", None, "Bengio 2003 (Brown): 252"),
    "ptb-pointer-sentinel": ("test", "ppl", None, "Merity 2016 (2×650): 70.9"),
    "ptb-pointer-baseline": ("test", "ppl", None, "—"),
}


@dataclass
class Row:
    preset: str
    model: str
    level: str
    params: int
    minutes: float
    updates: int
    epochs: float
    tokens_per_s: float
    valid: dict[str, float]
    test: dict[str, float] | None
    checkpoint: str
    sample: str
    fitted_steps: int | None = None
    notes: list[str] = field(default_factory=list)

    def value(self) -> float | None:
        split, metric, _, _ = TARGETS.get(self.preset, ("valid", "loss", None, ""))
        result = self.valid if split == "valid" else self.test
        return None if result is None else result.get(metric)

    @property
    def target(self) -> float | None:
        return TARGETS.get(self.preset, ("", "", None, ""))[2]

    @property
    def met(self) -> bool | None:
        value = self.value()
        return None if self.target is None or value is None else value <= self.target


# ---------------------------------------------------------------------------- presets


def load_preset(name: str) -> dict[str, Any]:
    """The preset as a dict (a derived one built from its shipped base)."""
    base, changes, drop = DERIVED.get(name, (name, {}, ()))
    data = copy.deepcopy(load_yaml(ROOT / "configs" / f"{base}.yaml"))
    for section, values in changes.items():
        data.setdefault(section, {}).update(values)
    for key in drop:
        data["model"].pop(key, None)
    return data


def fitted_total_steps(metrics: Path) -> int | None:
    """The last T of a cosine fitted to the budget (metrics.jsonl "schedule" events)."""
    fits = [
        json.loads(line)
        for line in metrics.read_text(encoding="utf-8").splitlines()
        if '"schedule"' in line
    ]
    return int(fits[-1]["total_steps"]) if fits else None


def train_tokens_per_s(metrics: Path) -> float:
    rates = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("event") == "train" and "tokens_per_s" in record:
            rates.append(float(record["tokens_per_s"]))
    return statistics.median(rates) if rates else float("nan")


def first_difference(have: Any, want: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """(dotted path, stored value, wanted value) of the first field where two plain config
    dicts differ, or None."""
    if isinstance(have, dict) and isinstance(want, dict):
        for key in [*want, *(k for k in have if k not in want)]:
            where = f"{path}.{key}" if path else str(key)
            found = first_difference(have.get(key), want.get(key), where)
            if found is not None:
                return found
        return None
    return None if have == want else (path, have, want)


def resumable(run_dir: Path, preset: dict[str, Any], overrides: list[str]) -> bool:
    """``run_dir`` holds a step checkpoint of exactly this preset + overrides (--resume).

    A run dir with no checkpoint is trained afresh; one whose stored config differs from
    the command's is an error naming the first differing field, never silently replaced.
    A field the stored config lacks (added to seqlab later) counts as its default.
    """
    if not any((run_dir / "checkpoints").glob("step-*")):
        return False
    # Resolved again, so that a field added to seqlab since the run was saved takes its
    # default on both sides instead of reading as a difference.
    stored = resolve_run(load_yaml(run_dir / "config.yaml"), []).to_dict()
    wanted = resolve_run(preset, overrides).to_dict()  # plain: tuples are lists, as stored
    found = first_difference(stored, wanted)
    if found is not None:
        where, have, want = found
        raise SystemExit(
            f"--resume: {run_dir / 'config.yaml'}: {where} is {have!r} there but {want!r} "
            "in this command; run the same command, or drop --resume to train afresh"
        )
    return True


def run_preset(
    preset: str,
    minutes: float | None,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    fit: bool,
    quiet: bool,
    resume: bool = False,
) -> Row:
    data = load_preset(preset)
    budget = minutes if minutes is not None else data.get("train", {}).get("max_minutes")
    if budget is None:
        raise SystemExit(f"{preset}: no train.max_minutes in the preset: pass --minutes")
    texts = [f"train.max_minutes={budget}", *overrides]
    fit = fit and data.get("schedule", {}).get("name") == "cosine"
    if fit:  # T fitted to the budget in the run, refitted as the speed changes
        texts += ["schedule.total_steps=0", f"train.max_steps={10**9}"]
    run_dir = runs_dir / f"bench-{preset}"
    if resume and resumable(run_dir, data, texts):
        run = api.resume(run_dir, data_dir=data_dir, quiet=quiet)
    else:
        run = api.train(
            data, run_dir=run_dir, data_dir=data_dir, overrides=texts, overwrite=True, quiet=quiet
        )
    summary = run.metrics
    # checkpoints/best: the best validation, the last step's included
    loaded = api.load(run_dir, data_dir=data_dir, prefer="best")
    task = loaded.task
    valid = loaded.evaluate("valid")
    test = loaded.evaluate("test") if "test" in task.corpus.splits else None
    n_sample = 500 if task.is_char else 60
    sample = loaded.generate(None, max_tokens=n_sample, temperature=0.8, seed=0)
    stream = task.ids("train").numel()
    tokens_seen = summary["step"] * task.cfg.batch_size * task.cfg.bptt
    return Row(
        preset=preset,
        model=loaded.config.model,
        level=task.cfg.level,
        params=sum(p.numel() for p in loaded.model.parameters()),
        minutes=float(summary["elapsed"]) / 60.0,
        updates=int(summary["step"]),
        epochs=tokens_seen / stream,
        tokens_per_s=train_tokens_per_s(run_dir / "metrics.jsonl"),
        valid=dict(valid),
        test=None if test is None else dict(test),
        checkpoint=f"{loaded.checkpoint.name} (step {loaded.step})",
        sample=sample,
        fitted_steps=fitted_total_steps(run_dir / "metrics.jsonl") if fit else None,
    )


# ---------------------------------------------------------------------------- reporting


def _metric(result: dict[str, float] | None, level: str) -> str:
    if result is None:
        return "—"
    if level == "char":
        return f"{result['nats_per_char']:.3f} nats ({result['bpc']:.3f} bpc)"
    return f"{result['ppl']:.1f}"


def format_table(rows: list[Row]) -> str:
    head = (
        "| preset | model | params | train min | updates | epochs | tok/s | valid | test | "
        "checkpoint | published | target | met |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        split, metric, target, published = TARGETS.get(r.preset, ("valid", "loss", None, "—"))
        unit = "ppl" if metric == "ppl" else "nats/char"
        shown = "—" if target is None else f"{split} {unit} ≤ {target:g}"
        met = "—" if r.met is None else ("yes" if r.met else "**no**")
        lines.append(
            f"| `{r.preset}` | {r.model} | {r.params / 1e6:.2f}M | {r.minutes:.1f} | {r.updates} "
            f"| {r.epochs:.1f} | {r.tokens_per_s:,.0f} | {_metric(r.valid, r.level)} "
            f"| {_metric(r.test, r.level)} | {r.checkpoint} | {published} | {shown} | {met} |"
        )
    return "\n".join(lines)


def presets_of_command(line: str) -> list[str]:
    """The presets a ``Command: `python benchmarks/lm.py …``` line ran (its --presets, or
    every preset when it gave none)."""
    words = shlex.split(line.split("`")[1]) if line.count("`") >= 2 else []
    for i, word in enumerate(words):
        if word == "--presets" and i + 1 < len(words):
            return [s.strip() for s in words[i + 1].split(",") if s.strip()]
        if word.startswith("--presets="):
            return [s.strip() for s in word.split("=", 1)[1].split(",") if s.strip()]
    return list(PRESETS)


def earlier_parts(path: Path, presets: list[str]) -> dict[str, list[str]]:
    """From the section already in ``path``: the table rows and sample blocks of the presets
    not run now, and (when any is kept) the earlier Command/Machine lines, so that separate
    invocations (different budgets) build up one table."""
    kept: dict[str, list[str]] = {"rows": [], "samples": [], "runs": [], "fitted": []}
    block: list[str] | None = None
    stale = False
    for line in section_body(path, HEADING):
        name = line.split("`")[1] if line.count("`") >= 2 else None
        if block is not None:
            block.append(line)
            if line == "```" and len(block) > 3:
                kept["samples"] += ["", *block]
                block = None
        elif line.startswith("| `") and name not in presets:
            kept["rows"].append(line)
        elif line.startswith("`") and line.endswith("):") and name not in presets:
            block = [line]
        elif line.startswith("Command: "):  # dropped with its Machine line when every
            stale = set(presets_of_command(line)) <= set(presets)  # preset of it is rerun
            if not stale:
                kept["runs"].append(line)
        elif line.startswith("Machine: ") and not stale:
            kept["runs"].append(line)
        elif line.startswith("Cosine schedules fitted"):  # "…: `name` T, `name` T."
            entries = line.split(": ", 1)[1].rstrip(".").split(", ")
            kept["fitted"] += [e for e in entries if e.split("`")[1] not in presets]
    if not kept["rows"]:
        kept["runs"] = []
    return kept


def render_section(
    rows: list[Row], command: str, earlier: dict[str, list[str]] | None = None
) -> str:
    earlier = earlier or {"rows": [], "samples": [], "runs": [], "fitted": []}
    table = format_table(rows).splitlines()
    parts = [
        HEADING,
        "",
        *[line for run in earlier["runs"] for line in (run, "")],
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}.",
        "",
        *table[:2],
        *earlier["rows"],
        *table[2:],
        "",
        "Word level: perplexity exp(NLL / N) over every token, ⟨/s⟩ included. Character "
        "level: NLL / N in nats per character (the training loss) and bits per character. "
        "tok/s: median training tokens per second. epochs: training tokens read ÷ the "
        "training stream. The checkpoint is the better of the best and the last.",
    ]
    fitted = [
        *earlier.get("fitted", []),
        *(f"`{r.preset}` {r.fitted_steps}" for r in rows if r.fitted_steps),
    ]
    if fitted:
        parts += [
            "",
            "Cosine schedules fitted to the budget in the run (the last refitted T): "
            + ", ".join(fitted)
            + ".",
        ]
    by_name = {r.preset: r for r in rows}
    pointer, base = by_name.get("ptb-pointer-sentinel"), by_name.get("ptb-pointer-baseline")
    if pointer and base and pointer.test and base.test:
        beats = "yes" if pointer.test["ppl"] < base.test["ppl"] else "**no**"
        parts += [
            "",
            f"Pointer sentinel vs its LSTM baseline (same size and budget): test ppl "
            f"{pointer.test['ppl']:.1f} vs {base.test['ppl']:.1f} — beats it: {beats}.",
        ]
    parts += ["", "Samples (temperature 0.8, seed 0, no prompt):", *earlier["samples"]]
    for r in rows:
        what = "characters" if r.level == "char" else "words"
        n = 500 if r.level == "char" else 60
        parts += ["", f"`{r.preset}` ({n} {what}):", "", "```text", r.sample.rstrip(), "```"]
    return "\n".join(parts)


# ---------------------------------------------------------------------------- entry point


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/lm.py", description=__doc__.splitlines()[0])
    p.add_argument("--presets", default=",".join(PRESETS), help="comma-separated preset names")
    p.add_argument("--minutes", type=float, default=None, help="budget (default: the preset's)")
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--runs-dir", default="runs", help="run folders go to RUNS/bench-<preset>")
    p.add_argument("--no-fit-schedule", action="store_true", help="keep cosine total_steps")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue RUNS/bench-<preset> from its last checkpoint (same command; the "
        "budget counts the time already spent)",
    )
    p.add_argument("overrides", nargs="*", help="key=value (all) or PRESET:key=value (one)")
    args = p.parse_args(argv)
    args.presets = [s.strip() for s in args.presets.split(",") if s.strip()]
    for name in args.presets:
        base = DERIVED.get(name, (name,))[0]
        if not (ROOT / "configs" / f"{base}.yaml").is_file():
            p.error(f"no preset configs/{base}.yaml for {name}")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/lm.py", *argv])
    for name in args.presets:  # check every config before training the first
        resolve_run(load_preset(name), overrides_for(name, args.overrides))
    rows = []
    for name in args.presets:
        t0 = time.perf_counter()
        print(f"[{name}] training …", flush=True)
        row = run_preset(
            name,
            args.minutes,
            overrides_for(name, args.overrides),
            args.data_dir,
            Path(args.runs_dir),
            fit=not args.no_fit_schedule,
            quiet=not args.verbose,
            resume=args.resume,
        )
        rows.append(row)
        took = (time.perf_counter() - t0) / 60.0
        print(f"[{name}] valid {_metric(row.valid, row.level)}, test "
              f"{_metric(row.test, row.level)} ({took:.1f} min)", flush=True)  # fmt: skip
    out = Path(args.out)
    print(format_table(rows))
    write_section(out, render_section(rows, command, earlier_parts(out, args.presets)), HEADING)
    print(f"wrote {out} ({HEADING[3:]})")
    return rows


if __name__ == "__main__":
    main()
