"""Which precision trains a preset faster on this machine: fp32 against bf16 autocast, paired.

    python benchmarks/precision_presets.py                       # the default presets
    python benchmarks/precision_presets.py --presets multi30k-luong,ptb-lstm --threads 1
    python benchmarks/precision_presets.py --presets auto        # every preset with precision: auto

``precision: auto`` picks bf16 on every CPU with ``avx512_bf16`` or ``amx_bf16``
(seqlab/train/precision.py). Whether bf16 is also the faster choice depends on the model:
autocast casts around every matrix product, and only large enough products repay that
(docs/training.md, "Precision"). This benchmark measures it for whole training steps of the
presets themselves, on their real data.

For each preset, in a new process of its own (``measure_fresh``: no kernels built by an
earlier preset), two Trainers are built from the same config, one with
``train.precision=fp32`` and one with ``train.precision=bf16`` (same seed: the same batches in
the same order; no run directory, no validation). They take ``--steps`` updates each per round
(``Trainer.train_step``), the order rotating (``benchmarks/paired_variants.round_robin``),
after one warm-up round. Every round trains on batches neither has seen before, as real
training does: a bf16 matrix product builds a oneDNN kernel for each new shape
(docs/perf-notes-amx.md §44, §46), and that cost belongs to the comparison.

Printed, per preset: target tokens/s of each (the median over rounds), the paired speed of
bf16 over fp32 (the median over rounds of fp32's time / bf16's for the same batches), the
cv of the rounds, and the mean training loss of each over the timed steps (the same batches;
a check that both train, not a convergence comparison). ``--out`` writes the table as the
section "Training precision by preset" of ``docs/results.md`` (or another file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.paired_variants import round_robin  # noqa: E402
from benchmarks.results_doc import machine_description, write_section  # noqa: E402
from seqlab import api  # noqa: E402
from seqlab.train.precision import resolve_precision  # noqa: E402
from seqlab.train.trainer import Trainer  # noqa: E402

HEADING = "## Training precision by preset"
DEFAULT_PRESETS = (
    "multi30k-transformer",
    "multi30k-luong",
    "multi30k-pointer-generator",
    "ptb-lstm",
    "shakespeare-char-lstm",
)
PRECISIONS = ("fp32", "bf16")
EVEN = 1.05  # paired speeds within 5 % either way are called even (this VM's rounds vary more)


@dataclass
class Variant:
    """One Trainer and what each of its rounds did: (target tokens, summed token loss)."""

    trainer: Trainer
    rounds: list[tuple[int, float]] = field(default_factory=list)

    def run(self, steps: int) -> None:
        n, loss = 0, 0.0
        for _ in range(steps):
            stats = self.trainer.train_step()
            if stats is None:
                raise SystemExit("the preset's epoch limit ended the run; use fewer --steps")
            n, loss = n + stats.n_tokens, loss + stats.loss_sum
        self.rounds.append((n, loss))


@dataclass(frozen=True)
class Row:
    preset: str
    model: str
    auto: str  # what precision: auto resolves to on this machine
    tok_s: dict[str, float]
    speed: float  # paired: median over rounds of fp32's seconds / bf16's
    cv: dict[str, float]
    loss: dict[str, float]
    tokens: dict[str, list[int]]  # target tokens of each timed round (equal: same batches)
    pid: int = 0  # the process that measured it (measure_fresh: a new one per preset)

    @property
    def faster(self) -> str:
        """bf16 or fp32 where the paired speed is 5 % or more either way, else "even"."""
        if self.speed >= EVEN:
            return "bf16"
        return "fp32" if self.speed <= 1.0 / EVEN else "even"


def auto_presets() -> list[str]:
    """Every shipped preset whose ``train.precision`` is ``auto``."""
    out = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        if api.resolve_config(path).train.precision == "auto":
            out.append(path.stem)
    return out


def measure(preset: str, overrides: list[str], data_dir: Path | None, steps: int, reps: int) -> Row:
    """Both precisions of ``preset`` (a preset name or a YAML file), paired (module
    docstring)."""
    config = Path(preset) if preset.endswith(".yaml") else ROOT / "configs" / f"{preset}.yaml"
    variants = {}
    for precision in PRECISIONS:
        cfg = api.resolve_config(config, [*overrides, f"train.precision={precision}"])
        variants[precision] = Variant(Trainer(cfg, None, data_dir, quiet=True))
    runs = {p: (lambda v=v: v.run(steps)) for p, v in variants.items()}
    device = variants["fp32"].trainer.device  # train.device=cuda: synchronised rounds
    seconds = round_robin(runs, reps, device=str(device))
    timed = {p: v.rounds[1:] for p, v in variants.items()}  # the first is the warm-up
    loss = {p: sum(x for _, x in r) / sum(n for n, _ in r) for p, r in timed.items()}
    tok_s = {
        p: statistics.median(n / s for (n, _), s in zip(timed[p], seconds[p])) for p in PRECISIONS
    }
    speed = statistics.median(a / b for a, b in zip(seconds["fp32"], seconds["bf16"]))
    cv = {p: statistics.stdev(s) / statistics.mean(s) if len(s) > 1 else 0.0
          for p, s in seconds.items()}  # fmt: skip
    return Row(
        preset=Path(preset).stem,
        model=variants["fp32"].trainer.cfg.model,
        auto=resolve_precision("auto", device),
        tok_s=tok_s,
        speed=speed,
        cv=cv,
        loss=loss,
        tokens={p: [n for n, _ in r] for p, r in timed.items()},
        pid=os.getpid(),
    )


def measure_fresh(
    preset: str, overrides: list[str], data_dir: Path | None, steps: int, reps: int
) -> Row:
    """``measure`` in a new Python process. oneDNN's kernel cache lives as long as the
    process: a preset measured after another with the same shapes (the two pointer-generator
    presets, or an LSTM of the same width) would find its bf16 kernels built already, and
    read 0.88× as 1.05× (docs/perf-notes-amx.md §47). A real run starts with an empty cache."""
    cmd = [sys.executable, __file__, "--child", "--presets", preset, "--steps", str(steps)]
    cmd += ["--reps", str(reps)] + (["--data-dir", str(data_dir)] if data_dir else [])
    done = subprocess.run([*cmd, *overrides], capture_output=True, text=True, check=False)
    rows = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
    if done.returncode != 0 or not rows:
        raise SystemExit(f"measuring {preset} failed (rc {done.returncode}):\n{done.stderr}")
    return Row(**json.loads(rows[-1]))


def format_table(rows: list[Row]) -> str:
    lines = [
        "| preset | model | fp32 tok/s | bf16 tok/s | bf16 / fp32 (paired) | cv fp32 / bf16 "
        "| mean train loss fp32 / bf16 | `auto` picks | faster here |",
        "|---|---|---:|---:|---:|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r.preset}` | {r.model} | {r.tok_s['fp32']:,.0f} | {r.tok_s['bf16']:,.0f} "
            f"| **{r.speed:.2f}×** | {100 * r.cv['fp32']:.0f} % / {100 * r.cv['bf16']:.0f} % "
            f"| {r.loss['fp32']:.3f} / {r.loss['bf16']:.3f} | {r.auto} | {r.faster} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", default=",".join(DEFAULT_PRESETS),
                   help="comma-separated preset names, or 'auto' for every preset whose "
                   "precision is auto")  # fmt: skip
    p.add_argument("--steps", type=int, default=8, help="updates per variant per round")
    p.add_argument("--reps", type=int, default=5, help="timed rounds (after one warm-up)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: the preset's)"
    )
    p.add_argument("--data-dir", default=None, help="default: ../shared/data where it exists")
    p.add_argument("--out", default=None, help="write the section into this markdown file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # measure_fresh
    p.add_argument("overrides", nargs="*", help="config overrides for every preset (a.b=c)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.reps < 2:
        p.error("--steps must be >= 1 and --reps >= 2 (a paired median needs rounds)")
    data_dir = Path(args.data_dir) if args.data_dir else api.default_data_dir()
    presets = auto_presets() if args.presets == "auto" else args.presets.split(",")
    overrides = list(args.overrides)
    if args.threads is not None:
        overrides.append(f"train.threads={args.threads}")
    if args.child:  # one preset, in this process, for measure_fresh to read
        row = measure(presets[0], overrides, data_dir, args.steps, args.reps)
        print("ROW " + json.dumps(asdict(row)), flush=True)
        return [row]
    started = time.perf_counter()
    rows = []
    skipped = []  # (preset, why): one preset that cannot run does not stop the others
    for preset in presets:
        try:
            rows.append(measure_fresh(preset, overrides, data_dir, args.steps, args.reps))
        except SystemExit as exc:
            why = str(exc).strip().splitlines()[-1]
            skipped.append((preset, why))
            print(f"skipped {preset}: {why}", flush=True)
            continue
        print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    table = format_table(rows) + "".join(f"\n\nNot measured: `{p}`: {w}" for p, w in skipped)
    minutes = (time.perf_counter() - started) / 60.0
    command = "python benchmarks/precision_presets.py " + " ".join(argv or sys.argv[1:])
    print()
    print(table)
    if args.out:
        section = (
            f"{HEADING}\n\n"
            f"Machine: {machine_description()}. Command: `{command.strip()}` ({minutes:.1f} min). "
            f"{args.steps} updates per variant per round, {args.reps} rounds after a warm-up, "
            "each round on new batches; tokens are target tokens. How to read it: "
            'docs/training.md, "Precision".\n\n'
            f"{table}\n"
        )
        write_section(Path(args.out), section, HEADING)
        print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
