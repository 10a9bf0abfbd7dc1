"""Sentiment benchmark: every sentence classifier on MR, 10-fold cross-validation, plus the
contrast set of data/contrast/sentiment.tsv.

    python benchmarks/classify.py [--models avg,lstm,bilstm,kim-cnn,transformer]
        [--folds 10] [--minutes-per-fold 5] [--data-dir DIR] [--contrast FILE]
        [--out docs/results.md] [--runs-dir runs] [key=value ...] [MODEL:key=value ...]
        [--lm-run RUN | --lm-minutes 12 --lm-sources ptb,multi30k,mr]

For each model and each fold k < ``--folds``: train ``configs/mr-<model>.yaml`` with
``task.fold=k`` for at most ``--minutes-per-fold`` minutes (``train.max_minutes``; the
preset's early stopping on validation accuracy usually ends it sooner) into
``<runs-dir>/bench-mr-<model>/fold-<k>``, load the best checkpoint (validation accuracy),
score fold k (the test fold) and predict the contrast set. The MR protocol's number is
the mean ± standard deviation (n − 1) of the 10 test-fold accuracies.

The tables go to stdout and replace the section ``## Sentiment (MR)`` of ``--out``
(other sections are kept). Models not run now keep their rows from the last sidecar
(``docs/figures/sentiment-mr.json``) when it used the same k-fold split and contrast set,
each row under the command that made it. Two tables: accuracy per model, and the contrast
set — per sentence, how many of a model's fold models label it correctly — marking the
sentences the averaged model gets wrong and a recurrent model right (notes 003).

``lstm-lm`` (Dai & Le 2015, pretrain then fine-tune) starts every fold's LSTM from one
language model: ``--lm-run`` names a trained one, otherwise the benchmark writes the
unlabelled text of ``--lm-sources`` (``seqlab.data.sentiment_lm_corpus``; with ``mr`` the
LM reads every fold's test sentences without labels — transductive) and trains
``configs/mr-lm-pretrain.yaml`` for ``--lm-minutes`` into ``<runs-dir>/bench-mr-lm-pretrain``.
``kim-cnn-sgns`` starts Kim's CNN from seqlab's SGNS vectors (``runs/embeddings/sgns.txt``,
made by ``benchmarks/embeddings.py``).

``--refit`` adds, per model, a row ``<model>-refit``: "select, then refit". Fold k's run
above chose its checkpoint's step s on the validation part; a second run trains the same
preset on training + validation together (``task.refit=true``, the vocabulary too) for
round(s · N_train+valid / N_train) updates — as many epochs as the chosen checkpoint had
seen — with early stopping off, into ``…/fold-<k>-refit``, and its last checkpoint is
scored on fold k. The test fold is never seen by either run.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from seqlab import api
from seqlab.data.mr import ContrastItem, read_contrast_set
from seqlab.eval.ensemble import fit_log_linear_pool, mean_probability
from seqlab.inspect.figures import write_json
from seqlab.inspect.measure import overrides_for as model_overrides

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.classify_report import (  # noqa: E402
    HEADING,
    RECURRENT,
    Result,
    accuracy_table,
    contrast_table,
    earlier_results,
    render_section,
)
from benchmarks.results_doc import write_section  # noqa: E402

MODELS = (
    "avg",
    "fasttext",
    "lstm",
    "bilstm",
    "kim-cnn",
    "transformer",
    "lstm-lm",
    "kim-cnn-sgns",
    "nbsvm",
    "nbsvm-char",
)


def preset_path(model: str) -> Path:
    return ROOT / "configs" / f"mr-{model}.yaml"


def _train(model: str, run_dir: Path, texts: list[str], data_dir: str | None, verbose: bool) -> Any:
    """Train the preset of ``model`` with ``texts`` (key=value) into ``run_dir``."""
    return api.train(
        preset_path(model),
        run_dir=run_dir,
        data_dir=data_dir,
        overrides=texts,
        overwrite=True,
        quiet=not verbose,
    )


def run_fold(
    model: str,
    fold: int,
    minutes: float,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    contrast: list[ContrastItem],
    result: Result,
    verbose: bool,
) -> None:
    """Train fold ``fold`` of ``model``, score its test fold and the contrast set."""
    run_dir = runs_dir / f"bench-mr-{model}" / f"fold-{fold}"
    texts = [f"task.fold={fold}", f"train.max_minutes={minutes}", *overrides]
    run = _train(model, run_dir, texts, data_dir, verbose)
    loaded = api.load(run_dir, data_dir=data_dir)  # best validation accuracy
    result.valid_accuracy.append(100.0 * loaded.evaluate("valid")["accuracy"])
    _score(loaded, run, contrast, result)


def _score(loaded: Any, run: Any, contrast: list[ContrastItem], result: Result) -> None:
    """Append a fold model's test accuracy, minutes, updates and contrast-set hits."""
    result.accuracy.append(100.0 * loaded.evaluate("test")["accuracy"])
    result.minutes.append(float(run.metrics["elapsed"]) / 60.0)
    result.updates.append(int(run.metrics["step"]))
    result.params = sum(p.numel() for p in loaded.model.parameters())
    preds = loaded.predict([c.text for c in contrast]) if contrast else []
    right = [int(p["label"] == c.label) for p, c in zip(preds, contrast)]
    if not result.contrast_right:
        result.contrast_right = [0] * len(contrast)
    result.contrast_right = [a + b for a, b in zip(result.contrast_right, right)]


