"""``task.coverage_penalty`` (GNMT's cp in beam search, seqlab.decode.beam; the search
itself is tested in tests/decode/test_coverage_penalty.py): decode_copy hands it to the
search with the model's attention coverage, greedy ignores it, β = 0 is the default
decoding, the config refuses bad values, and the task's evaluate / translate use it."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.data.collate import pad_batch
from seqlab.data.oov import make_copy_example
from seqlab.data.vocab import PAD_ID
from seqlab.nn.masks import padding_mask
from seqlab.tasks.copy_translation import CopyTranslationConfig, CopyTranslationTask
from seqlab.tasks.copy_translation_decode import decode_copy
from tests.tasks.test_copy_translation_unk import (
    SOURCES,
    SRC_VOCAB,
    TGT_VOCAB,
    decode_as_before,
    examples,
    files,  # noqa: F401  (fixture)
    seeded_model,
    settings,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_decode_copy_searches_with_the_coverage_penalty():
    model, exs = seeded_model(5), examples()
    outputs = {}
    for beta in (0.0, 0.2, 20.0):
        got = [ids for ids, _ in decode_copy(model, exs, settings(3), coverage_penalty=beta)]
        want = decode_as_before(
            model, exs, 3, coverage_penalty=beta, coverage=model.attention_coverage
        )
        assert got == want
        outputs[beta] = got
    plain = [ids for ids, _ in decode_copy(model, exs, settings(3))]
    assert outputs[0.0] == plain  # β = 0 is the default decoding
    assert outputs[20.0] != plain  # a strong penalty changes some output on this model
    greedy_plain = [ids for ids, _ in decode_copy(model, exs, settings(1))]
    greedy_cp = [ids for ids, _ in decode_copy(model, exs, settings(1), coverage_penalty=20.0)]
    assert greedy_cp == greedy_plain  # GNMT's cp ranks finished beam hypotheses only


@pytest.mark.parametrize("bad", [-0.1, math.inf, math.nan])
def test_config_refuses_a_bad_coverage_penalty(bad):
    with pytest.raises(ValueError, match="task.coverage_penalty must be a finite number >= 0"):
        CopyTranslationConfig(coverage_penalty=bad)
    assert CopyTranslationConfig().coverage_penalty == 0.0  # off by default, as in See et al.


def test_task_evaluate_and_translate_use_it(files):  # noqa: F811
    outputs = {}
    for beta in (0.0, 20.0):
        cfg = CopyTranslationConfig(
            data="files",
            tgt_vocab_size=10,
            src_min_freq=1,
            test_beam=3,
            coverage_penalty=beta,
            **files,
        )
        task = CopyTranslationTask(cfg, None, 0)
        task.prepare()
        model = seeded_model(4, **task.model_kwargs())
        sources = ["Ein Mann namens Zyxwq läuft.", "Ein Mann läuft und läuft ."]
        outputs[beta] = (task.evaluate(model, "test")["bleu_lc"], task.translate(model, sources, 3))
    assert outputs[0.0] != outputs[20.0]


# ----------------------------------------------------- over the words outside the vocabulary


def test_oov_coverage_reads_only_the_source_words_outside_the_target_vocabulary():
    model, exs = seeded_model(5), examples()
    src, lengths = pad_batch([e.src_ids for e in exs], PAD_ID)  # (B, S)
    src_ext, _ = pad_batch([e.src_ext for e in exs], PAD_ID)  # (B, S)
    mask = padding_mask(lengths)  # (B, S)
    n_oov = max(len(e.oovs) for e in exs)
    state = model.init_state(model.encode(src, mask, src_ext, n_oov), mask)
    cov, oov_mask = model.oov_attention_coverage(state)
    assert torch.equal(cov, model.attention_coverage(state)[0])
    for b, sentence in enumerate(SOURCES):  # by hand: a word outside TGT_VOCAB, not </s>
        words = sentence.split()
        want = [w not in TGT_VOCAB for w in words] + [False] * (src.shape[1] - len(words))
        assert oov_mask[b].tolist() == want


# sources whose words are mostly target words, so "outside the vocabulary" is a few names;
# the last has none
MIXED = ["a man named boa runs and runs .", "a woman and kiwu runs .",
         "a man runs with bob and ann .", "man runs and runs ."]  # fmt: skip


def test_decode_copy_with_the_penalty_over_oov_words():
    model = seeded_model(3)
    exs = [make_copy_example(s.split(), [], SRC_VOCAB, TGT_VOCAB) for s in MIXED]

    def decode(**kw):
        return [ids for ids, _ in decode_copy(model, exs, settings(3), **kw)]

    plain = decode()
    over_all = decode(coverage_penalty=20.0)
    over_oov = decode(coverage_penalty=20.0, coverage_words="oov")
    want = decode_as_before(
        model, exs, 3, coverage_penalty=20.0, coverage=model.oov_attention_coverage
    )
    assert over_oov == want
    assert over_oov != over_all  # the two penalties rank this model's beams differently
    assert over_oov != plain
    assert over_oov[3] == plain[3]  # no word outside the vocabulary: cp = 0, plain decoding
    with pytest.raises(ValueError, match="coverage_words must be 'all' or 'oov'"):
        decode(coverage_penalty=1.0, coverage_words="some")
