"""``seqlab export`` of a recurrent language model (seqlab.serve.export_lm): one graph
(x, h[, c]) -> (logits, h_out[, c_out]) with B and T dynamic. The files equal the eager
model at other batch sizes and chunk lengths than traced (RNN, GRU, 2-layer LSTM; both
formats), with the state carried between calls; ``generate``, ``score`` and ``evaluate``
through them give the checkpoint's text and numbers; ``check --exported`` passes on the
run's own files and fails on other weights. The Transformer LM's cache graph equals the
eager model at other B, T and cache lengths and through its sliding window; the NPLM's
and the pointer sentinel LM's graphs (their state's tensors by name) at other B and T."""

from __future__ import annotations

import json

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.errors import SeqlabError
from seqlab.serve.export import export, export_model, load_exported
from seqlab.serve.export_lm import load_exported_lm, read_meta
from tests.eval.test_lm_invariants import build
from tests.serve import runs

FORMATS = ["torchscript", "onnx"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", ["rnn_lm/rnn", "rnn_lm/gru", "rnn_lm/lstm"])
def test_the_exported_graph_equals_the_model_at_other_shapes(key, fmt, tmp_path):
    model = build(key)  # 2 layers, vocabulary 30
    export_model(model, "rnn_lm", tmp_path / "x", fmt, task="lm")
    meta = read_meta(tmp_path / "x")
    assert meta["task"] == "lm" and meta["lm"]["layers"] == 2
    ext = {"torchscript": ".pt", "onnx": ".onnx"}[fmt]
    files = sorted(p.name for p in (tmp_path / "x").iterdir())
    assert files == ["export.json", f"lm{ext}", f"lm_step{ext}"]
    lm = load_exported_lm(tmp_path / "x", meta)
    x = torch.randint(4, 30, (5, 11), generator=torch.Generator().manual_seed(2))  # traced 2 × 3
    with torch.no_grad():
        first = model(x[:, :4], None)
        want = torch.cat([first.logits, model(x[:, 4:], first.state).logits], 1)  # (5, 11, V)
        a = lm(x[:, :4], None)
        b = lm(x[:, 4:], a.state)
        got = torch.cat([a.logits, b.logits], 1)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=0)
        end = model(x, None).state
        torch.testing.assert_close(b.state.h, end.h, atol=2e-5, rtol=0)
        if key.endswith("lstm"):
            torch.testing.assert_close(b.state.c, end.c, atol=2e-5, rtol=0)
        else:
            assert b.state.c is None
        state, steps = lm.init_state(5), []
        for t in range(x.size(1)):  # one token per call, as generate feeds it
            logits, state = lm.step(x[:, t], state)
            steps.append(logits)
        torch.testing.assert_close(torch.stack(steps, 1), want, atol=2e-5, rtol=0)
        assert lm.run_step is not None  # the step graph, not the chunk graph at T = 1
        state, one = lm.init_state(5), []
        for t in range(x.size(1)):  # the chunk graph at T = 1 computes the same
            out = lm(x[:, t : t + 1], state)
            state = out.state
            one.append(out.logits)
        torch.testing.assert_close(torch.cat(one, 1), want, atol=2e-5, rtol=0)
    assert not model.training  # export leaves the model in its mode