def refit_fold(  # the same arguments as run_fold
    model: str,
    fold: int,
    minutes: float,
    overrides: list[str],
    data_dir: str | None,
    runs_dir: Path,
    contrast: list[ContrastItem],
    result: Result,
    verbose: bool,
) -> None:
    """Refit fold ``fold`` of ``model`` on train + valid for the epochs its selection run
    (``run_fold``'s, already in ``runs_dir``) chose; score the last checkpoint."""
    selected = api.load(runs_dir / f"bench-mr-{model}" / f"fold-{fold}", data_dir=data_dir)
    n_train = len(selected.task.splits["train"].ids)
    n_valid = len(selected.task.splits["valid"].ids)
    steps = max(1, round(selected.step * (n_train + n_valid) / n_train))
    run_dir = runs_dir / f"bench-mr-{model}" / f"fold-{fold}-refit"
    texts = [
        f"task.fold={fold}",
        f"train.max_minutes={minutes}",
        *overrides,
        "task.refit=true",
        f"train.max_steps={steps}",
        "train.max_epochs=null",
        "train.patience=null",
    ]
    run = _train(model, run_dir, texts, data_dir, verbose)
    loaded = api.load(run_dir, data_dir=data_dir, prefer="latest")
    if loaded.step != steps:
        raise SystemExit(f"{run_dir}: stopped at update {loaded.step}, not {steps} (time budget?)")
    _score(loaded, run, contrast, result)


