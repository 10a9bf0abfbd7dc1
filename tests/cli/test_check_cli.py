"""``seqlab check``: the invariance checks on a tiny trained translation run (its valid split
or a source file), the table and the JSON, exit status 0 when all pass, and one-line
errors with exit code 2."""

import json

import pytest

from seqlab import api
from seqlab.cli.main import main
from tests.serve.runs import algorithmic_run, classify_run, lm_run, tag_run, translation_run
from tests.tasks.test_copy_translation import _pairs, _write, run_config

pytestmark = pytest.mark.usefixtures("one_thread")  # restores torch's thread count after


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return translation_run(tmp_path_factory.mktemp("check"))


def test_table_on_the_valid_split(run, capsys):
    assert main(["check", str(run), "--sentences", "5", "--beam", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "5 sentences of the valid split, beam 3" in out[0] and out[0].endswith("float64")
    assert out[1].split()[:2] == ["check", "compared"]
    rows = out[2:7]
    assert [r.split("  ")[0] for r in rows] == [
        "cached == full forward", "padding changes nothing", "batched == unbatched (beam 3)",
        "beam 1 == greedy", "search log P == forward log P",
    ]  # fmt: skip
    assert all(" ok " in r or r.rstrip().endswith(" ok") for r in rows), rows
    assert out[7] == "5 of 5 checks passed"


def test_json_on_a_source_file_in_float32(run, tmp_path, capsys):
    src = tmp_path / "src.de"
    src.write_text("der hund läuft.\nzwei katzen und ein mann sitzen.\nein kind.\n", "utf-8")
    argv = ["check", str(run), "--src", str(src), "--dtype", "float32", "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["sentences"] == 3 and record["source"] == str(src)
    assert record["dtype"] == "float32" and record["passed"] is True
    assert record["beam"] == 5  # the run's task.test_beam
    assert [c["passed"] for c in record["checks"]] == [True] * 5
    assert all(c["tol"] == 1e-3 and c["max_diff"] < 1e-3 for c in record["checks"])
    # the trained model ends its outputs: the search's log P includes the EOS step
    assert "Σ_t log p" in record["checks"][4]["compared"]


def test_a_failed_check_exits_1(run, capsys, monkeypatch):
    from seqlab.eval import invariants

    def drifting(model, sources, hyps, tol):
        return invariants.Check("cached == full forward", "fake", 0.5, tol, 0, "sentence 0")

    monkeypatch.setattr(invariants, "check_cached", drifting)
    assert main(["check", str(run), "--sentences", "2"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "4 of 5 checks passed" in out


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return lm_run(tmp_path_factory.mktemp("check_lm"))


def test_a_language_model_run(lm, capsys):
    assert main(["check", str(lm), "--sentences", "3", "--length", "12"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "3 rows of 12 tokens of the valid split" in out[0]
    assert [r.split("  ")[0] for r in out[2:6]] == [
        "cached == full forward", "carried state == one pass", "batched == unbatched",
        "fused == readable",
    ]  # fmt: skip
    assert out[6] == "4 of 4 checks passed"
    assert main(["check", str(lm), "--json", "--dtype", "float32"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["task"] == "lm" and record["length"] == 64 and record["passed"] is True


def test_a_pointer_generator_run_with_its_unk_rule(tmp_path, capsys):
    files = {}
    for split, n, seed in (("train", 400, 0), ("valid", 30, 1), ("test", 30, 2)):
        files |= _write(tmp_path, split, _pairs(n, seed))
    cfg = run_config(files, 30, unk_to_copy=True, coverage_penalty=0.3)
    api.train(cfg, run_dir=tmp_path / "run", quiet=True)
    assert main(["check", str(tmp_path / "run"), "--sentences", "4", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["task"] == "copy_translation" and record["unk_rule"] == "unk_to_copy"
    assert record["beam"] == 2 and record["coverage_penalty"] == 0.3  # the run's settings
    assert [c["passed"] for c in record["checks"]] == [True] * 5
    assert main(["check", str(tmp_path / "run"), "--split", "nope"]) == 2
    assert "has no 'nope' split" in capsys.readouterr().err


@pytest.fixture(scope="module")
def cls(tmp_path_factory):
    return classify_run(tmp_path_factory.mktemp("check_cls"))


def test_a_classifier_run_on_its_split_and_on_a_file(cls, tmp_path, capsys):
    assert main(["check", str(cls), "--split", "train", "--sentences", "6"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "6 sentences of the train split" in out[0] and out[0].endswith("float64")
    assert [r.split("  ")[0] for r in out[2:4]] == [
        "batched == unbatched", "more padding changes nothing",
    ]  # fmt: skip
    assert out[4] == "2 of 2 checks passed"
    src = tmp_path / "reviews.txt"
    src.write_text("a fine film .\nbad , dull and far too long\n", "utf-8")
    assert main(["check", str(cls), "--src", str(src), "--json", "--dtype", "float32"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["task"] == "classify" and record["sentences"] == 2 and record["passed"]


def test_a_crf_tagger_run(tmp_path, capsys):
    tagged = tag_run(tmp_path)
    assert main(["check", str(tagged), "--sentences", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "8 sentences of the valid split" in out[0]
    assert [r.split("  ")[0] for r in out[2:6]] == [
        "batched == unbatched", "more padding changes nothing", "fused == readable",
        "Viterbi score == s(x, ŷ)",
    ]  # fmt: skip
    assert out[6] == "4 of 4 checks passed"
    src = tmp_path / "raw.txt"
    src.write_text("Paris and Berlin\nAnna met Bob in Rome .\n", "utf-8")
    assert main(["check", str(tagged), "--src", str(src), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["task"] == "tag" and record["sentences"] == 2 and record["passed"]


def test_errors_are_one_line_with_exit_code_2(run, lm, cls, tmp_path, capsys, monkeypatch):
    empty = tmp_path / "empty.de"
    empty.write_text("der hund.\n\nein kind.\n", "utf-8")
    cases = [
        (["check", str(run), "--split", "test"], "has no 'test' split"),
        (["check", str(run), "--sentences", "0"], "--sentences must be >= 1"),
        (["check", str(run), "--beam", "0"], "--beam must be >= 1"),
        (["check", str(cls), "--beam", "2"], "a classifier or tagger has no search"),
        (["check", str(cls), "--split", "nope"], "has no 'nope' split"),
        (["check", str(run), "--length", "8"], "--length is for language models"),
        (["check", str(lm), "--beam", "3"], "--beam is for translation runs"),
        (["check", str(lm), "--length", "1"], "--length must be >= 2"),
        (["check", str(lm), "--length", "100000"], "fewer than one row of 100000"),
        (["check", str(run), "--src", str(empty)], "empty.de:2: empty line"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("seqlab: error: "), (argv, err)
        assert expected in err[0], (argv, err)


def test_other_tasks_are_refused_with_the_list(cls, capsys, monkeypatch):
    from types import SimpleNamespace

    from seqlab import api

    fake = SimpleNamespace(checkpoint="runs/ntm-x", config=SimpleNamespace(task="ntm"))
    monkeypatch.setattr(api, "load", lambda *a, **k: fake)
    assert main(["check", "runs/ntm-x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "runs/ntm-x: seqlab check runs on translation" in err and "'ntm'" in err
    assert "classify, tag" in err


def test_an_algorithmic_run_is_checked_on_its_split_and_on_a_symbol_file(tmp_path, capsys):
    run = algorithmic_run(tmp_path)  # the README's first run, shrunk
    assert main(["check", str(run), "--sentences", "6", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["task"] == "algorithmic" and record["sentences"] == 6
    assert record["beam"] == 4 and [c["passed"] for c in record["checks"]] == [True] * 5
    src = tmp_path / "symbols.txt"
    src.write_text("3 1 2\n7 7 0 5\n", encoding="utf-8")
    assert main(["check", str(run), "--src", str(src), "--beam", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 sentences of the " in out[0] and out[-1] == "5 of 5 checks passed"
    src.write_text("3 1 2\n3 x 9\n", encoding="utf-8")
    assert main(["check", str(run), "--src", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert "symbols.txt:2: expected symbols 0 … 7" in err and "'3 x 9'" in err
