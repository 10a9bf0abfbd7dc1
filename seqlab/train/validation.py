"""Validation bookkeeping: which score is "best", and when to stop early.

The selection metric is ``train.early_stop_metric`` (a key of ``task.evaluate``'s result,
e.g. ``exact_match`` or ``loss``) compared by ``train.early_stop_mode``; when it is unset,
the validation ``loss`` (mode ``min``) selects the best checkpoint and training never stops
early. ``train.patience`` p: stop after p validations in a row without improvement
(None: never). A tie is not an improvement.

Two bests are kept. ``best`` / ``best_step`` is the best of every validation, the
end-of-training one included (a run stopped by ``train.max_minutes`` or ``max_epochs`` off
the ``valid_every`` schedule validates its last step): it is what ``checkpoints/best`` holds
and what ``seqlab evaluate`` picks. ``scheduled_best`` counts only the validations on the
schedule, and patience counts against it, so that a run stopped, resumed and continued stops
early where the uninterrupted run would, although it validated once more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from seqlab.errors import SeqlabError


@dataclass
class EarlyStopping:
    """Best value so far, the step that reached it and the evaluations since.

    Its ``state_dict`` goes into every checkpoint so that a resumed run stops where the
    uninterrupted one would have (see the module docstring for the two bests).
    """

    metric: str = "loss"
    mode: Literal["min", "max"] = "min"
    patience: int | None = None
    best: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    scheduled_best: float | None = None

    @classmethod
    def from_train_config(cls, train: Any) -> EarlyStopping:
        if train.early_stop_metric is None:
            return cls("loss", "min", train.patience)
        return cls(train.early_stop_metric, train.early_stop_mode, train.patience)

    def improves(self, value: float, over: float | None = None) -> bool:
        """``value`` beats ``over`` (default: ``best``); non-finite values never do."""
        if not math.isfinite(value):
            return False
        if over is None:
            return True
        return value < over if self.mode == "min" else value > over

    def update(
        self, metrics: dict[str, float], step: int, split: str = "valid", scheduled: bool = True
    ) -> bool:
        """Record one validation; True when it is the new ``best`` (save ``checkpoints/best``).

        ``scheduled=False``: the end-of-training validation off the schedule; it competes
        for ``best`` but leaves patience (``scheduled_best``, ``bad_evals``) as it was."""
        if self.metric not in metrics:
            raise SeqlabError(
                f"train.early_stop_metric={self.metric!r} is not reported by the task on "
                f"'{split}'; it reports: {', '.join(sorted(metrics))}"
            )
        value = float(metrics[self.metric])
        if scheduled:
            if self.improves(value, self.scheduled_best):
                self.scheduled_best, self.bad_evals = value, 0
            else:
                self.bad_evals += 1
        if self.improves(value, self.best):
            self.best, self.best_step = value, step
            return True
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.bad_evals >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_step": self.best_step,
            "bad_evals": self.bad_evals,
            "scheduled_best": self.scheduled_best,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state.get("best")
        self.best_step = state.get("best_step")
        self.bad_evals = int(state.get("bad_evals", 0))
        # checkpoints before the two bests: only scheduled validations counted at all
        self.scheduled_best = state.get("scheduled_best", self.best)


def prefixed(metrics: dict[str, float], split: str) -> dict[str, float]:
    """``{"loss": 1.2}`` → ``{"valid/loss": 1.2}`` (the metrics.jsonl / TensorBoard keys)."""
    return {f"{split}/{k}": float(v) for k, v in metrics.items()}