def _member_log_probs(loaded: Any, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    logits, y = loaded.task.split_logits(loaded.model, split)  # (N, C), (N,)
    return logits.double().log_softmax(-1), y


def ensemble(
    members: list[str],
    folds: int,
    runs_dir: Path,
    data_dir: str | None,
    contrast: list[ContrastItem],
    earlier: dict[str, Result],
    command: str,
    pool: str = "mean",
    refit: bool = False,
) -> Result:
    """Combine the members' fold-k models (saved by earlier runs in ``runs_dir``) on fold
    k's test part and on the contrast set; no training. ``pool``: ``mean`` averages the
    class probabilities; ``stacked`` fits the log-linear pool of seqlab.eval.ensemble on
    fold k's validation split (which the members early-stopped on, never the test fold)
    and applies it. ``refit``: the test and contrast predictions come from the members'
    refit runs (``fold-<k>-refit``, last checkpoint; ``--refit``), the pool's validation
    predictions still from the runs that held the validation part out. Minutes and
    updates per fold are the members' sums (their results)."""
    name = ("ensemble" if pool == "mean" else "stacked") + ("-refit" if refit else "")
    result = Result(name, command=command, members=list(members), pool=pool)
    result.contrast_right = [0] * len(contrast)
    for fold in range(folds):
        test, valid, contrast_lp, gold, labels = [], [], [], None, None
        for m in members:
            run_dir = runs_dir / f"bench-mr-{m}" / f"fold-{fold}"
            held_out = None  # the run that held the validation part out: needed unless
            if pool == "stacked" or not refit:  # a mean pool of refit runs alone is scored
                held_out = api.load(run_dir, data_dir=data_dir)
            loaded = held_out
            if refit:
                run_dir = run_dir.with_name(f"fold-{fold}-refit")
                loaded = api.load(run_dir, data_dir=data_dir, prefer="latest")
            lp, y = _member_log_probs(loaded, "test")
            if gold is None:
                gold, labels = y, loaded.task.labels
            elif not torch.equal(gold, y) or loaded.task.labels != labels:
                raise SystemExit(f"{run_dir}: not the same test fold as {members[0]}'s")
            test.append(lp)
            if pool == "stacked":
                valid.append(_member_log_probs(held_out, "valid"))
            if fold == 0:
                result.params += sum(p.numel() for p in loaded.model.parameters())
            if contrast:
                preds = loaded.predict([c.text for c in contrast])
                p = torch.tensor([[d["probs"][lab] for lab in labels] for d in preds])
                contrast_lp.append(p.double().clamp_min(1e-300).log())
        if pool == "stacked":
            fitted = fit_log_linear_pool(torch.stack([v for v, _ in valid]), valid[0][1])
            result.weights.append([round(float(w), 4) for w in fitted.weights])
            combine = fitted.logits
        else:
            combine = mean_probability
        total = combine(torch.stack(test))  # (N, C)
        result.accuracy.append(100.0 * float((total.argmax(-1) == gold).float().mean()))
        if contrast_lp:
            hyp = [labels[i] for i in combine(torch.stack(contrast_lp)).argmax(-1).tolist()]
            right = [int(h == c.label) for h, c in zip(hyp, contrast)]
            result.contrast_right = [a + b for a, b in zip(result.contrast_right, right)]
        runs = [m + ("-refit" if refit else "") for m in members]
        found = [earlier[m] for m in runs if m in earlier and len(earlier[m].minutes) > fold]
        result.minutes.append(sum(r.minutes[fold] for r in found))
        result.updates.append(sum(r.updates[fold] for r in found))
    return result


# ---------------------------------------------------------------------------- entry point


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/classify.py",
        description="10-fold cross-validation of the sentence classifiers on MR.",
    )
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated preset names")
    p.add_argument("--folds", type=int, default=10, help="run folds 0 … N−1 (of --n-folds)")
    p.add_argument("--n-folds", type=int, default=10, help="k of the k-fold split")
    p.add_argument("--minutes-per-fold", type=float, default=5.0, help="training budget")
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--contrast", default="data/contrast/sentiment.tsv", help="'' to skip")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument("--runs-dir", default="runs", help="runs go to RUNS/bench-mr-<model>/fold-k")
    p.add_argument("--verbose", action="store_true", help="show the trainer's progress")
    p.add_argument("--lm-run", default=None, help="lstm-lm: a trained LM run (skip pretraining)")
    p.add_argument("--lm-minutes", type=float, default=12.0, help="lstm-lm: pretraining budget")
    p.add_argument("--lm-sources", default="ptb,multi30k,mr", help="lstm-lm: pretraining text")
    p.add_argument(
        "--ensemble",
        default="",
        help="comma-separated models whose saved fold runs (--runs-dir) to combine, no training",
    )
    p.add_argument(
        "--ensemble-pool",
        choices=("mean", "stacked"),
        default="mean",
        help="mean of probabilities, or the log-linear pool fitted on each fold's valid split",
    )
    p.add_argument(
        "--ensemble-refit",
        action="store_true",
        help="combine the members' refit runs (--refit); the stacked pool is fitted as before",
    )
    p.add_argument(
        "--refit",
        action="store_true",
        help="also refit each fold on train + valid for the chosen epochs (rows <model>-refit)",
    )
    p.add_argument("overrides", nargs="*", help="key=value for every model; MODEL:key=value")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.ensemble = [m.strip() for m in args.ensemble.split(",") if m.strip()]
    if len(args.ensemble) == 1:
        p.error("--ensemble needs at least two models")
    for m in args.models:
        if not preset_path(m).is_file():
            p.error(f"no preset configs/mr-{m}.yaml (models: {', '.join(MODELS)})")
    if not 1 <= args.folds <= args.n_folds:
        p.error(f"--folds must be in [1, --n-folds={args.n_folds}]")
    for text in args.overrides:
        if "=" not in text:
            p.error(f"override {text!r} is not key=value")
    return args


def overrides_for(model: str, overrides: list[str], n_folds: int) -> list[str]:
    """``task.n_folds``, then the overrides that apply to ``model`` (plain ``key=value``
    ones and its own ``model:key=value`` ones, prefix removed), in the order given."""
    return [f"task.n_folds={n_folds}", *model_overrides(model, overrides)]


def pretrain_lm(args: argparse.Namespace) -> tuple[Path, str]:
    """Write the unlabelled text and train configs/mr-lm-pretrain.yaml on it; returns the
    run folder and a line describing it (sources, minutes, updates, valid perplexity)."""
    from seqlab.data.sentiment_lm_corpus import write_pretraining_text

    data_dir = Path(args.data_dir) if args.data_dir else api.default_data_dir()
    if data_dir is None:
        raise SystemExit("lstm-lm: no data folder for the LM's text; pass --data-dir")
    sources = [s.strip() for s in args.lm_sources.split(",") if s.strip()]
    text = Path(args.runs_dir) / "mr-lm-corpus.txt"
    n = write_pretraining_text(data_dir, text, sources)
    run_dir = Path(args.runs_dir) / "bench-mr-lm-pretrain"
    overrides = [f"task.path={text}", f"train.max_minutes={args.lm_minutes}"]
    run = api.train(
        ROOT / "configs" / "mr-lm-pretrain.yaml",
        run_dir=run_dir,
        data_dir=data_dir,
        overrides=overrides,
        overwrite=True,
        quiet=not args.verbose,
    )
    ppl = api.load(run_dir, data_dir=data_dir).evaluate("valid")["ppl"]
    line = (
        f"language model `configs/mr-lm-pretrain.yaml` trained {run.metrics['elapsed'] / 60:.1f} "
        f"min ({int(run.metrics['step'])} updates) on {n:,} unlabelled sentences of "
        f"{'+'.join(sources)} (valid perplexity {ppl:.1f})"
        + (
            "; it read the MR test folds' text, not their labels (transductive)"
            if "mr" in sources
            else ""
        )
        + "."
    )
    print(f"[lstm-lm] {line}", flush=True)
    return run_dir, line


