"""The Python API; the CLI is a thin layer over these functions.

    import seqlab
    run = seqlab.train("configs/reverse-transformer.yaml", run_dir="runs/rev",
                       **{"train.max_steps": 200, "model.d_model": 64})
    run.metrics["valid"]["exact_match"]
    m = seqlab.load("runs/rev")              # or runs/rev/checkpoints/step-000200
    m.evaluate("valid")                      # the task's metrics
    m.predict([[3, 1, 2]])                   # the task's inference methods, model bound

``seqlab.load`` rebuilds the model from the config stored in the checkpoint alone (no
pickle, no preset file needed). The task's inference methods are the names it lists in
``inference_methods`` (the algorithmic task: ``predict``; translation will list
``translate``/``score``, language models ``generate``/``score``); each is called as
``task.<name>(model, *args, **kwargs)``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from seqlab import catalog
from seqlab.config import ConfigError
from seqlab.run_config import RunConfig, resolve_run
from seqlab.tasks.base import Task
from seqlab.train.allocator import keep_freed_memory
from seqlab.train.build import build_model, build_task
from seqlab.train.checkpoint import load_checkpoint
from seqlab.train.kernel_cache import enlarge_kernel_cache
from seqlab.train.run_dir import default_run_dir, find_checkpoint
from seqlab.train.trainer import Trainer

ConfigLike = str | Path | dict[str, Any]


def resolve_preset(config: ConfigLike) -> Path | dict[str, Any]:
    """A path to a YAML file, a shipped preset's name (``reverse-transformer``), or a dict."""
    if isinstance(config, dict):
        return config
    path = Path(config)
    if path.is_file():
        return path
    shipped = catalog.PRESET_DIR / f"{path.name}.yaml"
    if not path.suffix and shipped.is_file():
        return shipped
    names = ", ".join(p.stem for p in catalog.presets()) or "none"
    raise ConfigError(f"{config}: no such preset file (shipped presets: {names})")


def default_data_dir() -> Path | None:
    """``../shared/data`` (from the working directory, then from the source tree) if it exists."""
    for candidate in (
        Path.cwd().parent / "shared" / "data",
        catalog.PRESET_DIR.parent.parent / "shared" / "data",
    ):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def dotted_overrides(dotted: dict[str, Any]) -> list[str]:
    """``{"model.d_model": 64}`` → ``["model.d_model=64"]``; values are written as JSON (a
    subset of YAML), so the override parser gives back the same value and type."""

    def plain(v: Any) -> Any:
        return [plain(x) for x in v] if isinstance(v, (list, tuple)) else v

    return [f"{key}={json.dumps(plain(value))}" for key, value in dotted.items()]


def resolve_config(
    config: ConfigLike, overrides: list[str] | None = None, **dotted: Any
) -> RunConfig:
    """The checked RunConfig of ``config`` ← ``overrides`` ← ``dotted``."""
    texts = list(overrides or []) + dotted_overrides(dotted)
    return resolve_run(resolve_preset(config), texts)


@dataclass
class Run:
    """A finished (or stopped) training run."""

    run_dir: Path | None
    metrics: dict[str, Any]
    model: nn.Module
    task: Task
    config: RunConfig

    def load(self, prefer: str = "best") -> LoadedModel:
        """The run's best (or latest, ``prefer="latest"``) checkpoint as a LoadedModel."""
        if self.run_dir is None:
            raise ConfigError("this run had no run directory, so it saved no checkpoint")
        return load(self.run_dir, prefer=prefer)


def train(
    config: ConfigLike,
    *,
    run_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    overrides: list[str] | None = None,
    overwrite: bool = False,
    quiet: bool = False,
    **dotted: Any,
) -> Run:
    """Train ``config`` (a preset path or name, or a dict) with overrides; return the Run.

    ``run_dir`` defaults to ``runs/<preset-stem>-<timestamp>`` as on the command line;
    ``data_dir`` to :func:`default_data_dir`. ``overrides`` are ``key=value`` strings,
    ``dotted`` the same as keyword arguments: ``**{"train.max_steps": 100}``.
    """
    preset = resolve_preset(config)
    cfg = resolve_config(preset, overrides, **dotted)
    if run_dir is None:
        stem = preset.stem if isinstance(preset, Path) else f"{cfg.task}-{cfg.model}"
        run_dir = default_run_dir(stem)
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    trainer = Trainer(cfg, Path(run_dir), data, overwrite=overwrite, quiet=quiet)
    return _run(trainer)


