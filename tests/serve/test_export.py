"""``seqlab export`` (TorchScript and ONNX): the exported encoder and decoder step give
the eager model's numbers at every cache length and at another batch size than traced,
the reference greedy loop over the exported step gives the eager greedy translations,
the reference beam loop (seqlab's beam_search over the exported step) gives eager beam
search's n-best tokens and scores, and families without an exportable step are refused."""

from __future__ import annotations

import logging

import pytest
import torch

from seqlab.cli.main import main
from seqlab.data.collate import pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.errors import SeqlabError
from seqlab.serve.export import beam_exported, export, greedy_exported, load_exported
from seqlab.tasks.translation_eval import SearchSettings, decode_ids, length_limit
from tests.serve.test_api import SENTENCES

EXPORTS: dict[str, dict] = {}  # format -> what its export did: log records, mode after


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module", params=["torchscript", "onnx"])
def exported(request, translation_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    model = translation_model.model.eval()  # as loaded
    seen = _Records()  # what torch.onnx's operator registry logs (it does not propagate)
    logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    logger.addHandler(seen)
    try:
        paths = export(translation_model, folder, fmt=request.param)
    finally:
        logger.removeHandler(seen)
    training = [m.training for m in model.modules()]
    EXPORTS[request.param] = {"records": seen.records, "training_after": training}
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


def check_greedy_equals_eager(loaded, exported):
    """Sentence by sentence: the exported greedy loop's tokens, text and log P are the
    eager greedy decode's (``loaded``: a translation run, ``exported``: its files)."""
    task = loaded.task
    settings = SearchSettings(beam=1)
    for sentence in SENTENCES:
        ids, src, src_mask = _batch(task, [sentence])
        (((want, _, want_lp),),) = decode_ids(loaded.model, ids, settings)
        limit = length_limit(len(ids[0]) - 1, settings.max_len_a, settings.max_len_b)
        tokens, log_p = greedy_exported(*exported, src, src_mask, limit)
        got = [t for t in tokens[0].tolist() if t not in (EOS_ID, PAD_ID)]
        assert got == want
        assert task.tgt_tok.decode(got) == loaded.translate([sentence], beam=1)[0]
        assert float(log_p[0]) == pytest.approx(want_lp, abs=1e-4)


def test_reference_greedy_loop_equals_eager_greedy(translation_model, exported):
    check_greedy_equals_eager(translation_model, exported)


def _limits(ids):
    settings = SearchSettings()
    n = [len(x) - 1 for x in ids]  # source subwords without EOS
    return torch.tensor([length_limit(k, settings.max_len_a, settings.max_len_b) for k in n])


def test_reference_beam_loop_equals_eager_beam_search(translation_model, exported):
    model, task = translation_model.model, translation_model.task
    ids, src, src_mask = _batch(task, SENTENCES)  # B = 4, per-input limits
    limit = _limits(ids)  # (B,)
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
    settings = {"beam_size": 3, "n_best": 2, "alpha": 0.6}
    want = beam_search(model, state, len(ids), BOS_ID, EOS_ID, limit, pad_id=PAD_ID, **settings)
    got = beam_exported(*exported, src, src_mask, limit, **settings)
    assert got.tokens.shape[:2] == (len(ids), 2)
    assert torch.equal(got.tokens, want.tokens)
    assert torch.equal(got.lengths, want.lengths)
    assert bool((got.lengths > 0).all())  # two real hypotheses per input
    assert got.scores.dtype == want.scores.dtype == torch.float32
    torch.testing.assert_close(got.scores, want.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=0, atol=1e-5)
    # n-best never changes the 1-best (the same search, so also over the exported step)
    one = beam_exported(*exported, src, src_mask, limit, beam_size=3, alpha=0.6)
    # (the 1-best list is only as wide as its longest entry; the 2-best list as its longest)
    T = int(got.lengths[:, 0].max())
    assert torch.equal(one.tokens[:, 0, :T], got.tokens[:, 0, :T])
    assert torch.equal(one.lengths[:, 0], got.lengths[:, 0])
    assert bool((got.tokens[:, 0, T:] == PAD_ID).all() and (one.tokens[:, 0, T:] == PAD_ID).all())


def test_reference_beam_width_one_equals_exported_greedy(translation_model, exported):
    ids, src, src_mask = _batch(translation_model.task, SENTENCES)
    limit = int(_limits(ids).max())
    tokens, log_p = greedy_exported(*exported, src, src_mask, limit)  # (B, T), (B,)
    beam = beam_exported(*exported, src, src_mask, limit, beam_size=1)
    assert torch.equal(beam.tokens[:, 0], tokens)
    torch.testing.assert_close(beam.log_probs[:, 0], log_p, rtol=0, atol=1e-5)


def test_cli_export_and_refusals(translation_dir, classify_model, lm_model, tmp_path, capsys):
    assert main(["export", str(translation_dir), "--out", str(tmp_path / "ts")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote {tmp_path / 'ts' / n}" for n in ("encoder.pt", "step.pt", "export.json")]
    # a classifier has no decoder step (the recurrent LMs have one since 2026-12-05:
    # tests/serve/test_export_lm.py)
    with pytest.raises(SeqlabError, match="model of task 'classify' cannot be exported"):
        export(classify_model, tmp_path / "classify")
    with pytest.raises(SeqlabError, match="unknown format 'tflite'"):
        export(lm_model, tmp_path / "lm", fmt="tflite")
    assert main(["export", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("seqlab: error: ")


@pytest.mark.parametrize("exported", ["onnx"], indirect=True)
def test_onnx_export_leaves_the_model_in_its_mode_and_stderr_quiet(exported):
    # in eval mode, as loaded (the TorchScript-based exporter of the RNN export restored
    # its fresh wrapper's training mode; both modes: test_export_rnn.py's mode test)
    assert not any(EXPORTS["onnx"]["training_after"])
    # the exporter's notes on torchvision operators (not installed, not used) are held back
    assert not [r for r in EXPORTS["onnx"]["records"] if "torchvision" in r.getMessage()]
