"""A tiny run config shared by the trainer tests: a few-thousand-parameter Transformer on a
small reverse task, fp32 (``precision=auto`` would pick bf16 on AVX512-BF16 CPUs)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "task": {
        "name": "algorithmic",
        "kind": "reverse",
        "n_symbols": 6,
        "min_len": 2,
        "max_len": 6,
        "n_train": 400,
        "n_valid": 32,
    },
    "model": {
        "name": "transformer",
        "d_model": 16,
        "n_heads": 2,
        "d_ff": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "dropout": 0.1,
    },
    "schedule": {"name": "constant", "warmup": 5},
    "train": {
        "max_steps": 20,
        "precision": "fp32",
        "threads": 1,  # tiny matrices: one thread is fastest, and steady on a busy machine
        "progress": False,
        "log_every": 5,
        "valid_every": 10,
        "save_every": 10,
        "batch": {"max_tokens": 96, "max_len": 16},
        "optim": {"name": "adam", "lr": 3.0e-3},
    },
}


def tiny(**dotted: Any) -> dict[str, Any]:
    """A copy of TINY with ``{"train.max_steps": 5}``-style changes."""
    cfg = copy.deepcopy(TINY)
    for key, value in dotted.items():
        node = cfg
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


def write_preset(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path
