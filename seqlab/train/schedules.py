"""Learning-rate schedules, registered by name in ``SCHEDULES`` with frozen configs.

Each schedule is a pure function ``lr(t, eta, cfg) -> η_t`` of the 1-based update index
``t`` (the update about to be taken) and the optimizer's learning rate ``eta`` (η, the
peak). :class:`Schedule` drives an optimizer with it: its only state is the update
counter, so it checkpoints exactly (``state_dict`` is plain JSON).

    opt = build_optimizer(model, OptimConfig(name="adam", lr=1.0, betas=(0.9, 0.98), eps=1e-9))
    sched = build_schedule(opt, "inverse_sqrt", {"warmup": 4000, "d_model": 512})
    for batch in batches:
        loss(batch).backward(); opt.step(); sched.step(); opt.zero_grad()

Counting: after construction the optimizer's lr is ``lr(1)``; after the k-th
``sched.step()`` it is ``lr(k + 1)``. So update t uses ``lr(t)`` and no update is taken
with lr 0 during warmup.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from seqlab.config import ConfigError, from_dict, to_dict
from seqlab.registry import SCHEDULES

LrFunction = Callable[[int, float, Any], float]


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _warmup_factor(t: int, w: int) -> float:
    """Linear warmup min(1, t / w); 1 when w = 0."""
    return 1.0 if w <= 0 else min(1.0, t / w)


@dataclass(frozen=True)
class ConstantConfig:
    """``warmup`` w: number of updates of linear warmup (0 = none)."""

    warmup: int = 0

    def __post_init__(self) -> None:
        _check(self.warmup >= 0, f"schedule.warmup must be >= 0, got {self.warmup}")


@SCHEDULES.register("constant", ConstantConfig)
def constant_lr(t: int, eta: float, cfg: ConstantConfig) -> float:
    """Constant learning rate after an optional linear warmup.

    η_t = η · min(1, t / w)   (η_t = η when w = 0)
    """
    return eta * _warmup_factor(t, cfg.warmup)


@dataclass(frozen=True)
class StepConfig:
    """``step_size`` N: updates between decays; ``gamma`` γ: the decay factor."""

    step_size: int = 1000
    gamma: float = 0.5

    def __post_init__(self) -> None:
        _check(self.step_size >= 1, f"schedule.step_size must be >= 1, got {self.step_size}")
        _check(0.0 < self.gamma <= 1.0, f"schedule.gamma must be in (0, 1], got {self.gamma}")


@SCHEDULES.register("step", StepConfig)
def step_lr(t: int, eta: float, cfg: StepConfig) -> float:
    """Step decay: multiply by γ every N updates.

    η_t = η · γ^⌊(t − 1) / N⌋   (updates 1…N at η, N+1…2N at γη, …)
    """
    return eta * cfg.gamma ** ((t - 1) // cfg.step_size)


@dataclass(frozen=True)
class InverseSqrtConfig:
    """``warmup`` w; ``variant``: ``vaswani`` (absolute, from d_model) or ``fairseq``
    (relative to the optimizer's η); ``d_model`` and ``scale`` are used by ``vaswani``."""

    warmup: int = 4000
    variant: Literal["vaswani", "fairseq"] = "vaswani"
    d_model: int = 512
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.warmup >= 1, f"schedule.warmup must be >= 1, got {self.warmup}")
        _check(self.d_model >= 1, f"schedule.d_model must be >= 1, got {self.d_model}")
        _check(self.scale > 0.0, f"schedule.scale must be > 0, got {self.scale}")
        _check(
            self.variant in ("vaswani", "fairseq"),
            f"schedule.variant must be 'vaswani' or 'fairseq', got {self.variant!r}",
        )


@SCHEDULES.register("inverse_sqrt", InverseSqrtConfig)
def inverse_sqrt_lr(t: int, eta: float, cfg: InverseSqrtConfig) -> float:
    """Linear warmup then decay ∝ 1/√t.

    Vaswani et al. 2017, §5.3, eq. (3) (``variant="vaswani"``):
        lrate = scale · d_model^−0.5 · min(step_num^−0.5, step_num · warmup_steps^−1.5)
    The peak, at step_num = warmup_steps, is scale · (d_model · warmup_steps)^−0.5
    (d_model = 512, warmup = 4000: ≈ 6.99e-4).

    fairseq-style (``variant="fairseq"``), peak at the optimizer's η:
        η_t = η · min(t / w, √(w / t))

    Deviations: ``vaswani`` ignores the optimizer's lr (eq. 3 is absolute) and adds the
    ``scale`` factor of tensor2tensor (1 = the paper). ``fairseq`` warms up from 0, not
    from fairseq's ``warmup_init_lr``.
    """
    w = cfg.warmup
    if cfg.variant == "vaswani":
        return cfg.scale * cfg.d_model**-0.5 * min(t**-0.5, t * w**-1.5)
    return eta * min(t / w, math.sqrt(w / t))


@dataclass(frozen=True)
class CosineConfig:
    """``warmup`` w; ``total_steps`` T (the update where η_t reaches ``min_lr``; > w, or 0:
    fitted to the wall-clock budget ``train.max_minutes`` at the end of the warmup, see
    :meth:`Schedule.fit_to_budget`); ``min_lr`` η_min (absolute)."""

    warmup: int = 0
    total_steps: int = 0
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        _check(self.warmup >= 0, f"schedule.warmup must be >= 0, got {self.warmup}")
        _check(self.total_steps >= 0, f"schedule.total_steps must be >= 0, got {self.total_steps}")
        _check(self.min_lr >= 0.0, f"schedule.min_lr must be >= 0, got {self.min_lr}")


