"""``seqlab compare``: several models on one task and its data, side by side.

    from seqlab.inspect.compare import compare
    record = compare("reverse", ["transformer", "luong"], budget_minutes=0.1,
                     out="runs/compare-reverse", overrides=["train.threads=1"])

A TASK is a preset prefix: ``reverse`` names ``configs/reverse-*.yaml``, ``multi30k``
``configs/multi30k-*.yaml``. A model with its own preset (``configs/<task>-<model>.yaml``,
matched by the file's suffix or its registered model name) trains that preset; any other
registered model trains the task's first preset with its ``model`` section replaced by
``{name: <model>}`` (the model's defaults; change them with ``MODEL:key=value``). Every
model gets ``train.max_minutes = budget`` and the same task section, so the data are the
same. ``runs=[...]`` loads finished run directories instead of training.

For each model, one :class:`Row`: the task's quality metric (the preset's
``train.early_stop_metric``) of the best checkpoint on the validation split, trainable
parameters, training minutes and updates (metrics.jsonl), median training tokens/s, peak
resident memory (training + evaluation, or evaluation only for a loaded run) and greedy
decoding throughput in sentences/s where the task has a raw-input decoder (algorithmic,
translation). Written: ``compare.json`` (every row and its validation curve) and
``compare.png`` (quality against training time).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from seqlab import api, catalog
from seqlab.errors import SeqlabError
from seqlab.inspect.figures import figure, markdown_table, save_png, write_json
from seqlab.inspect.measure import overrides_for, peak_rss_mib, reset_peak_rss, train_tokens_per_s
from seqlab.train.build import count_parameters


@dataclass
class Row:
    """One model's line of the comparison (NaN / None where not measured)."""

    model: str
    run_dir: str
    source: str  # "trained" or "loaded"
    metric: str
    mode: str  # "max": higher is better
    quality: float
    params: int
    train_minutes: float
    updates: int
    tokens_per_s: float
    peak_rss_mib: float
    peak_scope: str  # "train+eval" or "eval"
    decode_sentences_per_s: float | None
    decode_n: int
    curve: list[tuple[float, float]] = field(default_factory=list)  # (minutes, valid metric)


# ---------------------------------------------------------------------------- configs


