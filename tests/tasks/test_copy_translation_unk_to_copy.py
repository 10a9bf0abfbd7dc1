"""``unk_to_copy`` (seqlab.tasks.copy_translation_decode): <unk>'s probability moved onto
the source words outside the target vocabulary, in proportion to their copy mass — a
hand-computed case, a row without such words (== forbid_unk), total mass kept, the
searches never emitting <unk> and copying where <unk> + copy outweigh a vocabulary word,
the config's exclusivity, and the task's evaluate / translate / explain applying it."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.data.vocab import BOS_ID, UNK, UNK_ID
from seqlab.tasks.copy_translation import CopyTranslationConfig, CopyTranslationTask
from seqlab.tasks.copy_translation_decode import (
    UnkToCopyDecoder,
    decode_copy,
    forbid_unk,
    unk_to_copy,
)
from tests.tasks.test_copy_translation_unk import (
    TGT_VOCAB,
    examples,
    files,  # noqa: F401  (fixture)
    first_step,
    seeded_model,
    settings,
    unk_loving,
)

pytestmark = pytest.mark.usefixtures("one_thread")

FLOOR = math.log(torch.finfo(torch.float32).tiny)


def test_unk_to_copy_by_hand():
    # V = 5 (ids 0..4, <unk> = UNK_ID), two copy ids 5, 6
    p = torch.tensor([[0.05, 0.0, 0.0, 0.25, 0.2, 0.1, 0.3]])
    p[0, UNK_ID] = 0.1
    p = p / p.sum()
    log_p = p.log()
    out = unk_to_copy(log_p, 5)
    m = p[0, 5] + p[0, 6]
    want = p.clone()
    want[0, 5:] = p[0, 5:] * (1 + p[0, UNK_ID] / m)  # 0.1 shared 1 : 3
    want[0, UNK_ID] = 0.0
    torch.testing.assert_close(out.exp(), want)
    assert torch.isneginf(out[0, UNK_ID])
    torch.testing.assert_close(out.exp().sum(), torch.tensor(1.0))  # mass kept
    keep = [i for i in range(5) if i != UNK_ID]
    assert torch.equal(out[0, keep], log_p[0, keep])  # vocabulary words untouched


def test_a_row_without_source_oovs_just_loses_unk():
    log_p = torch.log_softmax(torch.randn(2, 8), -1)
    log_p[:, 6:] = FLOOR  # the model's floor: no source word behind these ids
    log_p[1, 6] = math.log(0.01)  # row 1 has one
    out = unk_to_copy(log_p, 6)
    torch.testing.assert_close(out[0], forbid_unk(log_p)[0])
    assert out[1, 6] > log_p[1, 6] and out[1, 7] == FLOOR


@pytest.mark.parametrize("beam", [1, 3])
def test_searches_never_emit_unk_and_copy_where_unk_plus_copy_win(beam):
    model, exs = unk_loving(seeded_model(), rival=0.0, p_gen_bias=2.0), examples()
    state, log_p = first_step(model, exs)
    V = len(TGT_VOCAB)
    out = unk_to_copy(log_p, V)
    for b, e in enumerate(exs):
        if e.oovs:  # the copies gained exactly P(<unk>), the vocabulary kept its mass
            gained = out[b, V:].exp().sum() - log_p[b, V:].exp().sum()
            torch.testing.assert_close(gained, log_p[b, UNK_ID].exp(), rtol=1e-5, atol=1e-6)
    plain = decode_copy(model, exs, settings(beam))
    assert any(UNK_ID in ids for ids, _ in plain)
    to_copy = decode_copy(model, exs, settings(beam), unk_to_copy_vocab=V)
    state, log_p = first_step(model, exs)
    step, _ = UnkToCopyDecoder(model, V).step(torch.full((len(exs),), BOS_ID), state)
    torch.testing.assert_close(step, out)  # the wrapper is unk_to_copy on the model's step
    blocked = decode_copy(model, exs, settings(beam), block_unk=True)
    n_copy = sum(sum(j >= V for j in ids) for ids, _ in to_copy)
    n_copy_blocked = sum(sum(j >= V for j in ids) for ids, _ in blocked)
    assert all(UNK_ID not in ids for ids, _ in to_copy)
    assert n_copy > n_copy_blocked  # <unk>'s mass went to copies, not to the rival words


def test_config_allows_one_unk_option():
    with pytest.raises(ValueError, match="choose one"):
        CopyTranslationConfig(block_unk=True, unk_to_copy=True)
    with pytest.raises(ValueError, match="choose one"):
        CopyTranslationConfig(replace_unk=True, unk_to_copy=True)
    with pytest.raises(ValueError, match="unk_to_copy must be true or false"):
        CopyTranslationConfig(unk_to_copy=1)
    with pytest.raises(ValueError, match="choose one"):  # the function refuses it too
        decode_copy(seeded_model(), examples(), settings(1), block_unk=True, unk_to_copy_vocab=11)


def test_task_applies_unk_to_copy(files):  # noqa: F811
    cfg = CopyTranslationConfig(
        data="files", tgt_vocab_size=10, src_min_freq=1, test_beam=2, unk_to_copy=True, **files
    )
    task = CopyTranslationTask(cfg, None, 0)
    task.prepare()
    model = unk_loving(seeded_model(4, **task.model_kwargs()), rival=0.0, p_gen_bias=2.0)
    metrics = task.evaluate(model, "test")
    (text,) = task.translate(model, ["Ein Mann namens Zyxwq läuft."], beam=2)
    words = task.explain(model, "Ein Mann namens Zyxwq läuft.")["output"]
    assert metrics["unk"] == 0.0 and UNK not in text and UNK not in words
    source = {"ein", "mann", "namens", "zyxwq", "läuft", "."}  # <unk> became copies
    assert all(w in source or w in task.tgt_vocab for w in text.lower().split())
