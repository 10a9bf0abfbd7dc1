"""``seqlab export`` (TorchScript and ONNX): the exported encoder and decoder step give
the eager model's numbers at every cache length and at another batch size than traced,
the reference greedy loop over the exported step gives the eager greedy translations,
and families without an exportable step are refused."""

from __future__ import annotations

import pytest
import torch

from seqlab.cli.main import main
from seqlab.data.collate import pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.errors import SeqlabError
from seqlab.serve.export import export, greedy_exported, load_exported
from seqlab.tasks.translation_eval import SearchSettings, decode_ids, length_limit
from tests.serve.test_api import SENTENCES


@pytest.fixture(scope="module", params=["torchscript", "onnx"])
def exported(request, translation_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    paths = export(translation_model, folder, fmt=request.param)
    suffix = {"torchscript": ".pt", "onnx": ".onnx"}[request.param]
    assert [p.name for p in paths] == [f"encoder{suffix}", f"step{suffix}", "export.json"]
    return load_exported(folder)


def _batch(task, texts):
    ids = [task.src_tok.encode(t) + [EOS_ID] for t in texts]
    src, _ = pad_batch(ids, PAD_ID)  # (B, S)
    return ids, src, src != PAD_ID


def test_exported_step_equals_eager_at_every_length(translation_model, exported):
    encoder, step = exported
    model, task = translation_model.model, translation_model.task
    _, src, src_mask = _batch(task, SENTENCES)  # B = 4, traced with B = 2
    memory, cross_k, cross_v = encoder(src, src_mask)
    with torch.no_grad():
        eager_memory = model.encode(src, src_mask)
        state = model.init_state(eager_memory, src_mask)
    torch.testing.assert_close(memory, eager_memory, rtol=1e-5, atol=1e-5)
    L, B, H, _, Dh = cross_k.shape
    self_k = self_v = torch.zeros(L, B, H, 0, Dh)
    y = torch.full((B,), BOS_ID, dtype=torch.long)
    for _ in range(6):  # t = 0 … 5: the cache grows, the positional offset moves
        with torch.no_grad():
            want, state = model.step(y, state)
        got, self_k, self_v = step(y, src_mask, self_k, self_v, cross_k, cross_v)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        y = want.argmax(-1)
    assert self_k.shape[3] == 6


def test_reference_greedy_loop_equals_eager_greedy(translation_model, exported):
    task = translation_model.task
    settings = SearchSettings(beam=1)
    for sentence in SENTENCES:
        ids, src, src_mask = _batch(task, [sentence])
        (((want, _, want_lp),),) = decode_ids(translation_model.model, ids, settings)
        limit = length_limit(len(ids[0]) - 1, settings.max_len_a, settings.max_len_b)
        tokens, log_p = greedy_exported(*exported, src, src_mask, limit)
        got = [t for t in tokens[0].tolist() if t not in (EOS_ID, PAD_ID)]
        assert got == want
        assert task.tgt_tok.decode(got) == translation_model.translate([sentence], beam=1)[0]
        assert float(log_p[0]) == pytest.approx(want_lp, abs=1e-4)


def test_cli_export_and_refusals(translation_dir, lm_model, tmp_path, capsys):
    assert main(["export", str(translation_dir), "--out", str(tmp_path / "ts")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote {tmp_path / 'ts' / n}" for n in ("encoder.pt", "step.pt", "export.json")]
    with pytest.raises(SeqlabError, match="'rnn_lm' model of task 'lm' cannot be exported"):
        export(lm_model, tmp_path / "lm")
    with pytest.raises(SeqlabError, match="unknown format 'tflite'"):
        export(lm_model, tmp_path / "lm", fmt="tflite")
    assert main(["export", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("seqlab: error: ")
