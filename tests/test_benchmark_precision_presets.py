"""benchmarks/precision_presets.py on the trainer tests' tiny reverse task: both precisions
train on the same batches, round for round, and the table reports what was measured."""

import math
import os

import pytest
import torch

from benchmarks import precision_presets as bench
from tests.train.tiny import tiny, write_preset


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_both_precisions_train_on_the_same_batches(tmp_path):
    preset = write_preset(tmp_path / "tiny-reverse.yaml", tiny(**{"train.max_steps": 1000}))
    row = bench.measure(str(preset), [], None, steps=2, reps=3)
    assert row.pid == os.getpid()  # measure runs here; measure_fresh in a new process
    assert row.preset == "tiny-reverse" and row.model == "transformer"
    assert len(row.tokens["fp32"]) == 3 and row.tokens["fp32"] == row.tokens["bf16"]
    assert all(n > 0 for n in row.tokens["fp32"])
    assert all(v > 0 and math.isfinite(v) for v in row.tok_s.values())
    assert row.speed > 0 and row.faster in ("fp32", "bf16", "even")
    # the reverse task starts at ~log(8) nats a token; both precisions train the same model
    assert abs(row.loss["fp32"] - row.loss["bf16"]) < 0.2
    line = bench.format_table([row]).splitlines()[-1]
    assert line.startswith("| `tiny-reverse` | transformer |") and f"{row.speed:.2f}×" in line


def test_auto_lists_only_presets_whose_precision_is_auto():
    names = bench.auto_presets()
    assert "multi30k-luong" in names and "conll-bilstm" not in names  # the latter sets fp32


def test_a_single_round_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--reps", "1", "--presets", "multi30k-luong"])
    assert "--reps >= 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("speed", "faster"), [(1.2, "bf16"), (1.04, "even"), (0.96, "even"), (0.9, "fp32")]
)
def test_faster_calls_a_difference_under_five_percent_even(speed, faster):
    row = bench.Row("p", "m", "bf16", {}, speed, {}, {}, {})
    assert row.faster == faster


def test_each_preset_is_measured_in_a_process_of_its_own(tmp_path):
    preset = write_preset(tmp_path / "tiny-reverse.yaml", tiny(**{"train.max_steps": 1000}))
    rows = [bench.measure_fresh(str(preset), ["train.threads=1"], None, 1, 2) for _ in range(2)]
    assert all(r.preset == "tiny-reverse" for r in rows)
    assert rows[0].tokens["fp32"] == rows[0].tokens["bf16"] == rows[1].tokens["bf16"]
    pids = {r.pid for r in rows}
    assert len(pids) == 2 and os.getpid() not in pids and 0 not in pids
    with pytest.raises(SystemExit, match="measuring .*missing.yaml failed"):
        bench.measure_fresh(str(tmp_path / "missing.yaml"), [], None, steps=1, reps=2)


def test_a_preset_that_cannot_run_is_reported_and_the_others_measured(tmp_path):
    good = write_preset(tmp_path / "tiny-reverse.yaml", tiny(**{"train.max_steps": 1000}))
    out = tmp_path / "r.md"
    argv = ["--presets", f"{tmp_path / 'missing.yaml'},{good}", "--steps", "1", "--reps", "2"]
    rows = bench.main([*argv, "--out", str(out), "train.threads=1"])
    assert [r.preset for r in rows] == ["tiny-reverse"]
    text = out.read_text()
    assert "| `tiny-reverse` |" in text and "Not measured: `" in text and "missing.yaml" in text
