"""Checkpoint averaging: one model whose weights are the mean of several checkpoints'.

Vaswani et al. 2017 §6.1: "For the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals." With θ_k
the parameters (and floating-point buffers) of checkpoint k of one run:

    θ̄ = (1/N) Σ_{k=1..N} θ_k

The mean is taken in float64 and stored in each tensor's own dtype. Integer buffers (a
BatchNorm's ``num_batches_tracked``) are not averaged: the newest checkpoint's are kept.
The result is a checkpoint directory like any other (config, vocabularies and ``extra``
of the newest input, plus ``extra.averaged_from``), so ``seqlab evaluate``, ``translate``
and ``seqlab.load`` take it. It holds no optimizer, scheduler or RNG state: it is for
evaluation, not for resuming. Tied tensors stay tied (stored once, as in every checkpoint).

    seqlab average runs/tx --last 5            # → runs/tx/checkpoints/average-last5
    seqlab average CKPT_A CKPT_B --out avg     # any checkpoints of the same run config

Deviations: fairseq's ``average_checkpoints.py`` sums in the stored dtype; seqlab sums in
float64, so the order of the checkpoints cannot change the result beyond rounding once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab.errors import CheckpointError
from seqlab.train.checkpoint import _dedupe, _write_atomically, read_checkpoint, step_checkpoints

__all__ = ["average_checkpoints", "last_checkpoints"]

_RUN_STATE = ("optim.", "sched.", "scaler.", "rng.", "sampler.")  # not carried over
_MODEL_SECTIONS = ("task", "model")  # what builds the model and its vocabularies


def last_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    """The ``n`` newest ``step-N`` checkpoints of a run directory (oldest first)."""
    if n < 1:
        raise CheckpointError(f"--last must be >= 1, got {n}")
    folder = Path(run_dir)
    found = step_checkpoints(folder / "checkpoints") or step_checkpoints(folder)
    if len(found) < n:
        raise CheckpointError(
            f"{run_dir}: asked for the last {n} checkpoints but there are {len(found)} "
            f"({', '.join(p.name for _, p in found) or 'none'}); train with a larger "
            "train.keep_last, or average fewer"
        )
    return [p for _, p in found[-n:]]


def _model_keys(meta: dict[str, Any], tensors: dict[str, Tensor]) -> list[str]:
    """The checkpoint's own model tensors (aliases of tied tensors excluded)."""
    aliases = meta.get("aliases", {})
    return sorted(k for k in tensors if k.startswith("model.") and k not in aliases)


def _section(meta: dict[str, Any], name: str) -> Any:
    config = meta.get("config")
    return config.get(name) if isinstance(config, dict) else None


def average_checkpoints(paths: Sequence[str | Path], out: str | Path) -> Path:
    """θ̄ = mean of the model tensors of ``paths``, written atomically to ``out``.

    All checkpoints must come from the same ``task`` and ``model`` config (the same model
    and vocabularies; ``train``/``schedule`` may differ, as after a resume with new
    ``train.max_steps``) and hold the same tensors with the same shapes; the first
    difference is reported. The newest checkpoint's config is the one written.
    """
    if not paths:
        raise CheckpointError("no checkpoints to average")
    paths = [Path(p) for p in paths]
    out = Path(out)
    if out.resolve() in {p.resolve() for p in paths}:
        raise CheckpointError(f"{out}: the output would overwrite one of the averaged inputs")
    last_meta, last = read_checkpoint(paths[-1])
    keys = _model_keys(last_meta, last)
    sums = {k: last[k].to(torch.float64) for k in keys if last[k].is_floating_point()}
    for path in paths[:-1]:
        meta, tensors = read_checkpoint(path)
        differ = [k for k in _MODEL_SECTIONS if _section(meta, k) != _section(last_meta, k)]
        if differ:
            raise CheckpointError(
                f"{path} and {paths[-1]} have different '{differ[0]}' configs; only "
                "checkpoints of one model (one architecture, one vocabulary) can be averaged"
            )
        other = _model_keys(meta, tensors)
        if other != keys:
            diff = sorted(set(other) ^ set(keys))[0]
            raise CheckpointError(f"{path}: tensor {diff!r} is in only one of the checkpoints")
        for k in sums:
            if tensors[k].shape != last[k].shape:
                raise CheckpointError(
                    f"{path}: {k} has shape {tuple(tensors[k].shape)}, "
                    f"{paths[-1]} {tuple(last[k].shape)}"
                )
            sums[k] += tensors[k].to(torch.float64)
    stored = {k: v for k, v in last.items() if not k.startswith(("model.", *_RUN_STATE))}
    for k in keys:
        stored[k] = (sums[k] / len(paths)).to(last[k].dtype) if k in sums else last[k]
    for alias, target in last_meta.get("aliases", {}).items():
        if alias.startswith("model."):
            stored[alias] = stored[target]  # a tied tensor stays one tensor
    meta = {k: v for k, v in last_meta.items() if k != "aliases"}
    meta.update(optimizer=None, scheduler=None, grad_scaler=None, rng=None, sampler_state=None)
    extra = dict(meta.get("extra") or {})
    extra["averaged_from"] = [str(p) for p in paths]
    meta["extra"] = extra
    tensors_out, meta["aliases"] = _dedupe(stored)
    _write_atomically(out, tensors_out, meta)
    return out
