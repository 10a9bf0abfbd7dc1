"""Fitting a decaying learning rate to a wall-clock budget (``train.max_minutes``).

A cosine schedule with ``total_steps: 0`` has no T of its own: it should reach its minimum
when the time budget runs out, and how many updates fit in the budget depends on the
machine. :class:`BudgetFit` measures the trainer's speed and sets T:

- at the end of the warmup, from the speed over the warmup (``Schedule.set_total_steps``);
- then every ``REFIT_EVERY`` updates after it, from the speed over the last ``span`` updates
  (``Schedule.refit_total_steps``, which keeps η continuous and moves only where the decay
  ends), so a machine that slows down or speeds up mid-run, or validation pauses, still
  end the decay at the budget. ``span`` = max(``4 · REFIT_EVERY``, ``train.valid_every``)
  when validations happen during the run, so that each window holds its share of them.

Every fit is one line ``{"event": "schedule", "step", "total_steps", "s_per_step"}`` of
metrics.jsonl (``"refit": true`` after the first). T and the refitted curve live in the
schedule's state, so a resumed run continues the same curve; the speed window starts
afresh after a resume.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from seqlab.train.schedules import Schedule, budget_total_steps

REFIT_EVERY = 50


class BudgetFit:
    """Owns the fits of ``schedule`` to a budget of ``budget_s`` seconds.

    Built when training starts (or resumes) after ``done`` updates, at ``elapsed``; then
    ``check(done, elapsed)`` once per update, before update ``done + 1`` is applied
    (its lr is already set, so a fit changes the updates after it). ``elapsed`` is the
    budget's clock in seconds, counted across resumes. ``broadcast`` makes every DDP rank
    use rank 0's numbers; ``record`` writes the metrics line.
    """

    def __init__(
        self,
        schedule: Schedule,
        budget_s: float,
        valid_every: int,
        done: int,
        elapsed: float,
        broadcast: Callable[[Any], Any] = lambda x: x,
        record: Callable[[dict[str, Any]], None] = lambda _: None,
    ) -> None:
        self.schedule = schedule
        self.budget_s = budget_s
        self.valid_every = valid_every
        self.broadcast = broadcast
        self.record = record
        self.marks: deque[tuple[int, float]] = deque([(done, elapsed)])  # (updates, elapsed)

    def span(self) -> int:
        """Updates over which the speed is measured for a refit."""
        end = self.schedule.budget_end or 0
        periodic = self.valid_every if self.valid_every < end else 0
        return max(4 * REFIT_EVERY, periodic)

    def check(self, done: int, elapsed: float) -> None:
        warmup = int(getattr(self.schedule.cfg, "warmup", 0))
        if self.schedule.fits_budget:
            if done + 1 >= warmup:
                self._fit(done, elapsed, warmup, refit=False)
        elif self._refit_due(done):
            self._fit(done, elapsed, warmup, refit=True)

    def _refit_due(self, done: int) -> bool:
        fitted = self.schedule.fitted_total_steps is not None
        return fitted and done - self.marks[-1][0] >= REFIT_EVERY

    def _fit(self, done: int, elapsed: float, warmup: int, refit: bool) -> None:
        while len(self.marks) > 1 and self.marks[1][0] <= done - self.span():
            self.marks.popleft()
        first, t0 = self.marks[0]
        per_step = (elapsed - t0) / max(done - first, 1)
        left = max(self.budget_s - elapsed, 0.0)
        total = self.broadcast(budget_total_steps(done, per_step, left, warmup))
        if refit:
            self.schedule.refit_total_steps(done + 1, total)
        else:
            self.schedule.set_total_steps(total)
        self.marks.append((done, elapsed))
        line = {"event": "schedule", "step": done, "total_steps": total, "s_per_step": per_step}
        self.record({**line, "refit": True} if refit else line)
