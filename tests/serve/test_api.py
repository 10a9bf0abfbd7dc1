"""The JSON API in process: every endpoint of every servable task, answers equal to the
CLI's for the same inputs (one decode path, micro-batched or not), and every kind of bad
input answered 4xx with a JSON message naming the field — never a 500."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlab.cli.main import build_parser, main
from seqlab.errors import SeqlabError
from seqlab.serve import Limits, create_app
from seqlab.serve.app import endpoint_of

SENTENCES = ["der hund läuft.", "ein kind und eine katze.", "die frau schläft.", "ein mann."]


def _client(loaded, **limits):
    return TestClient(create_app(loaded, Limits(**limits)))


@pytest.fixture(scope="module")
def mt(translation_model):
    with _client(translation_model, max_chars=80, max_texts=4, max_beam=4) as client:
        yield client


def _cli_json(capsys, *argv):
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# ----------------------------------------------------------------- health, info, page


def test_health_info_and_page(mt, translation_model):
    assert mt.get("/health").json() == {
        "status": "ok",
        "task": "translation",
        "model": "transformer",
    }
    info = mt.get("/info").json()
    assert info["task"] == "translation" and info["endpoint"] == "POST /translate"
    assert info["model"] == "transformer" and info["step"] == translation_model.step
    assert info["vocab_sizes"] == {"src_vocab": 60, "tgt_vocab": 60}
    assert info["precision"] == {"inference": "float32", "trained": "fp32"}
    n = sum(p.numel() for p in translation_model.model.parameters())
    assert info["parameters"] == n
    assert info["config"]["model"]["d_model"] == 32
    assert info["limits"]["max_chars"] == 80 and info["limits"]["max_beam"] == 4
    # absolute data paths are cut to file names: the page never shows the server's disk
    paths = [v for v in info["config"]["task"].values() if isinstance(v, str) and "." in v]
    assert "train.de" in paths and not any(v.startswith("/") for v in paths)
    page = mt.get("/")
    assert page.status_code == 200 and 'id="heatmap"' in page.text
    assert "attention" in mt.get("/static/app.js").text


# ----------------------------------------------------------------- same answers as the CLI


def test_translate_equals_the_cli(mt, translation_dir, capsys):
    cli = _cli_json(capsys, "translate", translation_dir, "--json", "--beam", 3, "--nbest", 2,
                    *SENTENCES)  # fmt: skip
    body = {"text": SENTENCES, "beam": 3, "nbest": 2, "attention": True}
    r = mt.post("/translate", json=body)
    assert r.status_code == 200
    assert r.json()["translations"] == cli  # text, scores, pieces and attention, all equal
    one = mt.post("/translate", json={"text": SENTENCES[1], "beam": 3, "nbest": 2}).json()
    (record,) = one["translations"]
    assert record["hypotheses"] == cli[1]["hypotheses"] and record["attention"] is None
    assert record["scores"] == pytest.approx(cli[1]["scores"], abs=1e-5)
    cross = cli[0]["attention"]["cross"]  # (L, H, T, S): one layer, four heads
    assert (len(cross), len(cross[0])) == (1, 4)
    assert len(cross[0][0]) == len(cli[0]["target_pieces"])
    assert len(cross[0][0][0]) == len(cli[0]["source_pieces"])


def test_concurrent_requests_are_micro_batched_and_answer_as_alone(translation_model, capsys):
    """Requests arriving together share one decode call; each answer equals its own
    CLI translation."""
    app = create_app(translation_model, Limits(batch_wait_ms=2000, batch_texts=len(SENTENCES)))

    async def post_all():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                replies = await asyncio.gather(
                    *(client.post("/translate", json={"text": s, "beam": 2}) for s in SENTENCES)
                )
                info = (await client.get("/info")).json()
        return replies, info

    replies, info = asyncio.run(post_all())
    assert [r.status_code for r in replies] == [200] * len(SENTENCES)
    served = [r.json()["translations"][0]["hypotheses"][0] for r in replies]
    capsys.readouterr()
    assert main(["translate", str(translation_model.checkpoint), "--beam", "2", *SENTENCES]) == 0
    assert served == capsys.readouterr().out.splitlines()
    assert info["batching"]["requests"] == len(SENTENCES)
    assert info["batching"]["decode_calls"] == 1  # all four in one call


def test_generate_equals_the_cli(lm_model, lm_dir, capsys):
    with _client(lm_model, max_new_tokens=40) as client:
        for prompt in ("to be", None):
            body = {"prompt": prompt, "max_tokens": 30, "temperature": 0.8, "top_k": 5, "seed": 3}
            r = client.post("/generate", json=body)
            assert r.status_code == 200
            argv = ["generate", str(lm_dir), "--max-tokens", "30", "--temperature", "0.8"]
            argv += ["--top-k", "5", "--seed", "3"] + (["--prompt", prompt] if prompt else [])
            capsys.readouterr()
            assert main(argv) == 0
            out = r.json()
            assert out["text"] + "\n" == capsys.readouterr().out
            assert out["prompt"] == prompt and len(out["continuation"]) == 30  # characters
            again = client.post("/generate", json={**body, "seed": 4}).json()["continuation"]
            assert client.post("/generate", json=body).json() == out  # seeded
            assert again != out["continuation"]
        r = client.post("/generate", json={"prompt": "to be", "max_tokens": 41})
        assert r.status_code == 422 and r.json()["field"] == "max_tokens"
        r = client.post("/generate", json={"prompt": "zebra ¿"})  # characters never seen
        assert r.status_code == 422 and r.json()["field"] == "prompt"
        assert "never saw" in r.json()["error"]
        assert client.post("/translate", json={"text": "x"}).status_code == 404


@pytest.mark.parametrize("task", ["classify", "tag"])
def test_predict_equals_the_cli(task, request, capsys):
    loaded, run = request.getfixturevalue(f"{task}_model"), request.getfixturevalue(f"{task}_dir")
    texts = {
        "classify": ["a great and wonderful film", "dull, awful and slow"],
        "tag": ["John met Anna Smith in Paris today.", "Reuters said Siemens visited Rome"],
    }[task]
    cli = _cli_json(capsys, "predict", run, "--json", *texts)
    with _client(loaded) as client:
        r = client.post("/predict", json={"text": texts})
        assert r.status_code == 200 and r.json()["predictions"] == cli
        single = client.post("/predict", json={"text": texts[0]}).json()["predictions"]
        assert single == cli[:1]
        info = client.get("/info").json()
        assert info["task"] == task and info["endpoint"] == "POST /predict"
        for other in ("translate", "generate"):
            r = client.post(f"/{other}", json={"text": "x"})
            assert r.status_code == 404 and "POST /predict" in r.json()["error"]
    if task == "tag":
        assert [e["text"] for e in cli[0]["entities"]] == ["John", "Anna Smith", "Paris"]
    else:
        assert [p["label"] for p in cli] == ["pos", "neg"]


# ----------------------------------------------------------------- bad input

BAD = [
    # (raw body, status, field, words the message must contain)
    ('{"text": ', 400, "body", "malformed JSON"),
    ("[1, 2]", 422, "body", "JSON object"),
    ("null", 422, "body", "JSON object"),
    ("{}", 422, "text", "required"),
    ('{"text": 5}', 422, "text", "string or a list of strings"),
    ('{"text": [1]}', 422, "text", "string or a list of strings"),
    ('{"text": ""}', 422, "text", "empty"),
    ('{"text": "   "}', 422, "text", "empty"),
    ('{"text": []}', 422, "text", "empty list"),
    ('{"text": ["ein hund.", " "]}', 422, "text", "item 1 is empty"),
    ('{"text": "' + "x" * 81 + '"}', 422, "text", "81 characters, more than the limit of 80"),
    ('{"text": ["a", "b", "c", "d", "e"]}', 422, "text", "5 texts, more than the limit of 4"),
    ('{"text": "a", "beam": "5"}', 422, "beam", "valid integer"),
    ('{"text": "a", "beam": 2.5}', 422, "beam", "integer"),
    ('{"text": "a", "beam": 0}', 422, "beam", "greater than or equal to 1"),
    ('{"text": "a", "beam": 5}', 422, "beam", "less than or equal to 4"),
    ('{"text": "a", "beam": 2, "nbest": 3}', 422, "nbest", "need nbest <= beam"),
    ('{"text": "a", "attention": 1}', 422, "attention", "boolean"),
    ('{"text": "a", "length_penalty": -1}', 422, "length_penalty", "greater than"),
    ('{"text": "a", "length_penalty": NaN}', 422, "length_penalty", "finite number"),
    ('{"text": "a", "length_penalty": Infinity}', 422, "length_penalty", "finite number"),
    ('{"text": "a", "coverage_penalty": -0.5}', 422, "coverage_penalty", "greater than"),
    ('{"text": "a", "coverage_penalty": NaN}', 422, "coverage_penalty", "finite number"),
    # the test server's model is a Transformer: no attention sums for GNMT's cp to read
    (
        '{"text": "a", "beam": 2, "coverage_penalty": 0.2}',
        422,
        "coverage_penalty",
        "set the coverage penalty to 0",
    ),
    ('{"text": "a", "checkpoint": "/etc/passwd"}', 422, "checkpoint", "not a field"),
    ('{"text": "a", "model_path": "runs/x"}', 422, "model_path", "not a field"),
]


@pytest.mark.parametrize(("body", "status", "field", "words"), BAD)
def test_bad_input_is_4xx_json_naming_the_field(mt, body, status, field, words):
    r = mt.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    data = r.json()
    assert data["field"] == field
    assert data["error"].startswith(f"{field}: ") and words in data["error"], data["error"]


def test_other_bad_requests(mt, translation_model):
    r = mt.post("/translate", content=b'{"text": "a"}')  # no Content-Type
    assert r.status_code == 422 and "application/json" in r.json()["error"]
    r = mt.post("/translate", content=b"\xff\xfe", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body"
    with _client(translation_model, max_body_bytes=100) as small:
        r = small.post("/translate", json={"text": "ein hund " * 20})
        assert r.status_code == 413 and "100 bytes" in r.json()["error"]

        def chunks():  # no Content-Length: counted as it streams
            yield b'{"text": "'
            yield b"x" * 200
            yield b'"}'

        r = small.post("/translate", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
    r = mt.get("/nope")
    assert r.status_code == 404 and "GET /info" in r.json()["error"]
    r = mt.get("/translate")
    assert r.status_code == 405 and r.json()["error"] == "GET is not allowed on /translate"


def test_timeout_is_a_503_json(translation_model):
    with _client(translation_model, timeout_s=1e-9) as client:
        r = client.post("/translate", json={"text": "der hund."})
        assert r.status_code == 503 and "timed out" in r.json()["error"]
        assert client.get("/health").status_code == 200  # the server goes on


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
KEYS = st.sampled_from(
    ["text", "beam", "nbest", "length_penalty", "coverage_penalty", "attention", "path"]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.dictionaries(KEYS, JSON, max_size=4) | JSON)
def test_no_body_gives_a_500(mt, body):
    r = mt.post("/translate", json=body)
    assert r.status_code in (200, 400, 413, 422), r.text
    if r.status_code != 200:
        assert set(r.json()) == {"error", "field"} and r.json()["error"]


# ----------------------------------------------------------------- CLI and refusals


def test_serve_binds_loopback_by_default_and_refuses_other_tasks():
    args = build_parser().parse_args(["serve", "runs/x"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    assert endpoint_of("lm") == "generate"
    with pytest.raises(SeqlabError, match="'algorithmic' checkpoint cannot be served"):
        endpoint_of("algorithmic")


def test_serve_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("seqlab: error: ")
    assert main(["serve", str(tmp_path), "--timeout", "0"]) == 2
    assert "timeout_s > 0" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--precision", "fp16"]) == 2  # before any loading
    assert "precision=fp16 is not supported on CPU" in capsys.readouterr().err


def test_create_app_refuses_a_precision_it_cannot_run(translation_model):
    with pytest.raises(SeqlabError, match="precision must be one of"):
        create_app(translation_model, Limits(), precision="bf17")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_requests_decode_under_the_servers_precision(translation_model, monkeypatch, precision):
    task = translation_model.task
    seen = []

    def spy(*args, **kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return original(*args, **kwargs)

    original = task.translate_detailed
    monkeypatch.setattr(task, "translate_detailed", spy)
    with TestClient(create_app(translation_model, Limits(), precision=precision)) as client:
        info = client.get("/info").json()["precision"]["inference"]
        r = client.post("/translate", json={"text": SENTENCES[:2], "beam": 2})
    assert r.status_code == 200 and len(r.json()["translations"]) == 2
    if precision == "fp32":
        assert info == "float32" and seen == [(False, seen[0][1])]
    else:  # the decode thread ran under bf16 autocast; the weights stay float32
        assert info == "bf16 autocast (float32 weights)" and seen == [(True, torch.bfloat16)]


def test_requests_decode_in_int8_under_precision_int8(translation_model, monkeypatch, capsys):
    from seqlab.nn.int8_linear import int8_requested

    task = translation_model.task
    seen = []

    def spy(*args, **kwargs):
        seen.append((int8_requested(), torch.is_autocast_enabled("cpu")))
        return original(*args, **kwargs)

    original = task.translate_detailed
    monkeypatch.setattr(task, "translate_detailed", spy)
    with TestClient(create_app(translation_model, Limits(), precision="int8")) as client:
        info = client.get("/info").json()["precision"]["inference"]
        r = client.post("/translate", json={"text": SENTENCES[:2], "beam": 2})
    assert r.status_code == 200 and len(r.json()["translations"]) == 2
    assert info == "int8 linear layers while decoding (float32 weights)"
    assert seen == [(True, False)]  # the decode thread asked for int8, without autocast
    assert main(["serve", "missing-run", "--precision", "int8", "--compile"]) == 2
    assert "--compile cannot decode in int8" in capsys.readouterr().err


def test_int8_is_refused_where_no_search_decodes(classify_model):
    with pytest.raises(SeqlabError, match="served at /predict without one: use"):
        create_app(classify_model, Limits(), precision="int8")


def test_generate_in_int8_equals_the_cli(lm_model, lm_dir, capsys):
    body = {"prompt": "to be", "max_tokens": 30, "temperature": 0.8, "top_k": 5, "seed": 3}
    with TestClient(create_app(lm_model, Limits(), precision="int8")) as client:
        r = client.post("/generate", json=body)
    assert r.status_code == 200
    argv = ["generate", str(lm_dir), "--max-tokens", "30", "--temperature", "0.8"]
    argv += ["--top-k", "5", "--seed", "3", "--prompt", "to be", "--precision", "int8"]
    capsys.readouterr()
    assert main(argv) == 0
    assert r.json()["text"] + "\n" == capsys.readouterr().out
