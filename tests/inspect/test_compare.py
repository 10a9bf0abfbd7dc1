"""seqlab compare on the tiny reverse task: every model row, the real parameter count,
the task's metric in the table, the JSON record and PNG; loading finished runs; errors."""

import json

import pytest

from seqlab import api
from seqlab.cli.main import main as cli
from seqlab.errors import SeqlabError
from seqlab.inspect import compare as cmp
from seqlab.train.build import count_parameters

TINY = [
    "train.threads=1",
    "train.log_every=2",
    "train.valid_every=5",
    "task.n_train=400",
    "task.n_valid=20",
    "luong:model.emb_dim=16",
    "luong:model.hidden_size=16",
    "luong:model.layers=1",
    "transformer:model.d_model=16",
    "transformer:model.d_ff=32",
    "transformer:model.encoder_layers=1",
    "transformer:model.decoder_layers=1",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    record = cmp.compare(
        "reverse",
        ["transformer", "luong"],
        budget_minutes=0.03,
        out=out,
        overrides=TINY,
        decode_n=10,
        log=lambda line: None,
    )
    return out, record


def test_every_model_has_a_row_with_its_real_parameter_count(trained):
    out, record = trained
    rows = {r["model"]: r for r in record["rows"]}
    assert list(rows) == ["transformer", "luong"]
    for name, r in rows.items():
        loaded = api.load(out / name)
        assert loaded.config.model == name
        assert r["params"] == count_parameters(loaded.model) > 0
        assert r["metric"] == "exact_match" and r["mode"] == "max"
        assert 0.0 <= r["quality"] <= 1.0
        assert r["updates"] >= 1 and r["train_minutes"] > 0 and r["tokens_per_s"] > 0
        assert r["peak_rss_mib"] > 0 and r["peak_scope"] == "train+eval"
        assert r["decode_n"] == 10 and r["decode_sentences_per_s"] > 0
        assert r["curve"] and all(0.0 <= v <= 1.0 for _, v in r["curve"])
    assert rows["transformer"]["params"] != rows["luong"]["params"]  # two different models


def test_table_json_and_png(trained):
    out, record = trained
    table = cmp.compare_table(record)
    lines = table.splitlines()
    assert "valid exact_match ↑" in lines[0] and "decode sent/s" in lines[0]
    assert len(lines) == 2 + 2 and lines[2].startswith("| transformer |")
    assert f"{record['rows'][1]['params']:,}" in lines[3]
    saved = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    assert [r["model"] for r in saved["rows"]] == ["transformer", "luong"]
    assert saved["budget_minutes"] == 0.03 and "train.threads=1" in saved["overrides"]
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loading_runs_gives_the_same_quality_and_params(trained, tmp_path, capsys):
    out, record = trained
    runs = f"{out / 'transformer'},{out / 'luong'}"
    code = cli(["compare", "reverse", "--runs", runs, "--out", str(tmp_path), "--decode-n", "5"])
    assert code == 0
    text = capsys.readouterr().out
    assert "| transformer |" in text and "| luong |" in text and "(eval)" in text
    loaded = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    for a, b in zip(record["rows"], loaded["rows"]):
        assert (a["params"], a["quality"], a["updates"]) == (
            b["params"],
            b["quality"],
            b["updates"],
        )
        assert b["source"] == "loaded"


def test_model_without_its_own_preset_takes_the_task_preset():
    cfg = cmp.model_config("reverse", "cho")
    assert cfg["model"] == {"name": "cho"} and cfg["task"]["kind"] == "reverse"
    assert cmp.model_config("reverse", "transformer").name == "reverse-transformer.yaml"


def test_user_errors_are_one_line(tmp_path, trained, capsys):
    with pytest.raises(SeqlabError, match="no preset .*nope-"):
        cmp.task_presets("nope")
    with pytest.raises(SeqlabError, match="unknown model 'nosuch'"):
        cmp.model_config("reverse", "nosuch")
    other = tmp_path / "other"
    other.mkdir()
    out, _ = trained
    (other / "config.yaml").write_text(
        (out / "luong" / "config.yaml").read_text().replace("kind: reverse", "kind: copy")
    )
    with pytest.raises(SeqlabError, match="another task or data"):
        cmp.compare("reverse", runs=[out / "luong", other], out=tmp_path / "x")
    assert cli(["compare", "reverse", "--models", "transformer", "--budget", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seqlab: error: compare: --budget") and "\n" not in err
