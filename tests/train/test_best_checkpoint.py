"""Which validation ``checkpoints/best`` holds: every validation competes, the end-of-training
one off the ``valid_every`` schedule included; patience counts only scheduled ones, so a run
stopped and resumed stops early where the uninterrupted run would."""

import json

import pytest
import torch

from seqlab.run_config import resolve_run
from seqlab.train.trainer import Trainer
from seqlab.train.validation import EarlyStopping
from tests.train.tiny import tiny


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_the_final_off_schedule_validation_competes_for_best(tmp_path):
    # Validations at 10 and 20 on the schedule; the stop at 25 validates once more.
    cfg = resolve_run(tiny(**{"train.max_steps": 25, "train.save_every": 100}))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).fit()
    events = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    scored = [
        (e["step"], e["valid/loss"], e["best"]) for e in events if e["event"] in ("valid", "final")
    ]
    assert [s for s, _, _ in scored] == [10, 20, 25]
    best_step = min(scored, key=lambda x: x[1])[0]
    assert best_step == 25, "the tiny run should still improve at its last step"
    best = json.loads((tmp_path / "run/checkpoints/best/meta.json").read_text())
    assert best["step"] == summary["best"]["step"] == 25
    assert best["extra"]["metrics"]["loss"] == pytest.approx(summary["valid"]["loss"])
    assert scored[-1][2] is True  # the log marks the final validation "(best)"
    # The step checkpoint written at the stop holds that validation, so a resume that has
    # nothing left to do neither validates again nor forgets which step is best.
    again = Trainer.resume(tmp_path / "run", quiet=True).fit()
    assert again["best"] == summary["best"]
    events = (tmp_path / "run/metrics.jsonl").read_text().splitlines()
    assert sum(json.loads(x)["event"] == "final" for x in events) == 1


def test_patience_counts_only_scheduled_validations():
    early = EarlyStopping("loss", "min", patience=2)
    assert early.update({"loss": 1.0}, 10) and early.update({"loss": 0.9}, 20)
    # A stop at 25 (max_minutes) validates off the schedule: the best so far, saved as best.
    assert early.update({"loss": 0.5}, 25, scheduled=False)
    assert (early.best, early.best_step, early.bad_evals) == (0.5, 25, 0)
    # Resumed: 0.8 beats the scheduled best 0.9, as in the uninterrupted run, so patience
    # resets; it does not beat 0.5, so checkpoints/best keeps step 25.
    assert not early.update({"loss": 0.8}, 30)
    assert early.bad_evals == 0 and not early.should_stop
    assert not early.update({"loss": 0.85}, 40)
    assert early.bad_evals == 1 and not early.should_stop
    assert not early.update({"loss": 0.86}, 50) and early.should_stop
    assert early.best_step == 25

    copy = EarlyStopping("loss", "min", patience=2)
    copy.load_state_dict(json.loads(json.dumps(early.state_dict())))
    assert copy == early
    # A checkpoint from before the two bests: its best was a scheduled one.
    old = EarlyStopping("loss", "min", patience=2)
    old.load_state_dict({"best": 0.9, "best_step": 20, "bad_evals": 1})
    assert old.scheduled_best == 0.9 and not old.update({"loss": 0.95}, 30) and old.should_stop


def test_a_tie_or_a_non_finite_value_is_no_improvement():
    early = EarlyStopping("bleu", "max", patience=None)
    assert early.update({"bleu": 10.0}, 1)
    assert not early.update({"bleu": 10.0}, 2, scheduled=False)
    assert not early.update({"bleu": float("nan")}, 3)
    assert (early.best, early.best_step, early.bad_evals) == (10.0, 1, 1)  # final: no count


def test_a_misnamed_metric_at_the_final_validation_keeps_the_last_step(tmp_path, capsys):
    # No scheduled validation would have caught the name: training must not lose its end.
    over = {"train.max_steps": 5, "train.valid_every": 100, "train.early_stop_metric": "bleu"}
    summary = Trainer(resolve_run(tiny(**over)), tmp_path / "run", quiet=False).fit()
    assert summary["step"] == 5 and summary["best"]["step"] is None
    assert (tmp_path / "run/checkpoints/step-000005").is_dir()
    assert not (tmp_path / "run/checkpoints/best").exists()
    out = capsys.readouterr().out
    assert "warning: train.early_stop_metric='bleu' is not reported" in out
    assert "checkpoints/best not written" in out