@SCHEDULES.register("cosine", CosineConfig)
def cosine_lr(t: int, eta: float, cfg: CosineConfig) -> float:
    """Linear warmup, then half a cosine from η down to η_min (Loshchilov & Hutter 2017,
    SGDR eq. 5, one cycle, no restarts):

        η_t = η · t / w                                        for t ≤ w
        η_t = η_min + ½ (η − η_min) (1 + cos(π · p)),  p = min(1, (t − w) / (T − w))

    Deviations: no warm restarts; η_t stays at η_min after T.
    """
    w, total = cfg.warmup, cfg.total_steps
    if t <= w:
        return eta * t / w
    _check(
        total > w,
        f"schedule 'cosine' needs total_steps > warmup ({w}); got {total} "
        "(total_steps 0 is fitted to train.max_minutes, which needs warmup >= 1)",
    )
    p = min(1.0, (t - w) / (total - w))
    return cfg.min_lr + 0.5 * (eta - cfg.min_lr) * (1.0 + math.cos(math.pi * p))


def budget_total_steps(
    steps_done: int, seconds_per_step: float, seconds_left: float, warmup: int
) -> int:
    """T = steps_done + ⌊seconds_left / seconds_per_step⌋, at least warmup + 1: the update
    at which a decay fitted to a wall-clock budget ends, from the speed measured so far.

    Measured at the end of the warmup, then again every few updates from the recent speed
    (``seqlab.train.budget``; :meth:`Schedule.refit_total_steps` keeps η continuous).
    """
    return max(warmup + 1, steps_done + int(seconds_left / max(seconds_per_step, 1e-9)))


class Schedule(LRScheduler):
    """Sets every param group's lr to ``fn(t, base_lr, cfg)`` with t = updates taken + 1.

    ``state_dict()`` holds the counters (``last_epoch`` = updates taken), the base lrs and
    the schedule's name and config; loading a state saved under a different schedule or
    config restores the counter and warns that the curve differs from the saved run's.
    """

    def __init__(self, optimizer: Optimizer, name: str, cfg: Any, last_epoch: int = -1) -> None:
        entry = SCHEDULES.get(name)
        self.name = name
        self.cfg = cfg
        self._fn: LrFunction = entry.target
        self.fitted_total_steps: int | None = None
        # [s, v, k] after a refit at update s: the curve is read at the clock
        # v + k (t - s) instead of t for t > s (see refit_total_steps).
        self.clock: list[float] | None = None
        self.budget_end: int | None = None  # where the refitted decay now ends
        super().__init__(optimizer, last_epoch)

    def curve_step(self, t: int) -> float:
        """The step at which the curve is read for update t (t itself until a refit)."""
        if self.clock is None or t <= self.clock[0]:
            return t
        s, v, k = self.clock
        return v + k * (t - s)

    def get_lr(self) -> list[float]:
        t = self.curve_step(self.last_epoch + 1)
        return [self._fn(t, base, self.cfg) for base in self.base_lrs]

    @property
    def fits_budget(self) -> bool:
        """True while T is still to be fitted to the time budget (cosine, total_steps 0)."""
        return getattr(self.cfg, "total_steps", None) == 0

    def set_total_steps(self, total: int) -> None:
        """Fix the T of a schedule fitted to the time budget (kept in ``state_dict``)."""
        self.cfg = dataclasses.replace(self.cfg, total_steps=int(total))
        self.fitted_total_steps = self.budget_end = int(total)

    def refit_total_steps(self, step: int, total: int) -> None:
        """Move the end of a budget-fitted decay to update ``total`` (> ``step``) from update
        ``step`` on, keeping η continuous: with T₀ the first fit and v the clock at
        ``step``, the curve is read at v + (T₀ − v)(t − step)/(total − step) for t > step,
        which reaches T₀ (η_min) exactly at ``total``. A decay already ended stays ended.
        """
        if self.fitted_total_steps is None:
            raise ValueError("refit_total_steps needs a schedule fitted by set_total_steps")
        end, v = float(self.cfg.total_steps), float(self.curve_step(step))
        if v >= end:
            return
        total = max(int(total), step + 1)
        self.clock = [float(step), v, (end - v) / (total - step)]
        self.budget_end = total

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "config": to_dict(self.cfg)}

    def state_dict(self) -> dict[str, Any]:
        skip = ("optimizer", "_fn", "cfg", "name")
        state = {k: v for k, v in self.__dict__.items() if k not in skip}
        state["schedule"] = self.describe()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("schedule", None)
        fitted = state.get("fitted_total_steps")
        if fitted is not None and self.fits_budget:  # T fitted to the budget before saving
            self.cfg = dataclasses.replace(self.cfg, total_steps=int(fitted))
        if saved is not None and saved != self.describe():
            warnings.warn(
                f"resuming with LR schedule {self.describe()} but the checkpoint was trained "
                f"with {saved}; the update counter is restored, the learning-rate curve differs",
                stacklevel=2,
            )
        self.__dict__.update(state)


def build_schedule(
    optimizer: Optimizer, name: str, cfg: Any | dict[str, Any] | None = None
) -> Schedule:
    """The registered schedule ``name`` driving ``optimizer``.

    ``cfg`` is the schedule's config dataclass, a mapping of its fields (checked like any
    config), or None for its defaults.
    """
    entry = SCHEDULES.get(name)
    if cfg is None:
        cfg = entry.config_cls()
    elif isinstance(cfg, dict):
        cfg = from_dict(entry.config_cls, cfg, where=f"schedule.{name}")
    elif not isinstance(cfg, entry.config_cls):
        raise ConfigError(
            f"schedule '{name}' takes a {entry.config_cls.__name__}, got {type(cfg).__name__}"
        )
    return Schedule(optimizer, name, cfg)
