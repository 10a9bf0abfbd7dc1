"""``seqlab translate|evaluate RUN --exported DIR``: a run decoded through the files
``seqlab export`` wrote (seqlab.serve.exported_model). For a Transformer and an RNN run,
in both formats: the translations equal the checkpoint's, and ``evaluate`` gives the same
BLEU and chrF and the loss to float rounding (its teacher-forced logits step through the
exported step); files of another run, flags it cannot honour, and other tasks are
refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.errors import SeqlabError
from seqlab.serve.export import export
from seqlab.serve.exported_model import use_exported
from tests.serve import runs
from tests.serve.test_api import SENTENCES


@pytest.fixture(scope="module")
def luong_dir(tmp_path_factory):
    before = torch.get_num_threads()
    try:
        return runs.rnn_translation_run(tmp_path_factory.mktemp("luong"), "luong")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("which", ["transformer", "luong"])
def test_evaluate_and_translate_through_the_export_equal_the_checkpoint(
    which, fmt, translation_dir, luong_dir, tmp_path, capsys
):
    run = str(translation_dir if which == "transformer" else luong_dir)
    assert main(["export", run, "--format", fmt, "--out", str(tmp_path / "x")]) == 0
    capsys.readouterr()
    via = ["--exported", str(tmp_path / "x")]
    assert main(["evaluate", run, "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["evaluate", run, "--json", *via]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["bleu"] == alone["bleu"] and exported["chrf"] == alone["chrf"]
    assert exported["loss"] == pytest.approx(alone["loss"], abs=1e-4)
    assert main(["translate", run, "--beam", "3", *SENTENCES]) == 0
    want = capsys.readouterr().out
    assert main(["translate", run, "--beam", "3", *via, *SENTENCES]) == 0
    assert capsys.readouterr().out == want and len(want.splitlines()) == len(SENTENCES)


def test_what_the_exported_files_cannot_do_is_refused(
    translation_dir, luong_dir, pointer_generator_model, tmp_path, capsys
):
    export(api.load(luong_dir), tmp_path / "luong")
    run = str(translation_dir)
    assert main(["translate", run, "--exported", str(tmp_path / "luong"), "hallo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a 'luong' model" in err[0] and "this run is a 'transformer'" in err[0]
    for flags in (["--ensemble", run], ["--precision", "bf16"]):
        assert main(["translate", run, "--exported", str(tmp_path / "luong"), *flags, "x"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"drop {flags[0]}" in err[0]
    assert main(["translate", run, "--exported", str(tmp_path / "none"), "x"]) == 2
    assert "no export.json there" in capsys.readouterr().err
    with pytest.raises(SeqlabError, match="--exported decodes translation runs"):
        use_exported(pointer_generator_model, tmp_path / "luong")


def test_serve_answers_through_the_exported_files(translation_model, tmp_path):
    from fastapi.testclient import TestClient

    from seqlab.serve.app import Limits, create_app

    export(translation_model, tmp_path / "x")  # TorchScript: serve reads either format alike
    via = use_exported(translation_model, tmp_path / "x")
    want = translation_model.translate(SENTENCES[:2], beam=5)
    with TestClient(create_app(via, Limits())) as client:
        r = client.post("/translate", json={"text": SENTENCES[:2]})
    assert r.status_code == 200
    assert [x["hypotheses"][0] for x in r.json()["translations"]] == want
