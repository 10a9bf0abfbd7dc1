"""Attention captioning benchmark: Show, Attend and Tell on generated scenes.

    python benchmarks/caption.py [--minutes 25] [--preset configs/scenes-caption.yaml]
        [--out docs/results.md] [--figure docs/figures/caption-attention.png]
        [--runs-dir runs] [--n-figure 4] [--verbose] [key=value ...]

Trains the preset for ``--minutes`` of wall-clock time (``train.max_minutes``; the
``key=value`` overrides follow) into ``<runs-dir>/bench-caption``, loads the checkpoint of
best validation ``train.early_stop_metric`` (the preset: attention localisation; scenes of
the training compositions), and scores the held-out
test scenes (every one holds a composition never seen in training): corpus BLEU-4
(sacreBLEU, one reference) of greedy and beam captions (``task.test_beam``), exact match,
and attention localisation (the share of generated colour/shape words whose attention
peak falls in the box of an object the word describes). The table goes to stdout and
replaces the section ``## Attention captioning`` of ``--out`` (other sections are kept);
the attention overlays of the first ``--n-figure`` test scenes go to ``--figure``.

Issue 7's targets: BLEU-4 ≥ 0.6 and localisation ≥ 80 % on the held-out scenes, within
30 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from seqlab import api
from seqlab.data.scenes import render
from seqlab.inspect.captions import CaptionPanel, plot_caption_attention

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import beside_out, machine_description, write_section  # noqa: E402

HEADING = "## Attention captioning"
TARGET_BLEU4 = 0.6
TARGET_LOCALISATION = 0.80


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def results_table(valid: dict[str, float], test: dict[str, float], beam: int) -> str:
    """One row per split: BLEU-4 (0–1 and 0–100), exact match, localisation (greedy / beam)."""
    head = (
        f"| split | BLEU-4 greedy | BLEU-4 beam {beam} | exact match % (greedy / beam) "
        "| localisation % (greedy / beam) | attention in box % (greedy) | object words |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for name, m in [("valid (training compositions)", valid), ("test (held-out)", test)]:
        b = m.get("bleu4_beam")
        beam_cell = "—" if b is None else f"{b:.3f} ({m['bleu_beam']:.1f})"
        em_beam = "—" if b is None else _pct(m["exact_match_beam"])
        loc_beam = "—" if b is None else _pct(m["localisation_beam"])
        lines.append(
            f"| {name} | {m['bleu4']:.3f} ({m['bleu']:.1f}) | {beam_cell} "
            f"| {_pct(m['exact_match'])} / {em_beam} | {_pct(m['localisation'])} / {loc_beam} "
            f"| {_pct(m['attention_in_box'])} | {m['object_words']:.0f} |"
        )
    return "\n".join(lines)


def verdict(test: dict[str, float]) -> str:
    bleu = max(test["bleu4"], test.get("bleu4_beam", 0.0))
    loc = test["localisation"]
    ok_b, ok_l = bleu >= TARGET_BLEU4, loc >= TARGET_LOCALISATION
    return (
        f"Targets (issue 7, held-out scenes): BLEU-4 ≥ {TARGET_BLEU4} — best {bleu:.3f}, "
        f"{'met' if ok_b else '**not met**'}; localisation ≥ {100 * TARGET_LOCALISATION:.0f} % "
        f"— {_pct(loc)} % (greedy), {'met' if ok_l else '**not met**'}."
    )


def examples(loaded: api.LoadedModel, n: int = 6) -> list[str]:
    """Reference vs greedy caption of the first n test scenes, as markdown rows."""
    described = loaded.task.describe(loaded.model, "test", list(range(n)))
    rows = ["| reference | greedy caption |", "|---|---|"]
    for d in described:
        hyp = " ".join(d.words)
        mark = "" if hyp == d.scene.caption() else " ✗"
        rows.append(f"| {d.scene.caption()} | {hyp}{mark} |")
    return rows


def write_figure(loaded: api.LoadedModel, path: Path, n: int) -> Path:
    described = loaded.task.describe(loaded.model, "test", list(range(n)))
    panels = [
        CaptionPanel(
            image=render(d.scene),
            words=d.words or ["(empty)"],
            alpha=d.alpha if d.words else d.alpha[:1],
            grid=loaded.model.grid,
            boxes=[o.box for o in d.scene.objects],
            beta=d.beta,
            reference=d.scene.caption(),
        )
        for d in described
    ]
    return plot_caption_attention(panels, path, title="held-out test scenes, greedy")


def render_section(
    command: str,
    args: argparse.Namespace,
    info: dict[str, Any],
    valid: dict[str, float],
    test: dict[str, float],
    example_rows: list[str],
    figure: Path,
    out: Path,
) -> str:
    beam = int(info["beam"])
    try:
        fig_link = os.path.relpath(figure, out.parent)
    except ValueError:
        fig_link = str(figure)
    parts = [
        HEADING,
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}. "
        f"Budget: {args.minutes:g} min of training (`train.max_minutes`); trained "
        f"{info['train_minutes']:.1f} min, {info['updates']} updates, "
        f"{info['params']:,} parameters; checkpoint `{info['checkpoint']}` (best validation "
        f"{info['selected_by']}); {info['wall_minutes']:.1f} min in all, evaluation included.",
        "",
        f"Data: {info['data']}",
        "",
        results_table(valid, test, beam),
        "",
        verdict(test),
        "",
        "BLEU-4: sacreBLEU corpus BLEU (one reference, `tok:13a`), as a 0–1 fraction and "
        "(0–100). Localisation: for each generated colour or shape word, is the centre of "
        "its attention peak (argmax region of the 8×8 grid, mapped to pixels) inside the box "
        "of an object the word describes; attention in box: the mean attention mass on "
        "those boxes. docs/captioning.md defines both.",
        "",
        f"sacreBLEU signature: `{info['signature']}`",
        "",
        *example_rows,
        "",
        f"![attention per word]({fig_link})",
    ]
    return "\n".join(parts)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/caption.py",
        description="Show, Attend and Tell on generated scenes: BLEU-4 and localisation.",
    )
    p.add_argument("--minutes", type=float, default=25.0, help="training budget (minutes)")
    p.add_argument("--preset", default=str(ROOT / "configs" / "scenes-caption.yaml"))
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--figure", help="the PNG (default: docs/figures/ or beside --out)")
    p.add_argument("--n-figure", type=int, default=4, help="test scenes in the figure")
    p.add_argument("--runs-dir", default="runs", help="the run goes to RUNS/bench-caption")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the preset")
    args = p.parse_args(argv)
    if args.minutes <= 0:
        p.error("--minutes must be > 0")
    if args.n_figure < 1:
        p.error("--n-figure must be >= 1")
    for text in args.overrides:
        if "=" not in text:
            p.error(f"override {text!r} is not key=value")
    return args


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Train, evaluate, print the table, write the section and the figure."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/caption.py", *argv])
    overrides = [f"train.max_minutes={args.minutes}", *args.overrides]
    cfg = api.resolve_config(args.preset, overrides)  # check before the long run
    t0 = time.perf_counter()
    run_dir = Path(args.runs_dir) / "bench-caption"
    run = api.train(
        args.preset, run_dir=run_dir, overrides=overrides, overwrite=True, quiet=not args.verbose
    )
    loaded = api.load(run_dir)  # best validation train.early_stop_metric
    valid = loaded.evaluate("valid")
    test = loaded.evaluate("test")
    path = Path(args.figure) if args.figure else beside_out(args.out, "caption-attention.png")
    figure = write_figure(loaded, path, args.n_figure)
    t = cfg.task_cfg
    info = {
        "beam": t.test_beam,
        "train_minutes": float(run.metrics["elapsed"]) / 60.0,
        "updates": int(run.metrics["step"]),
        "params": sum(p.numel() for p in loaded.model.parameters()),
        "checkpoint": loaded.checkpoint.name,
        "selected_by": cfg.train.early_stop_metric,
        "wall_minutes": (time.perf_counter() - t0) / 60.0,
        "signature": _bleu_signature(),
        "data": (
            f"{t.n_train:,} training / {t.n_valid} validation / {t.n_test} test scenes, "
            f"{t.canvas}×{t.canvas} px, {t.min_objects}–{t.max_objects} objects, split "
            f"`{t.split}` (test scenes each hold a held-out composition), seed {t.seed}."
        ),
    }
    table = results_table(valid, test, t.test_beam)
    print(table)
    print(verdict(test))
    out = Path(args.out)
    section = render_section(command, args, info, valid, test, examples(loaded), figure, out)
    write_section(out, section, HEADING)
    print(f"wrote {out} ({HEADING[3:]}) and {figure}")
    return {"valid": valid, "test": test}


def _bleu_signature() -> str:
    from seqlab.eval.bleu import corpus_bleu

    return corpus_bleu(["a"], ["a"]).signature


if __name__ == "__main__":
    main()
