"""``seqlab inspect …``: each experiment prints its table and writes JSON + PNG; user
errors are one line with exit code 2."""

import json

import pytest

from seqlab.cli.main import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_gradflow_tiny(tmp_path, capsys):
    code, out, _ = _run(
        capsys,
        "inspect",
        "gradflow",
        "--out",
        str(tmp_path),
        "--distance",
        "3",
        "--steps",
        "1",
        "--hidden",
        "4",
        "--depths",
        "8",
    )
    assert code == 0
    assert "| lstm-fb0 | 0 |" in out and "| resnet-8 | 3 |" in out
    record = json.loads((tmp_path / "gradflow.json").read_text())
    assert record["time"]["distance"] == 3 and (tmp_path / "gradflow-depth.png").is_file()


def test_inspect_positional_and_attention_speed(tmp_path, capsys):
    code, out, _ = _run(
        capsys,
        "inspect",
        "positional",
        "--out",
        str(tmp_path),
        "--d-model",
        "8",
        "--positions",
        "64",
        "--offsets",
        "1,3",
    )
    assert code == 0 and "| 3 |" in out and (tmp_path / "positional-offset.png").is_file()
    code, out, _ = _run(
        capsys,
        "inspect",
        "attention-speed",
        "--out",
        str(tmp_path),
        "--lengths",
        "4,8",
        "--width",
        "8",
        "--batch",
        "2",
        "--repeats",
        "1",
    )
    assert code == 0 and "| 8 |" in out
    assert len(json.loads((tmp_path / "attention-speed.json").read_text())["rows"]) == 2


def test_inspect_complexity_quick(tmp_path, capsys):
    code, out, _ = _run(
        capsys, "inspect", "complexity", "--quick", "--families", "rnn", "--out", str(tmp_path)
    )
    assert code == 0 and "| RNN (sutskever) |" in out
    assert (tmp_path / "complexity.png").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["gradflow", "--depths", "10"], "--depths: ResNet depths are 6n + 2"),
        (["gradflow", "--steps", "0"], "--steps must be >= 1"),
        (["positional", "--d-model", "7"], "--d-model must be even"),
        (["positional", "--offsets", "1,x"], "--offsets must be positive integers"),
        (["complexity", "--families", "cnn"], "--families: unknown ['cnn']"),
        (["gradflow", "--distractors", "ptb", "--data-dir", "/nonexistent"], "ptb"),
    ],
)
def test_inspect_user_errors_are_one_line(tmp_path, capsys, argv, message):
    code, out, err = _run(capsys, "inspect", argv[0], "--out", str(tmp_path), *argv[1:])
    assert code == 2 and message in err and err.count("\n") == 1
