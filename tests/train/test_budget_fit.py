"""A cosine decay fitted to a wall-clock budget and refitted as the speed changes
(seqlab.train.budget, Schedule.refit_total_steps)."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import pytest
import torch
from torch import nn

from seqlab.train.budget import REFIT_EVERY, BudgetFit
from seqlab.train.schedules import CosineConfig, build_schedule, cosine_lr

# The schedules are stepped without optimizer steps: only their lrs matter here.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")


def _schedule(warmup: int = 10, lr: float = 2.0, min_lr: float = 0.0):
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    cfg = CosineConfig(warmup=warmup, total_steps=0, min_lr=min_lr)
    return opt, build_schedule(opt, "cosine", cfg), cfg


def _lr(opt) -> float:
    return float(opt.param_groups[0]["lr"])


def test_refit_keeps_the_lr_continuous_and_ends_the_decay_at_the_new_T():
    """Fit T₀ = 100, take 40 updates, move the end to 160: the updates up to the refit
    keep the plain cosine of T₀; after it η is the same cosine read on a clock that runs
    from the refit step to T₀ in 160 − 41 updates, so η is continuous (no jump larger
    than the cosine's own steps), reaches η_min exactly at 160 and stays there."""
    opt, sched, cfg = _schedule(min_lr=0.1)
    for _ in range(9):
        sched.step()
    sched.set_total_steps(100)
    curve = dataclasses.replace(cfg, total_steps=100)
    lrs = {}
    for t in range(10, 41):
        sched.step()
        lrs[t + 1] = _lr(opt)
    assert all(lr == cosine_lr(t, 2.0, curve) for t, lr in lrs.items())
    sched.refit_total_steps(41, 160)  # update 41 already has its lr
    assert sched.budget_end == 160 and sched.fitted_total_steps == 100
    for t in range(41, 200):
        sched.step()
        lrs[t + 1] = _lr(opt)
    k = (100 - 41) / (160 - 41)
    for t in range(42, 161):
        assert lrs[t] == pytest.approx(cosine_lr(41 + k * (t - 41), 2.0, curve), rel=1e-12)
    steps = [abs(lrs[t + 1] - lrs[t]) for t in range(11, 199)]
    assert max(steps) <= 2.0 * math.pi / 2 / (100 - 10) + 1e-12  # |dη/dt| ≤ π(η−η_min)/2(T−w)
    assert lrs[160] == pytest.approx(0.1, abs=1e-12) and lrs[199] == pytest.approx(0.1)
    assert lrs[159] > 0.1


def test_refitted_schedule_state_round_trips_through_json():
    """Resume is exact: a fresh schedule (built from the total_steps 0 config) loaded from
    the JSON state after a refit gives bitwise the same lrs, with no warning."""
    opt, sched, cfg = _schedule()
    for _ in range(9):
        sched.step()
    sched.set_total_steps(100)
    for _ in range(30):
        sched.step()
    sched.refit_total_steps(40, 70)
    for _ in range(5):
        sched.step()
    state = json.loads(json.dumps(sched.state_dict()))
    opt2, again, _ = _schedule()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again.load_state_dict(state)
    assert again.clock == sched.clock and again.budget_end == 70
    for _ in range(40):
        sched.step()
        again.step()
        assert _lr(opt2) == _lr(opt)


def test_a_decay_already_ended_is_not_restarted():
    opt, sched, _ = _schedule(min_lr=0.0)
    for _ in range(9):
        sched.step()
    sched.set_total_steps(20)
    for _ in range(30):
        sched.step()
    assert _lr(opt) == 0.0
    sched.refit_total_steps(40, 100)
    sched.step()
    assert _lr(opt) == 0.0 and sched.clock is None
    with pytest.raises(ValueError, match="set_total_steps"):
        _schedule()[1].refit_total_steps(5, 10)


def _simulate(seconds_per_update, budget_s: float, refit: bool, valid_every: int = 10**9):
    """Run the fitting loop on a fake clock: update t takes seconds_per_update(t); return
    the fit events and the lr of the last update inside the budget."""
    opt, sched, _ = _schedule(warmup=10, lr=1.0)
    events = []
    fit = BudgetFit(sched, budget_s, valid_every, 0, 0.0, record=events.append)
    done, clock, last_lr = 0, 0.0, None
    while clock < budget_s:
        if refit or sched.fits_budget:
            fit.check(done, clock)
        last_lr = _lr(opt)  # the lr of update done + 1
        sched.step()
        done += 1
        clock += seconds_per_update(done)
    return events, last_lr, done


def test_refits_end_the_decay_at_the_budget_when_the_machine_slows_down():
    """1 s per update over the warmup, 2 s per update from update 100 on (the demo's case:
    a machine that slows mid-run). One fit at the end of the warmup plans 991 updates and
    the budget ends at ~550 with η still ~0.43 of its peak; refitting every REFIT_EVERY
    updates moves the end to the budget and the last update runs at < 1 % of the peak."""

    def speed(t):
        return 1.0 if t < 100 else 2.0

    events, last_lr, done = _simulate(speed, 1000.0, refit=False)
    assert [e["total_steps"] for e in events] == [9 + 991]
    assert 540 <= done <= 550 and last_lr > 0.4

    events, last_lr, done = _simulate(speed, 1000.0, refit=True)
    assert events[0]["total_steps"] == 1000 and "refit" not in events[0]
    refits = [e for e in events if e.get("refit")]
    steps = [e["step"] for e in events]
    assert len(refits) >= 10 and all(b - a == REFIT_EVERY for a, b in zip(steps, steps[1:]))
    assert abs(refits[-1]["total_steps"] - done) <= 2
    assert last_lr < 0.01


def test_validation_pauses_are_counted_at_their_share():
    """Every 300 updates a 90 s validation: the speed window spans a validation interval
    (span = valid_every), so the refitted end stays within 5 % of the budget's end instead
    of swinging with the pauses (a 200-update window swings by ~30 %)."""

    def speed(t):
        return 1.0 + (90.0 if t % 300 == 0 else 0.0)

    events, last_lr, done = _simulate(speed, 2000.0, refit=True, valid_every=300)
    late = [e["total_steps"] for e in events if e.get("refit") and e["step"] >= 400]
    assert max(late) - min(late) <= 0.05 * done
    assert abs(late[-1] - done) <= 0.05 * done and last_lr < 0.01


def test_trainer_refits_every_few_updates_and_a_resumed_run_keeps_the_curve(tmp_path):
    """In a real run: one fit at the end of the warmup, then a refit every REFIT_EVERY
    updates (metrics.jsonl); η never rises after the warmup; a resumed run restores the
    refitted clock from the checkpoint and goes on refitting."""
    from seqlab.run_config import resolve_run
    from seqlab.train.trainer import Trainer
    from tests.train.tiny import tiny

    over = {
        "schedule.name": "cosine", "schedule.warmup": 10, "schedule.total_steps": 0,
        "train.max_minutes": 30, "train.max_steps": 120, "train.log_every": 1,
        "train.save_every": 60, "train.valid_every": 1000,
    }  # fmt: skip
    Trainer(resolve_run(tiny(**over)), tmp_path / "run", quiet=True).fit()
    first = Trainer.resume(tmp_path / "run", ["train.max_steps=180"], quiet=True)
    assert first.schedule.clock is not None and first.schedule.budget_end is not None
    unbounded = Trainer.resume(tmp_path / "run", ["train.max_steps=1000000000"], quiet=True)
    assert unbounded.progress.total == unbounded.schedule.budget_end < 1_000_000_000  # the plan
    unbounded.progress.close()
    first.fit()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    events = [json.loads(x) for x in lines]
    fits = [(e["step"], bool(e.get("refit"))) for e in events if e["event"] == "schedule"]
    assert fits == [(9, False), (59, True), (109, True), (170, True)]  # resumed at 120
    lrs = [e["lr"] for e in sorted(events, key=lambda e: e.get("step", 0)) if e["event"] == "train"]
    assert len(lrs) == 180
    assert all(b <= a for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] > 0
