"""Vision benchmark (issue 7): the notes' ConvNet on MNIST and on the 8×8 digits, and the
depth experiment of He 2016 (Fig. 1 and 6) — plain-20 vs plain-56 vs ResNet-20 vs
ResNet-56 under the same budget.

    python benchmarks/vision.py [--parts convnet,digits,depth] [--minutes 20]
        [--convnet-minutes 30] [--digits-minutes 5] [--folds 5] [--threads 1]
        [--data-dir DIR] [--out docs/results.md] [--figures docs/figures] [--runs-dir runs]

* ``convnet``: ``configs/mnist-convnet.yaml`` (at most ``--convnet-minutes``), scored on
  the 2,000 held-out images (seqlab's split of the MNIST test set, not the standard
  split) with the checkpoint of best validation accuracy; figures of its first-layer
  filters, the feature maps of test image 0 and the notes' kernels applied to it; and
  max-pooling's shift tolerance measured on its first-layer maps.
* ``digits``: ``configs/digits-convnet.yaml``, folds 0 … ``--folds`` − 1 of the seeded
  5-fold split (at most ``--digits-minutes`` each): mean ± std test accuracy.
* ``depth``: ``configs/mnist-{plain20,plain56,resnet20,resnet56}.yaml``, each trained for
  ``--minutes`` of wall clock; training-loss and test-error curves from each run's
  metrics.jsonl → ``<figures>/depth.png`` and a table; a verdict on He 2016's claim
  computed from the numbers (:func:`depth_verdict`).

The tables go to stdout and replace the section ``## Vision`` of ``--out`` (other
sections are kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqlab import api
from seqlab.inspect.claim_rules import depth_claim
from seqlab.inspect.vision import (
    plot_feature_maps,
    plot_filters,
    plot_kernels,
    pooling_shift_tolerance,
)

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import machine_description, write_section  # noqa: E402

HEADING = "## Vision"
DEPTH_HEADING = "## Vision: plain vs residual depth (He 2016, Fig. 1 and 6)"
PARTS = ("convnet", "digits", "depth")
DEPTH_NETS = ("plain20", "plain56", "resnet20", "resnet56")
TARGETS = {"mnist": 98.5, "digits": 98.0}  # issue 7, accuracy %


@dataclass
class Curve:
    """One depth-experiment run read back from its metrics.jsonl."""

    name: str
    steps: list[int] = field(default_factory=list)  # training-loss records
    train_loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)  # test-error records
    test_error: list[float] = field(default_factory=list)
    epochs: int = 0
    minutes: float = 0.0
    params: int = 0

    @property
    def updates(self) -> int:
        return max(
            self.steps[-1] if self.steps else 0, self.eval_steps[-1] if self.eval_steps else 0
        )


def read_curve(name: str, metrics_path: Path) -> Curve:
    """Training loss (``train`` events) and validation = test error (``valid``/``final``
    events) of a run with ``task.valid_split: test``."""
    c = Curve(name)
    for line in metrics_path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("event") == "train":
            c.steps.append(int(r["step"]))
            c.train_loss.append(float(r["loss"]))
        elif r.get("event") in ("valid", "final") and "valid/error" in r:
            if c.eval_steps and c.eval_steps[-1] == int(r["step"]):
                continue  # the final evaluation of a step already validated
            c.eval_steps.append(int(r["step"]))
            c.test_error.append(float(r["valid/error"]))
        if "epoch" in r:
            c.epochs = max(c.epochs, int(r["epoch"]))
        if "elapsed" in r:
            c.minutes = max(c.minutes, float(r["elapsed"]) / 60.0)
    return c


def at_step(c: Curve, step: int, n_evals: int = 3, frac: float = 0.1) -> tuple[float, float]:
    """(training loss, test error) of ``c`` around update ``step``: the mean training loss
    of the records in (step − max(frac·step, 3 records), step], and the mean test error of
    the last ``n_evals`` evaluations at or before ``step`` (noise damping)."""
    spacing = (c.steps[1] - c.steps[0]) if len(c.steps) > 1 else 1
    lo = step - max(frac * step, 3 * spacing)
    losses = [v for s, v in zip(c.steps, c.train_loss) if lo < s <= step] or [c.train_loss[-1]]
    errors = [v for s, v in zip(c.eval_steps, c.test_error) if s <= step][-n_evals:]
    return statistics.fmean(losses), statistics.fmean(errors or [c.test_error[0]])


def common_step(curves: dict[str, Curve]) -> int:
    """The last evaluation step every run reached (equal updates for all four)."""
    return min(c.eval_steps[-1] for c in curves.values())


def noise_margin(e1: float, e2: float, n_test: int) -> float:
    """Two standard errors of the difference of two error rates on n_test images:
    2·√(2·ē(1 − ē)/n), ē the mean of the two (binomial, independent approximation)."""
    e = 0.5 * (e1 + e2)
    return 2.0 * math.sqrt(2.0 * e * (1.0 - e) / max(n_test, 1))


@dataclass
class Verdict:
    plain_degrades: bool
    resnet_keeps_up: bool
    resnet_beats_plain: bool
    lines: list[str]

    @property
    def reproduced(self) -> bool:
        return self.plain_degrades and self.resnet_keeps_up and self.resnet_beats_plain


def depth_verdict(points: dict[str, tuple[float, float]], n_test: int, where: str) -> Verdict:
    """He 2016's claim from (training loss, test error) per net, all at the same point.

    * plain-56 worse than plain-20 (Fig. 6 left, the degradation problem): the deeper
      plain net has both the higher training loss and the higher test error.
    * ResNet-56 better than or equal to ResNet-20 (Fig. 6 middle): test error of
      ResNet-56 ≤ that of ResNet-20.
    * ResNet-56 trains better than plain-56: lower training loss.

    The booleans are :func:`seqlab.inspect.claim_rules.depth_claim` (the rule of
    ``seqlab report``); reproduced when all three hold.

    Each comparison also says whether the test-error difference exceeds
    :func:`noise_margin` (2 standard errors on n_test images).
    """
    (lp20, ep20), (lp56, ep56) = points["plain20"], points["plain56"]
    (lr20, er20), (lr56, er56) = points["resnet20"], points["resnet56"]
    plain_ok, beats, res_ok, _ = depth_claim(points)  # the rule of seqlab report, one place

    def sig(a: float, b: float) -> str:
        m = noise_margin(a, b, n_test)
        return "beyond noise" if abs(a - b) > m else f"within noise, ±{100 * m:.2f} points"

    lines = [
        f"- plain-56 worse than plain-20 ({where}): training loss {lp56:.4f} vs {lp20:.4f}, "
        f"test error {100 * ep56:.2f} % vs {100 * ep20:.2f} % ({sig(ep56, ep20)}) → "
        f"**{'yes' if plain_ok else 'no'}**",
        f"- ResNet-56 better than or equal to ResNet-20 ({where}): test error "
        f"{100 * er56:.2f} % vs {100 * er20:.2f} % ({sig(er56, er20)}), training loss "
        f"{lr56:.4f} vs {lr20:.4f} → **{'yes' if res_ok else 'no'}**",
        f"- ResNet-56 trains better than plain-56 ({where}): training loss {lr56:.4f} vs "
        f"{lp56:.4f} → **{'yes' if beats else 'no'}**",
    ]
    return Verdict(plain_ok, res_ok, beats, lines)


def plot_depth(curves: dict[str, Curve], path: Path, mark: int | None = None) -> Path:
    """He 2016 Fig. 6 style: training loss (log scale) and test error vs updates; plain
    dashed, residual solid, 20 layers thin, 56 thick."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4), dpi=100)
    ax_l, ax_e = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for name, c in curves.items():
        style = {
            "linestyle": "--" if name.startswith("plain") else "-",
            "linewidth": 2.2 if name.endswith("56") else 1.2,
            "color": "tab:red" if name.endswith("56") else "tab:blue",
            "label": name.replace("plain", "plain-").replace("resnet", "ResNet-"),
        }
        ax_l.plot(c.steps, c.train_loss, **style)
        ax_e.plot(c.eval_steps, [100 * e for e in c.test_error], marker=".", markersize=3, **style)
    ax_l.set_yscale("log")
    ax_l.set(xlabel="updates", ylabel="training loss (cross-entropy)", title="training loss")
    ax_e.set(xlabel="updates", ylabel="test error (%)", title="test error (2,000 images)")
    errs = [100 * e for c in curves.values() for e in c.test_error[len(c.test_error) // 4 :]]
    if errs:
        ax_e.set_ylim(0, min(100.0, 1.5 * max(errs)))
    for ax in (ax_l, ax_e):
        if mark is not None:
            ax.axvline(mark, color="grey", linewidth=0.8, linestyle=":")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("MNIST (seqlab split): plain vs residual nets, same time budget each", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


# ---------------------------------------------------------------------------- the parts


def _train(preset: str, run_dir: Path, minutes: float, args: argparse.Namespace, *extra: str):
    overrides = [f"train.max_minutes={minutes}", f"train.threads={args.threads}", *extra]
    return api.train(
        ROOT / "configs" / f"{preset}.yaml",
        run_dir=run_dir,
        data_dir=args.data_dir,
        overrides=overrides,
        overwrite=True,
        quiet=not args.verbose,
    )


def run_convnet(args: argparse.Namespace) -> dict[str, object]:
    run_dir = Path(args.runs_dir) / "bench-vision" / "mnist-convnet"
    t0 = time.perf_counter()
    run = _train("mnist-convnet", run_dir, args.convnet_minutes, args)
    loaded = api.load(run_dir, data_dir=args.data_dir)  # best validation accuracy
    acc = 100.0 * loaded.evaluate("test")["accuracy"]
    task, model = loaded.task, loaded.model
    figs = Path(args.figures)
    image, label = task.image("test", 0)  # (1, 28, 28) normalised
    raw = task.splits["test"][0][0, 0]  # (28, 28) in [0, 1]
    paths = [
        plot_filters(model, figs / "vision-filters.png"),
        plot_feature_maps(model, image, figs / "vision-feature-maps.png", label=f"({label})"),
        plot_kernels(raw, figs / "vision-kernels.png", label=f"({label})"),
    ]
    with torch.no_grad():  # first-layer rectified maps of 256 test images
        x = task.normalize(task.splits["test"][0][:256])  # (256, 1, 28, 28)
        a = torch.relu(model.encoder.convs[0](x))  # (256, 32, 28, 28)
    pool = model.cfg.pool
    tol = {
        d: pooling_shift_tolerance(a, pool, model.cfg.pool_size, 1, dim)
        for d, dim in (("x", -1), ("y", -2))
    }
    return {
        "accuracy": acc,
        "n_test": len(task.splits["test"][1]),
        "updates": int(run.metrics["step"]),
        "minutes": (time.perf_counter() - t0) / 60.0,
        "params": sum(p.numel() for p in model.parameters()),
        "pool": pool,
        "tolerance": tol,
        "figures": paths,
    }


def run_digits(args: argparse.Namespace) -> dict[str, object]:
    accs, updates, t0 = [], [], time.perf_counter()
    for fold in range(args.folds):
        run_dir = Path(args.runs_dir) / "bench-vision" / "digits-convnet" / f"fold-{fold}"
        run = _train("digits-convnet", run_dir, args.digits_minutes, args, f"task.fold={fold}")
        loaded = api.load(run_dir, data_dir=args.data_dir)
        accs.append(100.0 * loaded.evaluate("test")["accuracy"])
        updates.append(int(run.metrics["step"]))
        print(f"[digits] fold {fold}: test accuracy {accs[-1]:.2f} %", flush=True)
    return {
        "accuracy": accs,
        "updates": statistics.fmean(updates),
        "minutes": (time.perf_counter() - t0) / 60.0,
    }


def run_depth(args: argparse.Namespace) -> tuple[dict[str, Curve], int]:
    curves, n_test = {}, 0
    for net in DEPTH_NETS:
        run_dir = Path(args.runs_dir) / "bench-vision" / f"mnist-{net}"
        run = _train(f"mnist-{net}", run_dir, args.minutes, args)
        c = read_curve(net, run_dir / "metrics.jsonl")
        c.params = sum(p.numel() for p in run.model.parameters())
        n_test = len(run.task.splits["test"][1])
        curves[net] = c
        print(
            f"[depth] {net}: {c.updates} updates, {c.epochs + 1} epochs, final test error "
            f"{100 * c.test_error[-1]:.2f} %",
            flush=True,
        )
    return curves, n_test


# ---------------------------------------------------------------------------- reporting


def depth_table(curves: dict[str, Curve], s_star: int) -> str:
    head = (
        f"| net | params | updates | epochs | min | train loss @ {s_star} "
        f"| test error % @ {s_star} | train loss (end) | test error % (end) |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for name, c in curves.items():
        l_s, e_s = at_step(c, s_star)
        l_e, e_e = at_step(c, c.updates)
        lines.append(
            f"| {name} | {c.params / 1e6:.2f}M | {c.updates} | {c.epochs + 1} | {c.minutes:.1f} "
            f"| {l_s:.4f} | {100 * e_s:.2f} | {l_e:.4f} | {100 * e_e:.2f} |"
        )
    return "\n".join(lines)


def _link(path: Path, out: str) -> str:
    """``path`` relative to the markdown file's folder (for the image link)."""
    return os.path.relpath(Path(path).resolve(), Path(out).resolve().parent)


def _preamble(heading: str, command: str) -> list[str]:
    return [
        heading,
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}.",
        "",
        "MNIST here is seqlab's fixed seeded 8,000 / 2,000 split of the 10,000-image MNIST "
        "*test* set (`seqlab.data.images.mnist_split`), **not** the standard 60k/10k split: "
        "numbers are not comparable with published MNIST results.",
        "",
    ]


def render_sections(
    results: dict[str, object], command: str, args: argparse.Namespace
) -> dict[str, str]:
    """The markdown sections of the parts that ran, by heading: ``HEADING`` (ConvNet on
    MNIST and digits) and ``DEPTH_HEADING``, each with its own command line, so a run of
    one part (``--parts depth``) replaces its section and keeps the other's numbers."""
    out = {}
    if "convnet" in results or "digits" in results:
        out[HEADING] = _convnet_section(results, command, args)
    if "depth" in results:
        out[DEPTH_HEADING] = _depth_section(results["depth"], command, args)
    return out


def _convnet_section(results: dict[str, object], command: str, args: argparse.Namespace) -> str:
    parts = _preamble(HEADING, command)
    if "convnet" in results:
        r = results["convnet"]
        met = "met" if r["accuracy"] >= TARGETS["mnist"] else "**not met**"
        parts += [
            "### ConvNet",
            "",
            "| data | params | test accuracy % | updates | min | target | met |",
            "|---|---|---|---|---|---|---|",
            f"| MNIST, {r['n_test']:,} held-out images (`configs/mnist-convnet.yaml`) "
            f"| {r['params'] / 1e6:.2f}M | {r['accuracy']:.2f} | {r['updates']} "
            f"| {r['minutes']:.1f} | ≥ {TARGETS['mnist']} | {met} |",
        ]
    if "digits" in results:
        d = results["digits"]
        mean = statistics.fmean(d["accuracy"])
        std = statistics.stdev(d["accuracy"]) if len(d["accuracy"]) > 1 else 0.0
        met = "met" if mean >= TARGETS["digits"] else "**not met**"
        if "convnet" not in results:
            parts += [
                "### ConvNet",
                "",
                "| data | params | test accuracy % | updates | min | target | met |",
                "|---|---|---|---|---|---|---|",
            ]
        parts.append(
            f"| digits 8×8, {len(d['accuracy'])} folds of 5 (`configs/digits-convnet.yaml`) "
            f"| — | {mean:.2f} ± {std:.2f} | {d['updates']:.0f} / fold | {d['minutes']:.1f} "
            f"| ≥ {TARGETS['digits']} | {met} |"
        )
    if "convnet" in results:
        r = results["convnet"]
        t = r["tolerance"]
        parts += [
            "",
            f"Shift tolerance of {r['pool']}-pooling, measured on the trained ConvNet's "
            "first-layer rectified maps of 256 test images (`pooling_shift_tolerance`): a "
            f"1-pixel shift leaves {100 * t['x']['unpooled']:.0f} % (x) / "
            f"{100 * t['y']['unpooled']:.0f} % (y) of the unpooled values unchanged and "
            f"{100 * t['x']['pooled']:.0f} % / {100 * t['y']['pooled']:.0f} % of the pooled "
            "outputs.",
            "",
            "Figures: "
            + ", ".join(f"`{Path(p).name}`" for p in r["figures"])
            + f" in `{args.figures}` (first-layer filters, feature maps of test image 0, "
            "the notes' kernels applied to it).",
        ]
    return "\n".join(parts).rstrip("\n")


def depth_training_text() -> str:
    """The depth presets' shared optimiser, schedule and batch, read from the presets; one
    text for all four (SystemExit when they differ: the comparison needs them equal)."""
    texts = set()
    for net in DEPTH_NETS:
        cfg = api.resolve_config(ROOT / "configs" / f"mnist-{net}.yaml")
        o, warmup = cfg.train.optim, getattr(cfg.schedule_cfg, "warmup", 0)
        opt = f"SGD momentum {o.momentum:g}" if o.name == "momentum" else o.name
        lr = f"η = {o.lr:g} ({cfg.schedule})"
        if warmup:
            lr += f" after a {warmup}-update linear warmup"
        texts.add(
            f"{opt}, {lr}, weight decay {o.weight_decay:g}, "
            f"batches of {cfg.train.batch.max_sentences}"
        )
    if len(texts) != 1:
        raise SystemExit(f"the depth presets must train alike; they differ: {sorted(texts)}")
    return texts.pop()


def _depth_section(
    depth: tuple[dict[str, Curve], int, Path], command: str, args: argparse.Namespace
) -> str:
    parts = _preamble(DEPTH_HEADING, command)
    curves, n_test, fig = depth
    s_star = common_step(curves)
    equal = depth_verdict(
        {k: at_step(c, s_star) for k, c in curves.items()}, n_test, f"at {s_star} updates each"
    )
    end = depth_verdict(
        {k: at_step(c, c.updates) for k, c in curves.items()},
        n_test,
        f"after {args.minutes:g} min each",
    )
    parts += [
        f"Each net trained for {args.minutes:g} min of wall clock (`train.max_minutes`) "
        f"with the same data, optimiser ({depth_training_text()}) and evaluation; the deeper "
        "nets take fewer updates in that time, so the verdict is computed at equal updates "
        f"({s_star}, the last evaluation all four reached; training loss averaged over "
        "the last 10 % of updates, test error over the last 3 evaluations) and, for "
        "reference, at the end of each budget.",
        "",
        depth_table(curves, s_star),
        "",
        f"![training loss and test error of the four nets]({_link(fig, args.out)})",
        "",
        *equal.lines,
        "",
        f"Verdict at equal updates: He 2016's claim (plain-56 worse than plain-20; "
        f"ResNet-56 better than or equal to ResNet-20) is "
        f"**{'reproduced' if equal.reproduced else 'not reproduced'}** here.",
        "",
        *end.lines,
        "",
        f"At the end of equal time budgets: "
        f"**{'reproduced' if end.reproduced else 'not reproduced'}**.",
    ]
    return "\n".join(parts).rstrip("\n")


def write_depth_json(depth: tuple[dict[str, Curve], int, Path], command: str, path: Path) -> Path:
    """The depth experiment's numbers for seqlab report: per net, (training loss, test
    error) at the common step and at the end of its budget (:func:`at_step`)."""
    from seqlab.inspect.figures import write_json

    curves, n_test, fig = depth
    s_star = common_step(curves)
    nets = {}
    for name, c in curves.items():
        (l_s, e_s), (l_e, e_e) = at_step(c, s_star), at_step(c, c.updates)
        nets[name] = {
            "params": c.params,
            "updates": c.updates,
            "minutes": c.minutes,
            "train_loss_at_step": l_s,
            "test_error_at_step": e_s,
            "train_loss_end": l_e,
            "test_error_end": e_e,
        }
    record = {"command": command, "step": s_star, "n_test": n_test, "figure": str(fig)}
    return write_json(path, {**record, "nets": nets})


# ---------------------------------------------------------------------------- entry point


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/vision.py", description=__doc__.splitlines()[0])
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    p.add_argument("--minutes", type=float, default=20.0, help="depth budget per net")
    p.add_argument("--convnet-minutes", type=float, default=30.0, help="MNIST ConvNet cap")
    p.add_argument("--digits-minutes", type=float, default=5.0, help="cap per digits fold")
    p.add_argument("--folds", type=int, default=5, help="digits folds to run (of 5)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (train.threads)")
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--figures", default=str(ROOT / "docs" / "figures"), help="PNG folder")
    p.add_argument("--runs-dir", default="runs", help="runs go to RUNS/bench-vision/…")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    args = p.parse_args(argv)
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown or not args.parts:
        p.error(f"--parts: unknown {unknown}; choose from {', '.join(PARTS)}")
    if not 1 <= args.folds <= 5:
        p.error("--folds must be in [1, 5]")
    return args


def main(argv: list[str] | None = None) -> dict[str, object]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "benchmarks/vision.py", *argv])
    results: dict[str, object] = {}
    if "convnet" in args.parts:
        results["convnet"] = run_convnet(args)
        print(f"[convnet] MNIST test accuracy {results['convnet']['accuracy']:.2f} %", flush=True)
    if "digits" in args.parts:
        results["digits"] = run_digits(args)
    if "depth" in args.parts:
        depth_training_text()  # the four presets train alike, checked before the long runs
        curves, n_test = run_depth(args)
        fig = plot_depth(curves, Path(args.figures) / "depth.png", common_step(curves))
        results["depth"] = (curves, n_test, fig)
    sections = render_sections(results, command, args)
    if "depth" in results:
        write_depth_json(results["depth"], command, Path(args.figures) / "vision-depth.json")
    out = Path(args.out)
    for heading, section in sections.items():
        print(section + "\n")
        write_section(out, section, heading)
        print(f"wrote {out} ({heading[3:]})")
    return results


if __name__ == "__main__":
    main()