def main(argv: list[str] | None = None) -> list[Result]:
    """Run the benchmark; print the tables and write the section; return the results."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = shlex.join(["python", "benchmarks/classify.py", *argv])
    contrast_path = Path(args.contrast)
    if args.contrast and not contrast_path.is_file():
        contrast_path = ROOT / args.contrast  # the shipped set, from any working directory
    contrast = read_contrast_set(contrast_path) if args.contrast else []
    for model in args.models:  # check every config before the first long run
        api.resolve_config(preset_path(model), overrides_for(model, args.overrides, args.n_folds))
    results = []
    for model in args.models:
        result, t0 = Result(model, command=command), time.perf_counter()
        refit = Result(f"{model}-refit", command=command)
        extra = []
        if model == "lstm-lm":
            if args.lm_run:
                lm_run, result.pretrain = Path(args.lm_run), f"language model `{args.lm_run}`."
            else:
                lm_run, result.pretrain = pretrain_lm(args)
            extra = [f"task.init_lm={lm_run}"]
        for fold in range(args.folds):
            shared = (
                [*extra, *overrides_for(model, args.overrides, args.n_folds)],
                args.data_dir,
                Path(args.runs_dir),
                contrast,
            )
            run_fold(model, fold, args.minutes_per_fold, *shared, result, args.verbose)
            print(
                f"[{model}] fold {fold}: test accuracy {result.accuracy[-1]:.1f} % "
                f"({result.minutes[-1]:.1f} min, {result.updates[-1]} updates)",
                flush=True,
            )
            if args.refit:
                refit_fold(model, fold, args.minutes_per_fold, *shared, refit, args.verbose)
                print(
                    f"[{refit.model}] fold {fold}: test accuracy {refit.accuracy[-1]:.1f} % "
                    f"({refit.updates[-1]} updates on train + valid)",
                    flush=True,
                )
        result.wall_minutes = (time.perf_counter() - t0) / 60.0
        print(f"[{model}] {result.mean:.1f} ± {result.std:.1f} % over {result.folds} folds")
        results.append(result)
        if args.refit:
            refit.wall_minutes = result.wall_minutes
            print(f"[{refit.model}] {refit.mean:.1f} ± {refit.std:.1f} % over {refit.folds} folds")
            results.append(refit)
    out = Path(args.out)
    sidecar_path = out.parent / "figures" / "sentiment-mr.json"
    pooled = "ensemble" if args.ensemble_pool == "mean" else "stacked"
    pooled += "-refit" if args.ensemble_refit else ""
    now = args.models + [f"{m}-refit" for m in args.models if args.refit]
    now += [pooled] if args.ensemble else []
    earlier = earlier_results(sidecar_path, now, args.n_folds, contrast)
    if args.ensemble:
        known = {r.model: r for r in earlier + results}
        t0 = time.perf_counter()
        result = ensemble(
            args.ensemble,
            args.folds,
            Path(args.runs_dir),
            args.data_dir,
            contrast,
            known,
            command,
            args.ensemble_pool,
            args.ensemble_refit,
        )
        result.wall_minutes = (time.perf_counter() - t0) / 60.0
        print(f"[{pooled}] {result.mean:.1f} ± {result.std:.1f} % over {result.folds} folds")
        results.append(result)
    order = {m: i for i, m in enumerate(MODELS)}
    results = sorted(earlier + results, key=lambda r: order.get(r.model, len(order)))
    print(accuracy_table(results, args.n_folds))
    if contrast:
        print(contrast_table(results, contrast))
    write_section(out, render_section(results, contrast, command, args), HEADING)
    sidecar = {  # the numbers for seqlab report (docs/claims.md)
        "command": command,
        "n_folds": args.n_folds,
        "recurrent": list(RECURRENT),
        "contrast": [dataclasses.asdict(c) for c in contrast],
        "models": [dataclasses.asdict(r) for r in results],
    }
    path = write_json(sidecar_path, sidecar)
    print(f"wrote {out} ({HEADING[3:]}) and {path}")
    return results


if __name__ == "__main__":
    main()
