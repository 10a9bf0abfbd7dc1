"""``seqlab train | evaluate | config``: user errors are one line with exit code 2 (real
subprocesses of ``python -m seqlab``), and the commands print what docs/training.md says
(in-process)."""

import json
import subprocess
import sys

import pytest
import torch
import yaml

from seqlab.cli.main import main
from seqlab.run_config import resolve_run
from tests.train.tiny import tiny, write_preset


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture
def preset(tmp_path):
    return write_preset(tmp_path / "tiny.yaml", tiny(**{"train.max_steps": 4}))


def test_user_errors_are_one_line_and_exit_code_2(tmp_path, preset):
    not_a_run = tmp_path / "not-a-run"
    not_a_run.mkdir()
    cases = {
        "bad key": (["train", str(preset), "train.max_stpes=3"], "Did you mean 'max_steps'"),
        "missing preset": (["train", str(tmp_path / "nope.yaml")], "no such preset file"),
        "resume non-run": (["train", "--resume", str(not_a_run)], "not a seqlab run"),
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "seqlab", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (argv, _) in cases.items()
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (name, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("seqlab: error: "), (name, err)
        assert cases[name][1] in lines[0], (name, lines[0])


def test_config_show_prints_the_resolved_yaml(capsys, preset):
    assert main(["config", "show", str(preset), "model.d_model=32"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["model"]["d_model"] == 32
    assert resolve_run(shown) == resolve_run(preset, ["model.d_model=32"])


def test_config_validate(capsys, preset):
    assert main(["config", "validate", str(preset)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {preset} — task algorithmic")
    assert main(["config", "validate", str(preset), "train.precision=fp64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seqlab: error: ") and "'fp64' is not one of" in err


def test_config_validate_checks_the_device_precision_and_every_input_file(capsys, tmp_path, preset):
    from tests.tasks.test_copy_translation import _pairs, _write

    files = _write(tmp_path, "train", _pairs(5, 0)) | _write(tmp_path, "valid", _pairs(5, 1))
    cfg = yaml.safe_load(preset.read_text(encoding="utf-8"))
    cfg["task"] = {"name": "copy_translation", "data": "files", **files}
    cfg["model"] = {"name": "pointer_generator"}
    good = tmp_path / "pg.yaml"
    good.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert main(["config", "validate", str(good)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "  device cpu (auto), precision fp32 (fp32)"
    assert f"  task.train_src: {files['train_src']}" in out and len(out) == 6
    # a relative path is looked up under --data-dir too, as the tasks do
    rel = ["task.valid_tgt=valid.en", "--data-dir", str(tmp_path)]
    assert main(["config", "validate", str(good), *rel]) == 0
    assert f"  task.valid_tgt: {tmp_path / 'valid.en'}" in capsys.readouterr().out
    bad = ["task.train_src=missing.de", "task.tgt_embeddings_path=/no/vec.txt"]
    assert main(["config", "validate", str(good), *bad, "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert (
        f"task.train_src: missing.de does not exist (nor under the data folder {tmp_path})"
        in err[0]
    )
    assert "task.tgt_embeddings_path: /no/vec.txt does not exist — fix the path" in err[0]
    assert err[0].count("does not exist") == 2
    assert main(["config", "validate", str(preset), "train.init_from=runs/none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("train.init_from: runs/none does not exist — fix the path")
    assert main(["config", "validate", str(preset), "train.precision=fp16"]) == 2
    assert "precision=fp16 is not supported on CPU" in capsys.readouterr().err


def test_train_resume_and_evaluate(tmp_path, capsys, preset):
    run = tmp_path / "run"
    assert main(["train", str(preset), "--run-dir", str(run), "train.valid_every=2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"seqlab: run dir {run}"
    assert "effective batch = 96 tokens/rank × 1 rank(s) × 1 accum = 96" in out[3]
    summary = json.loads(out[-1])
    assert summary["step"] == 4 and summary["stopped"] == "max_steps"

    assert main(["train", str(preset), "--run-dir", str(run)]) == 2  # not empty
    assert "--overwrite" in capsys.readouterr().err

    assert main(["train", "--resume", str(run), "train.max_steps=6"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"seqlab: run dir {run}, resumed at step 4"
    assert json.loads(out[-1])["step"] == 6
    assert main(["train", "--resume", str(run), "model.d_model=8"]) == 2
    assert "only train.*" in capsys.readouterr().err

    assert main(["evaluate", str(run)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith(f"checkpoint {run / 'checkpoints' / 'best'} (step 6)")
    assert out[1].split() == ["metric", "value"]
    record = json.loads(out[-1])
    assert {"loss", "ppl", "exact_match", "token_acc"} <= set(record)
    assert record["precision"] == "fp32"  # the decoding's (--precision; default)
    assert [line.split()[0] for line in out[2:-1]] == list(record)[4:]  # one row each
    assert main(["evaluate", str(run), "--json"]) == 0  # the JSON object alone
    assert json.loads(capsys.readouterr().out) == record
    assert main(["evaluate", str(run), "--split", "test"]) == 2
    assert "no split 'test'" in capsys.readouterr().err


def test_evaluate_says_when_int8_quantized_nothing(tmp_path, capsys, preset, monkeypatch):
    from seqlab.tasks.algorithmic import AlgorithmicTask

    run = tmp_path / "run"
    assert main(["train", str(preset), "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--precision", "int8", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["precision"] == "int8"
    assert "quantized nothing" not in out.err  # greedy ran

    def no_search(self, model, split="valid"):  # an evaluation without a search
        return {"loss": 1.0}

    monkeypatch.setattr(AlgorithmicTask, "evaluate", no_search)
    assert main(["evaluate", str(run), "--precision", "int8"]) == 0
    out = capsys.readouterr()
    assert "--precision int8 quantized nothing" in out.err
    assert json.loads(out.out.splitlines()[-1])["precision"] == "fp32"
    assert "decoded in fp32" in out.out.splitlines()[0]


@pytest.mark.parametrize("slowdown", [20.0, 0.8])
def test_int8_on_a_cpu_without_a_fast_int8_kernel_is_warned_of(
    tmp_path, capsys, preset, monkeypatch, slowdown
):
    # torch._int_mm without VNNI / AMX: ~20-66x float32's time (a Zen 2 EPYC, 2026-12-04)
    from seqlab.decode import precision

    monkeypatch.setattr(precision, "int8_product_slowdown", lambda: slowdown)
    run = tmp_path / "run"
    assert main(["train", str(preset), "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--precision", "int8", "--json"]) == 0
    err = capsys.readouterr().err
    warned = "seqlab: warning: --precision int8 will be slower than fp32 on this CPU"
    assert (warned in err) == (slowdown >= precision.SLOW_INT8)
    if slowdown >= precision.SLOW_INT8:
        assert "runs 20x slower than float32" in err and "--precision fp32" in err
    assert main(["evaluate", str(run), "--json"]) == 0  # fp32: never a word about int8
    assert "int8" not in capsys.readouterr().err