def task_presets(task: str, preset_dir: Path = catalog.PRESET_DIR) -> dict[str, Path]:
    """``{model key: preset}`` of ``<preset_dir>/<task>-*.yaml``; each preset is listed
    under its file suffix and its registered model name (``kim-cnn`` and ``kim_cnn``)."""
    found: dict[str, Path] = {}
    for path in sorted(preset_dir.glob(f"{task}-*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        name = (data.get("model") or {}).get("name")
        found.setdefault(path.stem[len(task) + 1 :], path)
        if isinstance(name, str):
            found.setdefault(name, path)
    if not found:
        prefixes = sorted({p.stem.split("-")[0] for p in preset_dir.glob("*.yaml")})
        raise SeqlabError(
            f"compare: no preset {preset_dir}/{task}-*.yaml; TASK is a preset prefix, one "
            f"of: {', '.join(prefixes)}"
        )
    return found


def model_config(task: str, model: str, preset_dir: Path = catalog.PRESET_DIR) -> Any:
    """The preset path (own preset) or config dict (the task's first preset with
    ``model: {name: model}``) that trains ``model`` on ``task``."""
    presets = task_presets(task, preset_dir)
    if model in presets:
        return presets[model]
    from seqlab.registry import MODELS

    catalog.load_all()
    if model not in MODELS:
        raise SeqlabError(
            f"compare: unknown model {model!r} for task {task!r}; use a preset suffix "
            f"({', '.join(sorted(presets))}) or a registered model ({', '.join(MODELS.names())})"
        )
    base = next(iter(presets.values()))
    data = yaml.safe_load(base.read_text(encoding="utf-8"))
    data["model"] = {"name": model}
    return data


# ---------------------------------------------------------------------------- measuring


def read_run(run_dir: Path, metric: str) -> tuple[float, int, float, list[tuple[float, float]]]:
    """(training minutes, updates, median tokens/s, [(minutes, valid metric)]) of a run,
    from its metrics.jsonl."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise SeqlabError(f"compare: {path} is missing; pass a run directory of seqlab train")
    minutes, updates, curve = 0.0, 0, []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if "elapsed" in r:
            minutes = max(minutes, float(r["elapsed"]) / 60.0)
        updates = max(updates, int(r.get("step", 0)))
        value = r.get(f"valid/{metric}")
        if r.get("event") in ("valid", "final") and value is not None:
            point = (float(r["elapsed"]) / 60.0, float(value))
            if not curve or curve[-1] != point:
                curve.append(point)
    return minutes, updates, train_tokens_per_s(path), curve


def decode_inputs(task: Any, n: int) -> tuple[str, list[Any], dict[str, Any]] | None:
    """(inference method, n raw validation inputs, keyword arguments) for a greedy decode
    of the task's validation sources; None for a task without a raw-input decoder."""
    from seqlab.tasks.algorithmic import N_SPECIAL, AlgorithmicTask
    from seqlab.tasks.translation import TranslationTask

    if isinstance(task, AlgorithmicTask):
        return "predict", [[s - N_SPECIAL for s in src] for src, _ in task.splits["valid"][:n]], {}
    if isinstance(task, TranslationTask):
        return "translate", list(task.texts["valid"][0][:n]), {"beam": 1}
    return None


def decode_speed(loaded: api.LoadedModel, n: int) -> tuple[float | None, int]:
    """Greedy decoding throughput (sentences/s) over ``n`` validation sources, after a
    2-sentence warm-up; (None, 0) where the task has no raw-input decoder."""
    plan = decode_inputs(loaded.task, n)
    if plan is None or not plan[1]:
        return None, 0
    name, inputs, kwargs = plan
    fn = getattr(loaded.task, name)
    fn(loaded.model, inputs[:2], **kwargs)
    t0 = time.perf_counter()
    fn(loaded.model, inputs, **kwargs)
    return len(inputs) / (time.perf_counter() - t0), len(inputs)


def measure(
    label: str, run_dir: Path, source: str, data_dir: str | Path | None, decode_n: int
) -> Row:
    """Load ``run_dir``'s best checkpoint, score the validation split, time decoding."""
    loaded = api.load(run_dir, data_dir=data_dir)
    metric = loaded.config.train.early_stop_metric or "loss"
    mode = loaded.config.train.early_stop_mode if loaded.config.train.early_stop_metric else "min"
    quality = float(loaded.evaluate("valid")[metric])
    speed, n = decode_speed(loaded, decode_n)
    minutes, updates, tokens_per_s, curve = read_run(run_dir, metric)
    return Row(
        model=label,
        run_dir=str(run_dir),
        source=source,
        metric=metric,
        mode=mode,
        quality=quality,
        params=count_parameters(loaded.model),
        train_minutes=minutes,
        updates=updates,
        tokens_per_s=tokens_per_s,
        peak_rss_mib=peak_rss_mib(),
        peak_scope="train+eval" if source == "trained" else "eval",
        decode_sentences_per_s=speed,
        decode_n=n,
        curve=curve,
    )


# ---------------------------------------------------------------------------- the comparison


def compare(
    task: str,
    models: list[str] | None = None,
    *,
    budget_minutes: float = 5.0,
    out: str | Path = "runs/compare",
    data_dir: str | Path | None = None,
    runs: list[str | Path] | None = None,
    overrides: list[str] | None = None,
    decode_n: int = 200,
    quiet: bool = True,
    log: Any = print,
) -> dict[str, Any]:
    """Train (``budget_minutes`` each, into ``out/<model>``) or load (``runs``) each model,
    measure it, write ``out/compare.json`` and ``out/compare.png``; return the record
    ``{"task", "budget_minutes", "rows": [Row as dict], "files"}``."""
    overrides = list(overrides or [])
    out = Path(out)
    if runs:
        dirs = [Path(r) for r in runs]
        for d in dirs:
            if not d.is_dir():
                raise SeqlabError(f"compare: --runs {d} is not a directory; pass run folders")
        labels = _labels(models or [_run_model(d) for d in dirs])
        if len(labels) != len(dirs):
            raise SeqlabError(f"compare: {len(labels)} --models names for {len(dirs)} --runs")
        _check_same_task(dirs)
        rows = [measure(lab, d, "loaded", data_dir, decode_n) for lab, d in zip(labels, dirs)]
    else:
        if not models:
            raise SeqlabError("compare: give --models a,b,c (or --runs DIR,DIR)")
        if not budget_minutes > 0:
            raise SeqlabError(f"compare: --budget must be > 0 minutes, got {budget_minutes}")
        plans = []
        for m in models:  # resolve every config before the first one trains
            cfg = model_config(task, m)
            texts = [f"train.max_minutes={budget_minutes}", *overrides_for(m, overrides)]
            api.resolve_config(cfg, texts)
            plans.append((cfg, texts))
        rows = []
        for label, (cfg, texts) in zip(_labels(models), plans):
            log(f"[{label}] training {budget_minutes:g} min …")
            reset_peak_rss()
            run_dir = out / label
            api.train(
                cfg,
                run_dir=run_dir,
                data_dir=data_dir,
                overrides=texts,
                overwrite=True,
                quiet=quiet,
            )
            rows.append(measure(label, run_dir, "trained", data_dir, decode_n))
            log(f"[{label}] {rows[-1].metric} {rows[-1].quality:.4g}")
    record = {
        "task": task,
        "budget_minutes": None if runs else budget_minutes,
        "overrides": overrides,
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    record["files"] = {
        "json": str(out / "compare.json"),
        "png": str(plot_quality_vs_time(record, out / "compare.png")),
    }
    write_json(out / "compare.json", record)
    return record


def _labels(models: list[str]) -> list[str]:
    """Unique row labels: a repeated model name gets ``-2``, ``-3`` …"""
    seen: dict[str, int] = {}
    out = []
    for m in models:
        seen[m] = seen.get(m, 0) + 1
        out.append(m if seen[m] == 1 else f"{m}-{seen[m]}")
    return out


def _run_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise SeqlabError(f"compare: {path} is missing; pass a run directory of seqlab train")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _run_model(run_dir: Path) -> str:
    return str(_run_config(run_dir)["model"]["name"])


def _check_same_task(dirs: list[Path]) -> None:
    """Every run must have the same task section (same task, same data)."""
    first = _run_config(dirs[0])["task"]
    for d in dirs[1:]:
        if _run_config(d)["task"] != first:
            raise SeqlabError(
                f"compare: {d} was trained on another task or data than {dirs[0]} (their "
                "config.yaml task sections differ); compare runs of one task"
            )


# ---------------------------------------------------------------------------- output


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def compare_table(record: dict[str, Any]) -> str:
    """The markdown table: one line per model, the task's metric named in the header."""
    rows = record["rows"]
    metric = rows[0]["metric"] if rows else "quality"
    arrow = "↑" if rows and rows[0]["mode"] == "max" else "↓"
    header = [
        "model",
        f"valid {metric} {arrow}",
        "params",
        "train min",
        "updates",
        "train tok/s",
        "peak RSS MiB",
        "decode sent/s",
    ]
    body = [
        [
            r["model"],
            _fmt(r["quality"], ".4g"),
            f"{r['params']:,}",
            _fmt(r["train_minutes"], ".2f"),
            r["updates"],
            _fmt(r["tokens_per_s"], ",.0f"),
            _fmt(r["peak_rss_mib"], ",.0f") + (" (eval)" if r["peak_scope"] == "eval" else ""),
            _fmt(r["decode_sentences_per_s"], ",.1f"),
        ]
        for r in rows
    ]
    return markdown_table(header, body)


def plot_quality_vs_time(record: dict[str, Any], path: Path) -> Path:
    """Validation metric against training minutes, one line per model; the final
    (best-checkpoint) quality as a large marker at the run's total time."""
    fig = figure(6.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    metric = record["rows"][0]["metric"] if record["rows"] else "quality"
    for r in record["rows"]:
        xs = [p[0] for p in r["curve"]]
        ys = [p[1] for p in r["curve"]]
        (line,) = ax.plot(xs, ys, marker=".", label=r["model"])
        ax.plot(
            [r["train_minutes"]], [r["quality"]], marker="o", markersize=8, color=line.get_color()
        )
    ax.set_xlabel("training time (min)", fontsize=8)
    ax.set_ylabel(f"validation {metric}", fontsize=8)
    ax.set_title(f"{record['task']}: quality vs training time", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_png(fig, path)
