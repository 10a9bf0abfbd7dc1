"""`seqlab train` on bad data files: one line naming file and line, exit code 2, nothing
written to a run directory that could be mistaken for a finished run."""

import subprocess
import sys

import pytest
import yaml


def _preset(tmp_path, train_src, train_tgt):
    ok_src, ok_tgt = tmp_path / "ok.de", tmp_path / "ok.en"
    ok_src.write_text("ein hund\n", encoding="utf-8")
    ok_tgt.write_text("a dog\n", encoding="utf-8")
    cfg = {
        "task": {
            "name": "translation", "data": "files",
            "train_src": str(train_src), "train_tgt": str(train_tgt),
            "valid_src": str(ok_src), "valid_tgt": str(ok_tgt),
            "vocab_size": 20, "cache_dir": str(tmp_path / "spm"),
        },
        "model": {"name": "transformer", "d_model": 16, "n_heads": 2, "d_ff": 16},
        "train": {"max_steps": 1},
    }  # fmt: skip
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def _run(tmp_path, preset):
    return subprocess.run(
        [sys.executable, "-m", "seqlab", "train", str(preset), "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("case", ["utf8", "empty", "mismatch", "missing"])
def test_bad_data_gives_one_line_and_exit_2(tmp_path, case):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("ein hund\neine katze\nzwei kinder\n", encoding="utf-8")
    tgt.write_text("a dog\na cat\ntwo children\n", encoding="utf-8")
    expect = {"utf8": "train.de:2", "empty": "train.en", "mismatch": "train.en", "missing": "nope"}
    if case == "utf8":
        src.write_bytes(b"ein hund\neine \xff katze\nzwei kinder\n")
    elif case == "empty":
        tgt.write_text("", encoding="utf-8")
    elif case == "mismatch":
        tgt.write_text("a dog\na cat\n", encoding="utf-8")
    else:
        src = tmp_path / "nope.de"
    proc = _run(tmp_path, _preset(tmp_path, src, tgt))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("seqlab: error:")]
    assert len(lines) == 1, proc.stderr
    assert expect[case] in lines[0]
    assert "Traceback" not in proc.stderr
