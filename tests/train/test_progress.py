"""Progress: a budget fit's schedule records set the planned length shown in the lines."""

import json

from seqlab.train.progress import Progress, format_event


def _train(step: int) -> dict:
    return {"event": "train", "step": step, "epoch": 0, "loss": 1.0, "ppl": 2.7, "lr": 1e-3}


def test_lines_show_the_fitted_number_of_updates_not_max_steps(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    p = Progress(1_000_000, show=True, metrics_path=metrics)
    record = {**_train(50), "grad_norm": 0.5, "tokens_per_s": 100.0}
    p.record(record)
    assert "step      50/1000000" in capsys.readouterr().out
    for total in (4771, 4196, 4251):  # first fit, then refits both ways
        p.record({"event": "schedule", "step": 199, "total_steps": total, "s_per_step": 0.6})
        assert p.total == total
    p.record(record)
    assert "step   50/4251 |" in capsys.readouterr().out
    p.record({"event": "schedule", "step": 299, "total_steps": 2_000_000, "s_per_step": 0.1})
    assert p.total == 1_000_000  # never past max_steps
    assert [json.loads(line)["event"] for line in metrics.read_text().splitlines()] == [
        "train",
        "schedule",
        "schedule",
        "schedule",
        "train",
        "schedule",
    ]
    p.close()


def test_format_event_pads_the_step_to_the_total():
    line = format_event({**_train(7), "grad_norm": 0.1, "tokens_per_s": 1.0}, 300)
    assert line.startswith("step   7/300 | epoch 0 | loss 1.0000")
