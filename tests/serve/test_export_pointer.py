"""``seqlab export`` for the pointer-generator (copy_translation), both formats, with and
without character n-gram inputs: the exported encoder and step give the eager state and
log P over the extended vocabulary V + n_oov at another batch size, source length and
n_oov than traced; greedy and beam search over the export (with the run's ``<unk>`` rule,
``unk_to_copy``, from export.json) give the task's own translations, scores and log P,
copied names included."""

from __future__ import annotations

import json
import math

import pytest
import torch

from seqlab import api
from seqlab.data.collate import pad_batch
from seqlab.data.oov import source_inputs
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.serve.export import beam_exported, export, greedy_exported, load_exported
from seqlab.tasks.translation_eval import length_limit
from tests.serve import runs
from tests.tasks.test_copy_translation import _pairs

SENTENCES = [de for de, _ in _pairs(5, seed=7)] + ["Ein Kind namens Boa und Zyxo läuft."]


@pytest.fixture(scope="module", params=["plain", "ngrams"])
def pg_model(request, tmp_path_factory):
    task = {"unk_to_copy": True}
    if request.param == "ngrams":  # the presets' encoder input: + hashed character n-grams
        task["src_char_ngrams"] = 64
    before = torch.get_num_threads()
    try:
        run = runs.pointer_generator_run(tmp_path_factory.mktemp(request.param), 100, **task)
    finally:
        torch.set_num_threads(before)
    return api.load(run)


@pytest.fixture(scope="module", params=["torchscript", "onnx"])
def exported(request, pg_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"pg-{request.param}")
    export(pg_model, folder, fmt=request.param)
    return load_exported(folder)


def _inputs(task, sentences):
    """The eager decode's batch: (src, src_mask, the exported encoder's other inputs)."""
    examples = task._examples_of(sentences)
    src, lengths = pad_batch([e.src_ids for e in examples], PAD_ID)  # (B, S)
    src_ext, _ = pad_batch([e.src_ext for e in examples], PAD_ID)  # (B, S)
    n_oov = max(len(e.oovs) for e in examples)
    extra = {"src_ext": src_ext, "oov": torch.zeros(len(examples), n_oov, dtype=torch.long)}
    extra.update({k: v for k, v in source_inputs(examples).items() if v is not None})
    return examples, src, src != PAD_ID, extra


def test_exported_step_equals_eager_over_the_extended_vocabulary(pg_model, exported):
    encoder, step = exported
    model, task = pg_model.model, pg_model.task
    _, src, src_mask, extra = _inputs(task, SENTENCES)  # traced with B, S, n_oov = 2, 5, 2
    n_oov = extra["oov"].shape[1]  # every source word outside the 13 target words
    assert src.shape[0] == 6 and src.shape[1] != 5 and n_oov not in (0, 2)
    assert encoder.meta["encoder"]["inputs"] == ["src", "src_mask", *extra]
    with torch.no_grad():
        memory = model.encode(src, src_mask, extra["src_ext"], n_oov, extra.get("src_grams"))
        state = model.init_state(memory, src_mask)
    names = encoder.meta["encoder"]["outputs"]
    fields = dict(zip(names, encoder(src, src_mask, *extra.values())))
    for n, t in fields.items():
        torch.testing.assert_close(t, getattr(state, n), rtol=1e-5, atol=1e-5, msg=n)
    inputs = {"src_mask": src_mask, **extra, **fields}
    y = torch.full((6,), BOS_ID, dtype=torch.long)
    for _ in range(5):
        with torch.no_grad():
            want, state = model.step(y, state)  # log P (6, V + n_oov)
        got, *changed = step(y, *(inputs[n] for n in step.meta["step"]["inputs"][1:]))
        assert got.shape == want.shape == (6, model.V_size + n_oov)
        # P to 2e-6, and log P to 1e-4 where P > 1e-4: onnxruntime's float32 softmax and
        # exp differ from torch's by ~1e-7 absolute, which is up to 1 % of a P near 1e-6
        # (log P ≈ −13.8 off by 0.007 in the n-gram model, seen 2026-12-04)
        torch.testing.assert_close(got.exp(), want.exp(), rtol=0, atol=2e-6)
        likely = want > math.log(1e-4)
        torch.testing.assert_close(got[likely], want[likely], rtol=1e-4, atol=1e-4)
        assert bool(likely.sum(-1).ge(1).all())
        for out, t in zip(step.meta["step"]["outputs"][1:], changed):
            name = out.removesuffix("_out")
            torch.testing.assert_close(t, getattr(state, name), rtol=1e-4, atol=1e-4)
            inputs[name] = t
        y = want.argmax(-1)


@pytest.mark.parametrize("beam", [1, 3])
def test_search_over_the_export_equals_the_tasks_translation(pg_model, exported, beam):
    task = pg_model.task
    assert exported[1].meta["decode"]["unk"] == "to_copy"
    settings = task._settings(beam)
    copied = 0
    for sentence in SENTENCES:
        examples, src, src_mask, extra = _inputs(task, [sentence])
        (want,) = task._decode(pg_model.model, examples, settings, detailed=True)
        limit = length_limit(len(examples[0].src_ids) - 1, settings.max_len_a, settings.max_len_b)
        if beam == 1:
            tokens, log_p = greedy_exported(*exported, src, src_mask, limit, extra=extra)
            got_ids, got_log_p = tokens[0].tolist(), float(log_p[0])
        else:
            res = beam_exported(*exported, src, src_mask, limit, beam_size=beam,
                                alpha=settings.length_penalty, extra=extra)  # fmt: skip
            got_ids, got_log_p = res.tokens[0, 0].tolist(), float(res.log_probs[0, 0])
            assert float(res.scores[0, 0]) == pytest.approx(want.score, abs=1e-4)
        got_ids = [t for t in got_ids if t not in (EOS_ID, PAD_ID)]
        assert got_ids == list(want.ids)
        assert got_log_p == pytest.approx(want.log_prob, abs=1e-4)
        copied += sum(t >= pg_model.model.V_size for t in got_ids)
    if not pg_model.config.task_cfg.src_char_ngrams:  # 100 updates teach the plain model
        assert copied >= 5  # to write the names by copying them (the n-gram one: not yet)


def test_export_json_of_a_pointer_generator(pg_model, tmp_path):
    export(pg_model, tmp_path)
    meta = json.loads((tmp_path / "export.json").read_text())
    assert meta["model"] == "pointer_generator"
    assert meta["state"]["given"] == ["src_mask", "src_ext"]
    assert meta["state"]["sizes"] == {"n_oov": "oov"}
    assert meta["decode"] == {"unk": "to_copy", "vocab_size": pg_model.model.V_size, "unk_id": 1}
    fields = {f["name"]: f for f in meta["state"]["fields"]}
    assert {n for n, f in fields.items() if f["static"]} == {"h", "keys"}
    dynamic = ["s", "s_cell", "cov", "a", "p_gen", "cov_loss"]
    assert meta["step"]["outputs"] == ["logits", *(f"{n}_out" for n in dynamic)]
