"""benchmarks/pointer_generator.py's coverage phase (no training): it continues the plain
run at the rate that run ended on, and a finished run can be scored again from its files."""

import json

import pytest

from benchmarks import pointer_generator as bench


def write_run(run_dir, lrs, valid_bleu, final_bleu):
    (run_dir / "checkpoints").mkdir(parents=True)
    events = [{"event": "train", "step": 50 * (i + 1), "lr": lr} for i, lr in enumerate(lrs)]
    events += [
        {"event": "valid", "step": 100 * (i + 1), "valid/bleu_lc": b, "best": b == max(valid_bleu)}
        for i, b in enumerate(valid_bleu)
    ]
    events.append({"event": "final", "step": 333, "elapsed": 90.0, "valid/bleu_lc": final_bleu})
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return run_dir


def test_phase_continues_from_the_plain_run_at_its_last_rate(tmp_path):
    run = write_run(tmp_path / "plain", [1e-3, 5e-4, 2.5e-4], [10.0, 20.0], 19.0)
    assert bench.final_lr(run) == 2.5e-4
    assert bench.phase_overrides(run, 5.0) == [
        f"train.init_from={run}",
        "train.max_minutes=5.0",
        "schedule.name=constant",
        "train.optim.lr=0.00025",
    ]
    with pytest.raises(SystemExit, match="run the `plain` variant first"):
        bench.phase_overrides(tmp_path / "missing", 5.0)


def test_saved_summary_reads_what_training_returned(tmp_path):
    run = write_run(tmp_path / "plain", [1e-3], [10.0, 20.0, 15.0], 19.0)
    s = bench.saved_summary(run)
    assert s == {"step": 333, "elapsed": 90.0, "valid": {"bleu_lc": 19.0}, "best": {"value": 20.0}}
