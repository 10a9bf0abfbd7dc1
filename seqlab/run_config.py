"""The configuration of one training run: task, model, schedule and training sections.

A preset is a YAML mapping with four sections; ``task``, ``model`` and ``schedule`` name
a registered entry whose config dataclass types the rest of the section::

    task:     {name: algorithmic, kind: reverse}
    model:    {name: transformer, d_model: 64, n_heads: 4}
    schedule: {name: inverse_sqrt, warmup: 400}
    train:    {max_steps: 2000, optim: {name: adam, lr: 1.0e-3}}

Values flow dataclass defaults → preset → dotted overrides (``model.d_model=128``).
An override that names another entry (``schedule.name=cosine`` on an ``inverse_sqrt``
preset) starts that section afresh: the preset's fields of the old name are dropped, and
the section's other overrides apply in any order (``schedule.warmup=200``).
Every key is checked (closest valid name, file and line) and every value typed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from seqlab import catalog
from seqlab.config import (
    ConfigError,
    closest_hint,
    deep_merge,
    from_dict,
    key_lines,
    load_yaml,
    parse_override,
    set_path,
    to_dict,
)
from seqlab.registry import MODELS, SCHEDULES, TASKS, Registry
from seqlab.train.optim import OptimConfig


@dataclass(frozen=True)
class BatchConfig:
    """Token-budget batching (seqlab.data.batching.TokenBudgetBatcher)."""

    max_tokens: int = 4096
    max_len: int = 256
    max_sentences: int | None = None
    sort_window: int | None = None


@dataclass(frozen=True)
class TrainConfig:
    """Everything the Trainer needs that is not the task, the model or the schedule."""

    seed: int = 0
    max_steps: int = 1000
    max_epochs: int | None = None
    max_minutes: float | None = None
    accum_steps: int = 1
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    device: str = "auto"
    label_smoothing: float = 0.0
    clip_norm: float | None = 1.0
    optim: OptimConfig = field(default_factory=OptimConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    log_every: int = 50
    valid_every: int = 500
    save_every: int = 500
    keep_last: int = 2
    early_stop_metric: str | None = None
    early_stop_mode: Literal["min", "max"] = "min"
    patience: int | None = None
    nonfinite: Literal["stop", "skip"] = "stop"
    deterministic: bool = False
    threads: int | None = None
    progress: bool = True
    tensorboard: bool = False
    init_from: str | None = None  # warm start: a run dir or checkpoint (weights + tokenizer)
    dropout_from_step: int | None = None  # late dropout: none for updates 1 … S (late_dropout.py)

    def __post_init__(self) -> None:
        for name in ("max_steps", "accum_steps", "log_every", "valid_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.dropout_from_step is not None and self.dropout_from_step < 0:
            raise ValueError(f"train.dropout_from_step must be >= 0, got {self.dropout_from_step}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"train.max_minutes must be > 0, got {self.max_minutes}")


@dataclass(frozen=True)
class RunConfig:
    """A resolved run: registered names plus their typed configs."""

    task: str
    task_cfg: Any
    model: str
    model_cfg: Any
    schedule: str
    schedule_cfg: Any
    train: TrainConfig

    def to_dict(self) -> dict[str, Any]:
        """The YAML/JSON form (the same shape as a preset); ``from_dict`` inverts it."""
        return {
            "task": {"name": self.task, **to_dict(self.task_cfg)},
            "model": {"name": self.model, **to_dict(self.model_cfg)},
            "schedule": {"name": self.schedule, **to_dict(self.schedule_cfg)},
            "train": to_dict(self.train),
        }


SECTIONS: dict[str, tuple[Registry | None, str | None]] = {
    "task": (TASKS, None),
    "model": (MODELS, None),
    "schedule": (SCHEDULES, "constant"),
    "train": (None, None),
}


def _section(
    data: dict[str, Any], section: str, file: str, lines: dict[tuple[str, ...], int]
) -> tuple[str, Any]:
    registry, default_name = SECTIONS[section]
    raw = data.get(section) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: section '{section}' must be a mapping, got {raw!r}")
    raw = dict(raw)
    if registry is None:
        cls, name = TrainConfig, ""
    else:
        name = raw.pop("name", default_name)
        if name is None:
            known = ", ".join(registry.names()) or "(none registered)"
            raise ConfigError(f"{file}: section '{section}' needs a name (one of: {known})")
        try:
            cls = registry.get(str(name)).config_cls
        except KeyError as exc:
            line = lines.get((section, "name"))
            where = f"{file}:{line}" if line else file
            raise ConfigError(f"{where}: {section}.name: {exc.args[0]}") from None
    merged = deep_merge(to_dict(cls()), raw, cls, file, lines, (section,))
    return name, from_dict(cls, merged, where=f"{file}: {section}")


def resolve_run(
    preset: str | Path | dict[str, Any] | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> RunConfig:
    """Preset (a YAML path or an already-loaded mapping) ← overrides → a checked RunConfig."""
    catalog.load_all()
    if isinstance(preset, dict):
        data, file, lines = dict(preset), "config", {}
    elif preset is None:
        data, file, lines = {}, "config", {}
    else:
        data, file, lines = load_yaml(preset), str(preset), key_lines(preset)
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key in data:
        if key not in SECTIONS:
            line = lines.get((key,))
            where = f"{file}:{line}" if line else file
            raise ConfigError(
                f"{where}: unknown section '{key}'.{closest_hint(key, list(SECTIONS))} "
                f"Sections: {', '.join(SECTIONS)}"
            )
    parsed = [(text, *parse_override(text)) for text in overrides]
    for _, path, value in parsed:  # another schedule / model / task: its own fields only
        named = len(path) == 2 and path[1] == "name" and SECTIONS.get(path[0], (None,))[0]
        if named and str(value) != str((data.get(path[0]) or {}).get("name")):
            data[path[0]] = {}  # the preset's fields belong to the replaced name
    for text, path, value in parsed:
        if path[0] not in SECTIONS:
            raise ConfigError(
                f"override '{text}': unknown section '{path[0]}'."
                f"{closest_hint(path[0], list(SECTIONS))}"
            )
        if len(path) == 1:
            raise ConfigError(f"override '{text}': name a field, e.g. {path[0]}.name=…")
        data[path[0]] = _deep_copy(data.get(path[0]) or {})
        set_path(data, path, value)
        file = f"{file} + overrides" if "overrides" not in file else file
    task, task_cfg = _section(data, "task", file, lines)
    model, model_cfg = _section(data, "model", file, lines)
    schedule, schedule_cfg = _section(data, "schedule", file, lines)
    _, train = _section(data, "train", file, lines)
    return RunConfig(task, task_cfg, model, model_cfg, schedule, schedule_cfg, train)


def _deep_copy(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in d.items()}


def replace_train(cfg: RunConfig, **changes: Any) -> RunConfig:
    """A copy of ``cfg`` with some ``train`` fields changed (e.g. max_steps on resume)."""
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **changes))
