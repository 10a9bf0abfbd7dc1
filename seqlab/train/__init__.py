"""Training engine building blocks: checkpoints, RNG, precision, optimizers, LR schedules,
environment fingerprint. The Trainer loop is built on top of these (DESIGN §7)."""

import sys
import types
from typing import Any

from seqlab.train.checkpoint import (
    FORMAT_VERSION,
    MIGRATIONS,
    CheckpointMeta,
    describe_checkpoint,
    keep_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    read_checkpoint,
    restore_rng,
    save_checkpoint,
    step_name,
)
from seqlab.train.fingerprint import environment_fingerprint
from seqlab.train.optim import OptimConfig, build_optimizer, clip_grad_norm
from seqlab.train.precision import (
    PrecisionError,
    autocast_context,
    make_grad_scaler,
    resolve_precision,
)
from seqlab.train.rng import RngState, capture_rng_state, restore_rng_state, seed_everything
from seqlab.train.schedules import Schedule, build_schedule

__all__ = [
    "FORMAT_VERSION",
    "MIGRATIONS",
    "CheckpointMeta",
    "OptimConfig",
    "PrecisionError",
    "RngState",
    "Schedule",
    "autocast_context",
    "build_optimizer",
    "build_schedule",
    "capture_rng_state",
    "clip_grad_norm",
    "describe_checkpoint",
    "environment_fingerprint",
    "keep_checkpoints",
    "latest_checkpoint",
    "load_checkpoint",
    "make_grad_scaler",
    "read_checkpoint",
    "resolve_precision",
    "restore_rng",
    "restore_rng_state",
    "save_checkpoint",
    "seed_everything",
    "step_name",
]


class _CallableTrainPackage(types.ModuleType):
    """``seqlab.train`` is both this subpackage and the function ``seqlab.api.train``:
    ``seqlab.train("configs/x.yaml", **{"train.max_steps": 100})`` calls the latter."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from seqlab.api import train

        return train(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableTrainPackage
