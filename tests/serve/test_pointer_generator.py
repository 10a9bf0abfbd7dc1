"""``seqlab serve`` on a pointer-generator (copy_translation) run: POST /translate answers as
``seqlab translate --json`` does, with the copy switch p_gen and the copied words per output
row beside the attention; a name outside the target vocabulary comes back copied; an n-best
list is the search's n best."""

from __future__ import annotations

import json

import pytest
import torch
from fastapi.testclient import TestClient

from seqlab.cli.main import main
from seqlab.serve import Limits, create_app

NAMED = ["Ein Mann namens Zyxwq läuft.", "Eine Frau namens Boa schläft."]


@pytest.fixture(scope="module")
def pg(pointer_generator_model):
    with TestClient(create_app(pointer_generator_model, Limits(max_beam=4))) as client:
        yield client


def test_health_and_info_name_the_task(pg, pointer_generator_model):
    assert pg.get("/health").json()["task"] == "copy_translation"
    info = pg.get("/info").json()
    assert info["endpoint"] == "POST /translate" and info["model"] == "pointer_generator"
    assert info["step"] == pointer_generator_model.step
    assert pg.post("/generate", json={}).status_code == 404  # another task's endpoint


def test_translate_equals_the_cli_with_p_gen_and_copies(pg, pointer_generator_dir, capsys):
    capsys.readouterr()
    assert main(["translate", str(pointer_generator_dir), "--json", "--beam", "2", *NAMED]) == 0
    cli = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    r = pg.post("/translate", json={"text": NAMED, "beam": 2, "attention": True})
    assert r.status_code == 200
    records = r.json()["translations"]
    assert records == cli  # text, score, pieces, attention, p_gen and copies, all equal
    first = records[0]
    assert "zyxwq" in first["hypotheses"][0].split()  # a name never seen, copied
    rows, cols = first["target_pieces"], first["source_pieces"]
    attention = torch.tensor(first["attention"]["cross"])  # (T, S)
    assert attention.shape == (len(rows), len(cols)) and cols[-1] == rows[-1] == "</s>"
    assert torch.allclose(attention.sum(-1), torch.ones(len(rows)), atol=1e-3)
    assert len(first["p_gen"]) == len(rows) and all(0.0 <= p <= 1.0 for p in first["p_gen"])
    # copied: exactly the rows whose word is outside the 13-word target vocabulary
    assert [w for w, c in zip(rows, first["copied"]) if c] == ["zyxwq"]
    at = rows.index("zyxwq")  # copying it: the switch is low and attention is on the name
    assert first["p_gen"][at] < 0.5 and cols[int(attention[at].argmax())] == "zyxwq"
    plain = pg.post("/translate", json={"text": NAMED[1], "beam": 2}).json()["translations"][0]
    assert plain["hypotheses"] == cli[1]["hypotheses"] and plain["attention"] is None
    assert "p_gen" not in plain  # only with the attention


def test_an_nbest_list_is_the_searchs_n_best(pg, pointer_generator_model):
    r = pg.post("/translate", json={"text": NAMED[0], "beam": 3, "nbest": 2})
    assert r.status_code == 200
    got = r.json()["translations"][0]["hypotheses"]
    m = pointer_generator_model
    want = m.task.translate_detailed(m.model, [NAMED[0]], beam=3, nbest=2)[0].hypotheses
    assert got == [h.text for h in want] and len(got) == 2


def test_an_ensemble_is_served_as_its_pool(pointer_generator_dir, pg):
    """``seqlab serve RUN --ensemble RUN2``: the runs' linear pool answers. A run pooled
    with itself is the run (the mean of two equal distributions), so it answers as the run
    does; /info lists the members."""
    from seqlab import api

    pool = api.load_ensemble([pointer_generator_dir, pointer_generator_dir])
    body = {"text": NAMED, "beam": 2, "attention": True}
    alone = pg.post("/translate", json=body).json()["translations"]
    with TestClient(create_app(pool, Limits(max_beam=4))) as client:
        info = client.get("/info").json()
        pooled = client.post("/translate", json=body).json()["translations"]
    name = f"{pointer_generator_dir.name}/{pool.checkpoint.name}"
    assert info["members"] == [name, name] and "members" not in pg.get("/info").json()
    for got, want in zip(pooled, alone):
        assert got["hypotheses"] == want["hypotheses"] and got["copied"] == want["copied"]
        assert got["scores"] == pytest.approx(want["scores"], abs=1e-4)
        assert got["p_gen"] == pytest.approx(want["p_gen"], abs=1e-3)


def test_serve_refuses_compile_with_an_ensemble_in_one_line(pointer_generator_dir, capsys):
    run = str(pointer_generator_dir)
    assert main(["serve", run, "--ensemble", run, "--compile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--compile" in err[0] and "drop --compile" in err[0]


def test_an_output_cut_by_the_length_limit_has_no_end_row(pointer_generator_model):
    """One row per decoded step: the rows, p_gen and the copies stay aligned when the
    length limit stops the search before it writes </s>; whole outputs end in a </s> row."""
    cut, whole = (
        pointer_generator_model.translate_detailed(
            NAMED, beam=2, return_attention=True, max_len_a=0.0, max_len_b=b
        )
        for b in (2, 20)
    )
    for t, full in zip(cut, whole):
        assert t.target_pieces == full.target_pieces[:2] and "</s>" not in t.target_pieces
        assert full.target_pieces[-1] == "</s>" and len(full.target_pieces) > 3
        for r in (t, full):
            rows = len(r.target_pieces)
            assert r.attention["cross"].shape[0] == r.p_gen.numel() == len(r.copied) == rows