def resume(
    run_dir: str | Path,
    *,
    data_dir: str | Path | None = None,
    overrides: list[str] | None = None,
    quiet: bool = False,
    **dotted: Any,
) -> Run:
    """Continue ``run_dir`` from its newest step checkpoint (only ``train.*`` may change)."""
    texts = list(overrides or []) + dotted_overrides(dotted)
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    trainer = Trainer.resume(Path(run_dir), texts, data, quiet=quiet)
    return _run(trainer)


def _run(trainer: Trainer) -> Run:
    metrics = trainer.fit()
    root = trainer.run.root if trainer.run is not None else None
    return Run(root, metrics, trainer.model, trainer.task, trainer.cfg)


@dataclass
class LoadedModel:
    """A model rebuilt from a checkpoint, in eval mode, with its task.

    ``evaluate(split)`` gives the task's metrics; every name in the task's
    ``inference_methods`` is available as a method with the model bound:
    ``loaded.predict(x) == loaded.task.predict(loaded.model, x)``.
    """

    model: nn.Module
    task: Task
    config: RunConfig
    checkpoint: Path
    step: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def inference_methods(self) -> tuple[str, ...]:
        return tuple(getattr(self.task, "inference_methods", ()))

    def evaluate(self, split: str = "valid") -> dict[str, float]:
        """The task's metrics on ``split``; extra information a task attaches to its result
        (translation: ``.signatures``, ``.hypotheses``) is kept."""
        return self.task.evaluate(self.model, split)

    def __getattr__(self, name: str) -> Any:
        task = self.__dict__.get("task")
        methods = tuple(getattr(task, "inference_methods", ()))
        if name in methods:
            return functools.partial(getattr(task, name), self.__dict__["model"])
        raise AttributeError(
            f"LoadedModel has no attribute {name!r}; the task "
            f"{type(task).__name__} offers: {', '.join(methods) or 'no inference methods'}"
        )

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.inference_methods))


def load(
    path: str | Path,
    *,
    data_dir: str | Path | None = None,
    device: str = "cpu",
    prefer: str = "best",
) -> LoadedModel:
    """Rebuild a model from a run directory (its ``best`` checkpoint, else the newest step;
    ``prefer="latest"`` for the newest step) or from one checkpoint directory."""
    keep_freed_memory()  # decoding makes the same large temporaries batch after batch
    enlarge_kernel_cache()  # decoding's row counts take many values (kernel_cache.py)
    ckpt = find_checkpoint(path, prefer)
    meta = load_checkpoint(ckpt)
    if not isinstance(meta.config, dict):
        raise ConfigError(f"{ckpt}: the checkpoint holds no run config; cannot rebuild it")
    cfg = resolve_run(meta.config)
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    task = build_task(cfg, data, meta.tokenizer_state)
    model = build_model(cfg, task)
    load_checkpoint(ckpt, model=model)
    model.to(device).eval()
    return LoadedModel(model, task, cfg, ckpt, meta.step, meta.extra)


def load_ensemble(
    paths: list[str | Path],
    *,
    data_dir: str | Path | None = None,
    device: str = "cpu",
    prefer: str | list[str] = "best",
) -> LoadedModel:
    """Load runs as one ensemble: each with ``load`` (``prefer`` for all, or one per run),
    pooled by the model type's ensemble (seqlab.ensemble_load: the linear pool of the
    members' distributions). ``evaluate`` and the task's inference methods then decode the
    pool; the task, config and step are the first run's; ``extra["members"]`` lists the
    members' checkpoints. A run whose task, vocabularies or model inputs differ from the
    first's is refused with a ``ConfigError`` naming it."""
    from seqlab.ensemble_load import ensemble_of

    if not paths:
        raise ConfigError("load_ensemble: give at least one run")
    choices = [prefer] * len(paths) if isinstance(prefer, str) else list(prefer)
    if len(choices) != len(paths):
        raise ConfigError(f"load_ensemble: {len(paths)} runs but {len(choices)} prefer values")
    loaded = [load(p, data_dir=data_dir, device=device, prefer=c) for p, c in zip(paths, choices)]
    model = ensemble_of(paths, loaded).to(device)
    first = loaded[0]
    extra = {**first.extra, "members": [str(m.checkpoint) for m in loaded]}
    return LoadedModel(model, first.task, first.config, first.checkpoint, first.step, extra)
