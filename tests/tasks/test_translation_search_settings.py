"""The translation task's search settings: every decode of a run (evaluate, translate,
evaluate_files, the CLI, the server) uses the run's ``task.length_penalty`` and
``task.coverage_penalty`` unless the call names its own, and GNMT's coverage penalty
reaches beam search for the RNN attention models (bahdanau, luong)."""

# ruff: noqa: F811  (the fixtures imported from test_translation are parameters here)
from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
import torch

from seqlab.config import to_dict
from seqlab.models.bahdanau import Bahdanau, BahdanauConfig
from seqlab.run_config import resolve_run
from seqlab.tasks.translation import TranslationConfig
from seqlab.train.checkpoint import save_checkpoint
from tests.tasks.test_translation import _config, _one_thread, _tiny_model, prepared  # noqa: F401

SENTENCES = ["der hund läuft.", "ein kind und eine katze.", "zwei männer sitzen."]


@pytest.fixture(scope="module")
def bahdanau(prepared):
    """A random Bahdanau model over the task's vocabularies, drawn from U(−1, 1) so that
    its outputs vary and end (an untrained U(−0.1, 0.1) model repeats one token)."""
    torch.manual_seed(0)
    cfg = BahdanauConfig(emb_dim=16, hidden_size=16, attn_dim=8, readout_dim=8, dropout=0.0,
                         init_range=1.0)  # fmt: skip
    return Bahdanau(cfg, **prepared.model_kwargs()).eval()


def with_cfg(task, **kw):
    """The prepared task with some config fields changed (no new tokenizer)."""
    other = copy.copy(task)
    other.cfg = dataclasses.replace(task.cfg, **kw)
    return other


def test_config_refuses_bad_penalties(tmp_path):
    for name in ("length_penalty", "coverage_penalty"):
        for bad in (-0.1, math.inf, math.nan):
            with pytest.raises(ValueError, match=f"task.{name} must be finite and >= 0"):
                _config(tmp_path, **{name: bad})


def test_calls_use_the_run_settings_unless_they_name_their_own(prepared, bahdanau):
    task = with_cfg(prepared, length_penalty=1.0, coverage_penalty=0.5)
    by_run = task.translate(bahdanau, SENTENCES, beam=3, nbest=3)
    named = prepared.translate(
        bahdanau, SENTENCES, beam=3, nbest=3, length_penalty=1.0, coverage_penalty=0.5
    )
    assert by_run == named
    plain = task.translate(
        bahdanau, SENTENCES, beam=3, nbest=3, length_penalty=0.6, coverage_penalty=0.0
    )
    assert plain == prepared.translate(bahdanau, SENTENCES, beam=3, nbest=3)
    assert plain != by_run  # α and β change the scores at least
    [rec] = task.translate_detailed(bahdanau, SENTENCES[:1], beam=3)
    assert rec.text == by_run[0][0][0]


def test_evaluate_and_evaluate_files_use_the_run_settings(tmp_path, prepared, bahdanau):
    task = with_cfg(prepared, length_penalty=1.0, coverage_penalty=0.5, test_beam=3)
    src, ref = tmp_path / "t.de", tmp_path / "t.en"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    ref.write_text("the dog runs.\na child and a cat.\ntwo men sit.\n", encoding="utf-8")
    got = task.evaluate_files(bahdanau, src, ref, beam=3, hyp_path=tmp_path / "h.txt")
    assert got["length_penalty"] == 1.0 and got["coverage_penalty"] == 0.5
    hyps = (tmp_path / "h.txt").read_text(encoding="utf-8").splitlines()
    assert hyps == task.translate(bahdanau, SENTENCES, beam=3)
    mine = task.evaluate_files(bahdanau, src, ref, beam=3, coverage_penalty=0.0)
    assert mine["coverage_penalty"] == 0.0 and mine["length_penalty"] == 1.0
    test = task.evaluate(bahdanau, "test")
    assert test.settings["length_penalty"] == 1.0 and test.settings["coverage_penalty"] == 0.5


def test_a_model_without_coverage_is_refused_before_training(prepared):
    task = with_cfg(prepared, coverage_penalty=0.2)
    with pytest.raises(ValueError, match="task.coverage_penalty: .*set the coverage penalty to 0"):
        task.init_model(_tiny_model(task))
    with_cfg(prepared, coverage_penalty=0.0).init_model(_tiny_model(prepared))  # no error
    with pytest.raises(ValueError, match="set the coverage penalty to 0"):
        prepared.translate(_tiny_model(prepared), SENTENCES[:1], beam=2, coverage_penalty=0.2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, prepared, bahdanau):
    """The Bahdanau model saved as a run whose task says α 1.0, β 0.5."""
    cfg = dataclasses.replace(prepared.cfg, length_penalty=1.0, coverage_penalty=0.5)
    run = resolve_run(
        {
            "task": {"name": "translation", **to_dict(cfg)},
            "model": {"name": "bahdanau", **to_dict(bahdanau.cfg)},
        }
    )
    path = tmp_path_factory.mktemp("run") / "step-000001"
    state = prepared.tokenizer_state()
    return save_checkpoint(
        path, model=bahdanau, step=1, config=run.to_dict(), tokenizer_state=state
    )


def test_cli_translate_and_evaluate_default_to_the_run_settings(
    checkpoint,
    prepared,
    bahdanau,
    tmp_path,
    capsys,
):
    from seqlab.cli.main import main

    task = with_cfg(prepared, length_penalty=1.0, coverage_penalty=0.5)
    assert main(["translate", str(checkpoint), "--beam", "3", "--json", *SENTENCES]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    want = task.translate(bahdanau, SENTENCES, beam=3, nbest=1, return_attention=True)
    assert [r["scores"][0] for r in records] == [round(t.hypotheses[0].score, 6) for t in want]
    argv = ["translate", str(checkpoint), "--beam", "3", "--json", "--coverage-penalty", "0"]
    assert main([*argv, "--length-penalty", "0.6", *SENTENCES]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    plain = prepared.translate(bahdanau, SENTENCES, beam=3, return_attention=True)
    assert [r["scores"][0] for r in records] == [round(t.hypotheses[0].score, 6) for t in plain]

    src, ref = tmp_path / "t.de", tmp_path / "t.en"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    ref.write_text("the dog runs.\na child and a cat.\ntwo men sit.\n", encoding="utf-8")
    argv = ["evaluate", str(checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "3"]
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["length_penalty"] == 1.0 and got["coverage_penalty"] == 0.5
    assert main([*argv, "--json", "--coverage-penalty", "-1"]) == 2
    assert "--coverage-penalty must be finite and >= 0, got -1.0" in capsys.readouterr().err
    assert main(["translate", str(checkpoint), "--length-penalty", "nan", "x"]) == 2
    assert "--length-penalty must be finite and >= 0, got nan" in capsys.readouterr().err
    assert main(["translate", str(checkpoint), "--max-len-a", "0", "--max-len-b", "0", "x"]) == 2
    assert "allows no output" in capsys.readouterr().err


def test_translation_config_default_is_off():
    assert TranslationConfig().coverage_penalty == 0.0
