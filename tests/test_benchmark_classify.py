"""benchmarks/classify.py's bookkeeping (no training): separate invocations build up one
table from the sidecar JSON, and only when the earlier rows compare (same split, contrast)."""

import argparse
import dataclasses
import json

from benchmarks import classify as bench
from seqlab.data.mr import ContrastItem

CONTRAST = [ContrastItem(text="not bad at all", label=1, phenomenon="negation", line=2)]


def result(model, accuracy, command=""):
    n = len(accuracy)
    return bench.Result(
        model, 1000, accuracy, [3.0] * n, [500] * n, contrast_right=[1], command=command
    )


def sidecar(path, models, n_folds=10, contrast=CONTRAST, command="python earlier"):
    data = {
        "command": command,
        "n_folds": n_folds,
        "recurrent": list(bench.RECURRENT),
        "contrast": [dataclasses.asdict(c) for c in contrast],
        "models": [dataclasses.asdict(result(m, [70.0 + i, 72.0])) for i, m in enumerate(models)],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_models_not_run_now_keep_their_earlier_rows(tmp_path):
    path = sidecar(tmp_path / "s.json", ["avg", "kim-cnn"])
    kept = bench.earlier_results(path, ["lstm", "kim-cnn"], 10, CONTRAST)
    assert [r.model for r in kept] == ["avg"]  # kim-cnn is run again: its old row goes
    assert kept[0].accuracy == [70.0, 72.0] and kept[0].command == "python earlier"


def test_earlier_rows_of_another_split_or_contrast_set_are_dropped(tmp_path):
    path = sidecar(tmp_path / "s.json", ["avg"], n_folds=5)
    assert bench.earlier_results(path, ["lstm"], 10, CONTRAST) == []
    other = [ContrastItem(text="good", label=1, phenomenon="plain", line=2)]
    path = sidecar(tmp_path / "t.json", ["avg"])
    assert bench.earlier_results(path, ["lstm"], 10, other) == []
    assert bench.earlier_results(tmp_path / "missing.json", ["lstm"], 10, CONTRAST) == []


def test_section_names_the_command_of_every_row(tmp_path):
    path = sidecar(tmp_path / "s.json", ["avg"])
    now = result("lstm", [75.0, 77.0], command="python now")
    rows = bench.earlier_results(path, ["lstm"], 10, CONTRAST) + [now]
    args = argparse.Namespace(minutes_per_fold=3.0, n_folds=10, contrast="c.tsv")
    text = bench.render_section(rows, CONTRAST, "python now", args)
    assert "Command (`avg`): `python earlier`" in text
    assert "Command (`lstm`): `python now`" in text
    assert "Best: `lstm` 76.0 %" in text
