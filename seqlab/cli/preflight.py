"""``seqlab config validate``'s checks beyond the types: what ``seqlab train`` would find
wrong before its first step, found without loading any data (USER-NEEDS §17, §18).

- the device (``train.device``; ``auto`` = CUDA when available, else the CPU) and the
  precision on it (``train.precision``, ``auto`` resolved as training resolves it: bf16
  on a CPU with avx512_bf16 / amx_bf16, fp16 or bf16 on CUDA …);
- every input file or folder the task names: present as given, or under the data folder
  (``--data-dir``, default ``../shared/data``), as the tasks look them up; and the run
  folder or checkpoint of ``train.init_from``, as given. Output folders
  (``task.cache_dir``) are not inputs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError

__all__ = ["input_paths", "preflight"]


def _is_input(name: str) -> bool:
    """An input file's field: ``path``, ``*_path``, ``*_src``, ``*_tgt``, ``init_lm`` (an
    output folder such as ``cache_dir`` does not match)."""
    return name in ("path", "init_lm") or name.endswith(("_path", "_src", "_tgt"))


def input_paths(cfg: Any) -> list[tuple[str, str]]:
    """``(config key, path)`` of every input file the run names (unset ones skipped)."""
    found = []
    if dataclasses.is_dataclass(cfg.task_cfg):
        for f in dataclasses.fields(cfg.task_cfg):
            value = getattr(cfg.task_cfg, f.name)
            if isinstance(value, str) and _is_input(f.name):
                found.append((f"task.{f.name}", value))
    if cfg.train.init_from:
        found.append(("train.init_from", cfg.train.init_from))
    return found


def preflight(cfg: Any, data_dir: Path | None) -> list[str]:
    """The checks above; lines to print when all pass, else a ``SeqlabError`` naming
    every problem."""
    from seqlab.data.readers import resolve_path
    from seqlab.train.distributed import resolve_device
    from seqlab.train.precision import resolve_precision

    device = resolve_device(cfg.train.device)
    precision = resolve_precision(cfg.train.precision, device)
    lines = [f"device {device} ({cfg.train.device}), precision {precision} ({cfg.train.precision})"]
    missing = []
    for key, value in input_paths(cfg):
        # the tasks look under the data folder; a warm start's run folder is taken as given
        path = resolve_path(value, data_dir if key.startswith("task.") else None)
        if path.exists():
            lines.append(f"{key}: {path}")
        else:
            looked = data_dir is not None and not path.is_absolute() and key.startswith("task.")
            where = f" (nor under the data folder {data_dir})" if looked else ""
            missing.append(f"{key}: {value} does not exist{where}")
    if missing:
        tasks = any(m.startswith("task.") for m in missing)
        hint = "fix the path, or pass --data-dir where the files are" if tasks else "fix the path"
        raise SeqlabError("; ".join(missing) + f" — {hint}")
    return lines