@pytest.fixture(scope="module")
def lstm_lm_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lstm_lm")
    return runs.keeping_threads(runs.lm_run, root, cell="lstm", layers=2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_generate_score_evaluate_and_check_through_the_export(fmt, lstm_lm_dir, tmp_path, capsys):
    run, via = str(lstm_lm_dir), ["--exported", str(tmp_path / "x")]
    assert main(["export", run, "--format", fmt, "--out", str(tmp_path / "x")]) == 0
    capsys.readouterr()
    sample = ["generate", run, "--prompt", "the ", "--max-tokens", "80", "--seed", "5"]
    assert main(sample) == 0
    want = capsys.readouterr().out
    assert main([*sample, *via]) == 0
    assert capsys.readouterr().out == want and len(want) > 80
    outputs = []
    for extra in ([], via):
        assert main(["score", run, "the cat sat", "--json", *extra]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
        assert main(["evaluate", run, "--json", *extra]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    score, ev, score_x, ev_x = outputs
    assert score_x["log_prob"] == pytest.approx(score["log_prob"], abs=1e-4)
    assert [t["token"] for t in score_x["tokens"]] == [t["token"] for t in score["tokens"]]
    assert ev_x["loss"] == pytest.approx(ev["loss"], abs=1e-5)
    code = main(["check", run, "--exported", str(tmp_path / "x"), "--json", "--sentences", "4",
                 "--length", "24", "--dtype", "float32"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"], out
    names = [c["name"] for c in out["checks"]][-2:]
    assert names == ["eager == exported (carried state)", "eager == exported (step)"]
    assert all(c["max_diff"] < 1e-4 for c in out["checks"][-2:])
    assert out["exported"]["step"] == api.load(run).step


def test_an_lm_export_of_other_weights_fails_the_check(lm_dir, tmp_path, capsys):
    other = api.load(lm_dir)
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    export(other, tmp_path / "stale")
    assert main(["check", str(lm_dir), "--exported", str(tmp_path / "stale"), "--json",
                 "--sentences", "2", "--length", "16"]) == 1  # fmt: skip
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert not checks["eager == exported (carried state)"]["passed"]
    assert not checks["eager == exported (step)"]["passed"]
    assert checks["cached == full forward"]["passed"]  # the checkpoint itself is fine


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_exported_transformer_lm_equals_the_model(fmt, tmp_path):
    model = build("transformer_lm")  # 2 layers, context 32; traced at B 2, T 3, t 2
    export_model(model, "transformer_lm", tmp_path / "x", fmt, task="lm")
    lm = load_exported_lm(tmp_path / "x", read_meta(tmp_path / "x"))
    x = torch.randint(4, 30, (5, 11), generator=torch.Generator().manual_seed(2))
    tol = {"atol": 2e-5, "rtol": 0}
    with torch.no_grad():
        torch.testing.assert_close(lm(x, None).logits, model(x, None).logits, **tol)
        assert lm(x, None).state is None  # as the eager model: no state asked, none given
        e1 = model(x[:, :4], model.init_state(5))
        e2 = model(x[:, 4:], e1.state)
        g1 = lm(x[:, :4], lm.init_state(5))
        g2 = lm(x[:, 4:], g1.state)  # t = 4 cached, T = 7 new
        torch.testing.assert_close(g2.logits, e2.logits, **tol)
        for a, b in zip(g2.state.layers, e2.state.layers):
            torch.testing.assert_close(a.k, b.k, **tol)
        y = torch.randint(4, 30, (3, 45), generator=torch.Generator().manual_seed(3))
        eager, exported = None, None
        for t in range(45):  # past the context of 32: the sliding window re-encodes
            want, eager = model.step(y[:, t], eager)
            got, exported = lm.step(y[:, t], exported)
            torch.testing.assert_close(got, want, **tol)
        assert exported.length == eager.length <= 32  # the window slid (45 tokens read)
        with pytest.raises(ValueError, match="exceed the context of 32"):
            lm(torch.ones(1, 33, dtype=torch.long), lm.init_state(1))


@pytest.fixture(scope="module")
def transformer_lm_dir(tmp_path_factory):
    model = {"name": "transformer_lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "layers": 2,
             "context": 24, "dropout": 0.0}  # fmt: skip
    return runs.keeping_threads(runs.lm_run, tmp_path_factory.mktemp("tlm"), model=model)


@pytest.fixture(scope="module")
def nplm_dir(tmp_path_factory):
    model = {"name": "nplm", "n": 4, "m": 8, "h": 16}
    return runs.keeping_threads(runs.lm_run, tmp_path_factory.mktemp("nplm"), model=model)


@pytest.fixture(scope="module")
def pointer_sentinel_dir(tmp_path_factory):
    model = {"name": "pointer_sentinel", "emb_dim": 8, "hidden": 16, "layers": 1, "window": 6,
             "dropout": 0.0}  # fmt: skip
    return runs.keeping_threads(runs.lm_run, tmp_path_factory.mktemp("ps"), model=model)


@pytest.mark.parametrize("which", ["transformer_lm_dir", "nplm_dir", "pointer_sentinel_dir"])
def test_generate_score_and_check_a_windowed_lm_through_its_export(
    which, request, tmp_path, capsys
):
    run, via = str(request.getfixturevalue(which)), ["--exported", str(tmp_path / "x")]
    assert main(["export", run, "--format", "onnx", "--out", str(tmp_path / "x")]) == 0
    capsys.readouterr()
    sample = ["generate", run, "--prompt", "the ", "--max-tokens", "60", "--seed", "2"]
    assert main(sample) == 0  # Transformer: 60 > the context of 24, the window slides
    want = capsys.readouterr().out
    assert main([*sample, *via]) == 0
    assert capsys.readouterr().out == want
    scores = []
    for extra in ([], via):
        assert main(["score", run, "the cat sat", "--json", *extra]) == 0
        scores.append(json.loads(capsys.readouterr().out)["log_prob"])
    assert scores[1] == pytest.approx(scores[0], abs=1e-4)
    code = main(["check", run, *via, "--json", "--sentences", "3", "--length", "20",
                 "--dtype", "float32"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"] and out["checks"][-1]["name"] == "eager == exported (step)"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", ["nplm", "pointer_sentinel"])
def test_the_exported_fields_lm_equals_the_model(key, fmt, tmp_path):
    # nplm: n = 4, a window of 3 ids; pointer_sentinel: an LSTM and a window of 5 outputs
    model = build(key)  # traced at B 2, T 3
    export_model(model, key, tmp_path / "x", fmt, task="lm")
    lm = load_exported_lm(tmp_path / "x", read_meta(tmp_path / "x"))
    x = torch.randint(4, 30, (5, 11), generator=torch.Generator().manual_seed(2))
    tol = {"atol": 2e-5, "rtol": 0}
    with torch.no_grad():
        first = model(x[:, :4], None)
        second = model(x[:, 4:], first.state)
        want = torch.cat([first.logits, second.logits], 1)
        a = lm(x[:, :4], None)
        b = lm(x[:, 4:], a.state)
        torch.testing.assert_close(torch.cat([a.logits, b.logits], 1), want, **tol)
        for name in second.extras:  # the pointer sentinel's gate g and pointer a_i
            torch.testing.assert_close(b.extras[name], second.extras[name], **tol)
        for f in lm.names:  # the state after, field by field
            torch.testing.assert_close(getattr(b.state, f), getattr(second.state, f), **tol)
        state, steps = lm.init_state(5), []
        for t in range(x.size(1)):
            logits, state = lm.step(x[:, t], state)
            steps.append(logits)
        torch.testing.assert_close(torch.stack(steps, 1), want, **tol)


def test_an_lm_without_an_export_is_refused(tmp_path):
    with pytest.raises(SeqlabError, match="'lm_x' language model has no export"):
        export_model(build("nplm"), "lm_x", tmp_path / "x", task="lm")
    assert not (tmp_path / "x").exists()  # nothing written


def test_an_lm_folder_is_not_an_encoder_decoder(lm_model, tmp_path):
    export(lm_model, tmp_path / "x")
    with pytest.raises(SeqlabError, match="language model's export"):
        load_exported(tmp_path / "x")


def test_serve_generates_through_the_exported_lm(lstm_lm_dir, tmp_path):
    from fastapi.testclient import TestClient

    from seqlab.serve.app import Limits, create_app
    from seqlab.serve.exported_model import use_exported

    loaded = api.load(lstm_lm_dir)
    export(loaded, tmp_path / "x", fmt="onnx")
    body = {"prompt": "the ", "max_tokens": 40, "seed": 9, "temperature": 0.8}
    texts = []
    for which in (loaded, use_exported(loaded, tmp_path / "x")):
        with TestClient(create_app(which, Limits())) as client:
            r = client.post("/generate", json=body)
        assert r.status_code == 200
        texts.append(r.json()["text"])
    assert texts[0] == texts[1] and len(texts[0]) > 40


def test_inspect_trace_reads_the_gate_from_the_exported_files(
    pointer_sentinel_dir, tmp_path, capsys
):
    import numpy as np

    run = str(pointer_sentinel_dir)
    assert main(["export", run, "--format", "onnx", "--out", str(tmp_path / "x")]) == 0
    arrays = []
    for name, extra in (("eager", []), ("exported", ["--exported", str(tmp_path / "x")])):
        out = tmp_path / name
        assert main(["inspect", "trace", run, "the cat sat", "--out", str(out), *extra]) == 0
        arrays.append(np.load(out / "trace-0.npz"))
    capsys.readouterr()
    eager, exported = arrays
    assert set(eager.files) >= {"gate", "pointer", "log_p"}
    for key in ("gate", "pointer", "log_p"):
        np.testing.assert_allclose(exported[key], eager[key], atol=1e-5, rtol=0)
    assert float(eager["gate"].min()) > 0.0 and float(eager["gate"].max()) < 1.0  # a real gate
