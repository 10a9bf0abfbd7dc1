"""``seqlab predict``: JSON and text output for a trained classify run (arguments or
stdin, without its data), and one-line errors with exit code 2."""

import io
import json

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.cli.predict_cmd import format_prediction
from tests.train.tiny import tiny

POS = ["a great film", "truly wonderful", "great fun", "wonderful acting", "a joy"]
NEG = ["a dull film", "truly awful", "dull and slow", "awful acting", "a bore"]


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def classify_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    data = root / "reviews.tsv"
    lines = [f"pos\t{t} {i}" for i in range(4) for t in POS]
    lines += [f"neg\t{t} {i}" for i in range(4) for t in NEG]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = {
        "task": {"name": "classify", "data": "tsv", "path": str(data), "min_freq": 1},
        "model": {"name": "avg_embedding", "d_embed": 8},
        "train": {
            "max_steps": 40,
            "precision": "fp32",
            "threads": 1,
            "progress": False,
            "log_every": 20,
            "valid_every": 20,
            "save_every": 20,
            "batch": {"max_tokens": 64},
            "optim": {"name": "adam", "lr": 0.05},
            "early_stop_metric": "accuracy",
            "early_stop_mode": "max",
        },
    }
    api.train(cfg, run_dir=root / "run", quiet=True)
    return root / "run", data


def test_json_output_shape(classify_run, capsys):
    run, _ = classify_run
    texts = ["a great and wonderful film", "dull, awful and slow"]
    assert main(["predict", str(run), *texts, "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in records] == texts
    for r in records:
        assert set(r) == {"text", "label", "probs"}
        assert set(r["probs"]) == {"neg", "pos"} and r["label"] in r["probs"]
        assert sum(r["probs"].values()) == pytest.approx(1.0, abs=1e-6)
        assert r["probs"][r["label"]] == max(r["probs"].values())
    assert [r["label"] for r in records] == ["pos", "neg"]


def test_text_output_from_stdin_without_the_data(classify_run, capsys, monkeypatch):
    run, data = classify_run
    moved = data.with_suffix(".away")
    data.rename(moved)  # the checkpoint carries vocabulary and labels
    try:
        monkeypatch.setattr("sys.stdin", io.StringIO("great fun\nawful acting\n"))
        assert main(["predict", str(run)]) == 0
    finally:
        moved.rename(data)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["pos", "neg"]
    assert [line.split("\t")[2] for line in lines] == ["great fun", "awful acting"]
    assert all(0.5 <= float(line.split("\t")[1]) <= 1.0 for line in lines)


def test_errors_are_one_line_with_exit_code_2(classify_run, tmp_path, capsys, monkeypatch):
    run, _ = classify_run
    reverse = tmp_path / "reverse"
    api.train(tiny(**{"train.max_steps": 2, "train.valid_every": 2}), run_dir=reverse, quiet=True)
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    cases = [
        (["predict", str(tmp_path / "nope"), "text"], "nope"),
        (["predict", str(run)], "no text given"),
        (["predict", str(reverse), "hello"], "cannot predict from raw text"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("seqlab: error: "), (argv, err)
        assert expected in err[0], (argv, err)


def test_format_prediction_for_tagging_and_other_results():
    tagged = {
        "tokens": ["John", "Smith", "runs"],
        "tags": ["B-PER", "I-PER", "O"],
        "entities": [{"type": "PER", "start": 0, "end": 2, "text": "John Smith"}],
    }
    assert (
        format_prediction("John Smith runs", tagged)
        == "John/B-PER Smith/I-PER runs/O\t[PER John Smith]"
    )
    label = {"label": "neg", "probs": {"neg": 0.875, "pos": 0.125}}
    assert format_prediction("not good", label) == "neg\t0.875\tnot good"
    assert format_prediction("x", [1, 2]) == "[1, 2]"
