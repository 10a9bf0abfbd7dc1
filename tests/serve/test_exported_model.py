"""``seqlab translate|evaluate RUN --exported DIR``: a run decoded through the files
``seqlab export`` wrote (seqlab.serve.exported_model). For a Transformer and an RNN run,
in both formats: the translations equal the checkpoint's, and ``evaluate`` gives the same
BLEU and chrF and the loss to float rounding (its teacher-forced logits step through the
exported step); files of another run, flags it cannot honour, and other tasks are
refused in one line."""

from __future__ import annotations

import json

import pytest

from seqlab import api
from seqlab.cli.main import main
from seqlab.errors import SeqlabError
from seqlab.serve.export import export
from seqlab.serve.exported_model import use_exported
from tests.serve.test_api import SENTENCES


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


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_a_pointer_generator_run_through_its_export_equals_the_checkpoint(
    fmt, pointer_generator_dir, tmp_path, capsys
):
    """The task's loss, p_gen statistics, copies and <unk> rule read the exported files
    (seqlab.serve.exported_pointer) as they read the model."""
    run = str(pointer_generator_dir)
    assert main(["export", run, "--format", fmt, "--out", str(tmp_path / "x")]) == 0
    capsys.readouterr()
    assert main(["evaluate", run, "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["evaluate", run, "--json", "--exported", str(tmp_path / "x")]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert alone["oov_copy"] > 50  # the run copies names: a real comparison
    for key in ("bleu_lc", "chrf", "oov_copy", "oov_copyable", "repeat_trigram", "unk"):
        assert exported[key] == alone[key], key
    assert exported["loss"] == pytest.approx(alone["loss"], abs=1e-4)
    assert exported["p_gen"] == pytest.approx(alone["p_gen"], abs=1e-5)
    names = ["Ein Mann namens Zorb läuft .", "Ein Hund namens Quix sitzt ."]
    assert main(["translate", run, "--beam", "3", *names]) == 0
    want = capsys.readouterr().out
    assert main(["translate", run, "--beam", "3", "--exported", str(tmp_path / "x"), *names]) == 0
    assert capsys.readouterr().out == want and len(want.splitlines()) == len(names)


def test_what_the_exported_files_cannot_do_is_refused(
    translation_dir, luong_dir, pointer_generator_model, lm_model, classify_model, tmp_path,
    capsys,
):  # fmt: skip
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
    with pytest.raises(SeqlabError, match="pointer-generator and language-model runs"):
        use_exported(classify_model, tmp_path / "luong")
    for other in (pointer_generator_model, lm_model):
        with pytest.raises(SeqlabError, match="a 'luong' model"):
            use_exported(other, tmp_path / "luong")


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


def test_serve_answers_a_pointer_generator_through_its_export(pointer_generator_model, tmp_path):
    """p_gen, the copies and the attention per output word come from the exported files
    as from the checkpoint."""
    from fastapi.testclient import TestClient

    from seqlab.serve.app import Limits, create_app

    export(pointer_generator_model, tmp_path / "x", fmt="onnx")
    via = use_exported(pointer_generator_model, tmp_path / "x")
    body = {"text": ["Ein Mann namens Zyxwq läuft.", "Eine Frau namens Boa schläft."],
            "beam": 2, "attention": True}  # fmt: skip
    answers = []
    for loaded in (pointer_generator_model, via):
        with TestClient(create_app(loaded, Limits(max_beam=4))) as client:
            r = client.post("/translate", json=body)
        assert r.status_code == 200
        answers.append(r.json()["translations"])
    want, got = answers
    assert "zyxwq" in want[0]["hypotheses"][0].split()  # a copied name (lower-cased data)
    assert any(want[0]["copied"]) and "p_gen" in want[0]
    for w, g in zip(want, got):
        assert g["hypotheses"] == w["hypotheses"]
        assert set(g) == set(w)
        for key in set(w) - {"hypotheses"}:
            assert json.dumps(g[key]) == json.dumps(w[key]) or _close(g[key], w[key]), key


def _close(a, b, tol=1e-5):
    """Nested lists / dicts of numbers equal to ``tol`` (strings exactly)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float):
        return abs(a - b) <= tol
    return a == b


def test_inspect_trace_reads_copies_and_coverage_from_the_exported_files(
    pointer_generator_dir, tmp_path, capsys
):
    import numpy as np

    run = str(pointer_generator_dir)
    assert main(["export", run, "--out", str(tmp_path / "x")]) == 0
    arrays = []
    for name, extra in (("eager", []), ("exported", ["--exported", str(tmp_path / "x")])):
        out = tmp_path / name
        assert main(["inspect", "trace", run, "Ein Mann namens Zyxwq läuft.", "--out",
                     str(out), *extra]) == 0  # fmt: skip
        arrays.append(np.load(out / "trace-0.npz"))
    capsys.readouterr()
    eager, exported = arrays
    for key in ("attention", "p_gen", "coverage", "cov_loss"):
        np.testing.assert_allclose(exported[key], eager[key], atol=1e-5, rtol=0)
    assert float(eager["p_gen"].min()) < 0.5  # the name is copied: a real switch
