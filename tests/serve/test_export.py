"""``seqlab export``: the TorchScript encoder and decoder step give the eager model's
numbers at every cache length, the reference greedy loop over the exported step gives the
eager greedy translations, and families without an exportable step are refused."""

from __future__ import annotations

import warnings

import pytest
import torch

from seqlab.cli.main import main
from seqlab.data.collate import pad_batch
from seqlab.data.vocab import EOS_ID, PAD_ID
from seqlab.errors import SeqlabError
from seqlab.serve.export import export, greedy_exported
from seqlab.tasks.translation_eval import SearchSettings, decode_ids, length_limit
from tests.serve.test_api import SENTENCES


@pytest.fixture(scope="module")
def exported(translation_model, tmp_path_factory):
    paths = export(translation_model, tmp_path_factory.mktemp("export"))
    with warnings.catch_warnings():  # torch 2.13 marks TorchScript deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        return [torch.jit.load(str(p)) for p in paths[:2]]


def _batch(task, texts):
    ids = [task.src_tok.encode(t) + [EOS_ID] for t in texts]
    src, lengths = pad_batch(ids, PAD_ID)  # (B, S)
    return ids, src, src != PAD_ID


def test_exported_step_equals_eager_at_every_length(translation_model, exported):
    encoder, step = exported
    model, task = translation_model.model, translation_model.task
    _, src, src_mask = _batch(task, SENTENCES)  # B = 4, another size than traced
    memory, cross_k, cross_v = encoder(src, src_mask)
    torch.testing.assert_close(memory, model.encode(src, src_mask))
    state = model.init_state(model.encode(src, src_mask), src_mask)
    L, B, H, _, Dh = cross_k.shape
    self_k = self_v = torch.zeros(L, B, H, 0, Dh)
    y = torch.full((B,), 1, dtype=torch.long)
    for _ in range(6):  # t = 0 … 5: the cache grows, the positional offset moves
        with torch.no_grad():
            want, state = model.step(y, state)
        got, self_k, self_v = step(y, src_mask, self_k, self_v, cross_k, cross_v)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        y = want.argmax(-1)
    assert self_k.shape[3] == 6


def test_reference_greedy_loop_equals_eager_greedy(translation_model, exported):
    task = translation_model.task
    ids, src, src_mask = _batch(task, SENTENCES[:1])
    settings = SearchSettings(beam=1)
    (((want, _, want_lp),),) = decode_ids(translation_model.model, ids, settings)
    limit = length_limit(len(ids[0]) - 1, settings.max_len_a, settings.max_len_b)
    tokens, log_p = greedy_exported(*exported, src, src_mask, limit)
    got = [t for t in tokens[0].tolist() if t not in (EOS_ID, PAD_ID)]
    assert (
        got == want
        and task.tgt_tok.decode(got) == translation_model.translate(SENTENCES[:1], beam=1)[0]
    )
    assert float(log_p[0]) == pytest.approx(want_lp, abs=1e-4)


def test_cli_export_and_refusals(translation_dir, lm_model, tmp_path, capsys):
    assert main(["export", str(translation_dir), "--out", str(tmp_path / "ts")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote {tmp_path / 'ts' / n}" for n in ("encoder.pt", "step.pt", "export.json")]
    assert main(["export", str(translation_dir), "--format", "onnx", "--out", str(tmp_path)]) == 2
    assert "use --format torchscript" in capsys.readouterr().err
    with pytest.raises(SeqlabError, match="'rnn_lm' model of task 'lm' cannot be exported"):
        export(lm_model, tmp_path / "lm")
