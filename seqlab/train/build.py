"""Build a run's task and model from its RunConfig — the same code for training, resuming
and ``seqlab.load`` (a checkpoint rebuilds its model from the config it stores, no pickle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from seqlab import catalog
from seqlab.errors import SeqlabError
from seqlab.registry import MODELS, TASKS
from seqlab.run_config import RunConfig
from seqlab.tasks.base import Task


def build_task(
    cfg: RunConfig,
    data_dir: Path | None = None,
    tokenizer_state: dict[str, Any] | None = None,
) -> Task:
    """``TASKS[cfg.task](task_cfg, data_dir, seed)``, prepared (data loaded, tokenizer ready)."""
    catalog.load_all()
    task = TASKS.get(cfg.task).target(cfg.task_cfg, data_dir, cfg.train.seed)
    task.prepare(tokenizer_state)
    return task


def build_model(cfg: RunConfig, task: Task) -> nn.Module:
    """``MODELS[cfg.model](model_cfg, **task.model_kwargs())``, then ``task.init_model``."""
    catalog.load_all()
    entry = MODELS.get(cfg.model)
    try:
        model = entry.target(cfg.model_cfg, **task.model_kwargs())
    except (TypeError, ValueError) as exc:
        raise SeqlabError(
            f"model '{cfg.model}' cannot be built for task '{cfg.task}': {exc}"
        ) from None
    task.init_model(model)
    return model


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
