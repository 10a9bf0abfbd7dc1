"""Corpus statistics of source words (seqlab.data.word_stats): f(w) by hand, the
leave-one-out counts of a training pair, the saved form, and the per-position tensor of a
pointer-generator batch."""

from __future__ import annotations

import json
import math

import pytest
import torch

from seqlab.data.oov import collate_copy, make_copy_example, source_inputs, source_stats
from seqlab.data.vocab import Vocab
from seqlab.data.word_stats import N_WORD_STATS, WordStats
from seqlab.errors import DataError

SRC_TEXT = [["ein", "boston", "boston", "terrier"], ["der", "hund", "1102"]]
TGT_TEXT = [["a", "boston", "terrier"], ["the", "dog", "1102"], ["boston"]]
L = math.log1p


def test_features_by_hand():
    stats = WordStats.build(SRC_TEXT, TGT_TEXT)
    f = stats.features(["boston", "hund", "1102", "zyx"])
    assert f == (
        (L(2), L(2), 0.0),  # 2 on the target side, 2 on the source side
        (0.0, L(1), 0.0),  # German only
        (L(1), L(1), 1.0),  # a number
        (0.0, 0.0, 0.0),  # never seen
    )
    assert len(f[0]) == N_WORD_STATS


def test_a_training_pair_leaves_its_own_occurrences_out():
    """Pair 0 holds both source "boston"s and one of the two target ones: left out, the
    word looks as it would in a sentence outside the corpus that had been seen once less."""
    stats = WordStats.build(SRC_TEXT, TGT_TEXT)
    f = stats.features(SRC_TEXT[0], SRC_TEXT[0], TGT_TEXT[0])
    assert f[1] == f[2] == (L(1), 0.0, 0.0)  # boston: 2 − 1 target, 2 − 2 source
    assert f[3] == (0.0, 0.0, 0.0)  # terrier occurs only in this pair
    assert f[0] == (0.0, 0.0, 0.0)  # "ein" is not a target word
    hapax = stats.features(["1102"], SRC_TEXT[1], TGT_TEXT[1])
    assert hapax == ((0.0, 0.0, 1.0),)  # only the digit flag is left
    with pytest.raises(DataError, match="negative count"):
        stats.features(["zyx"], ["zyx"], [])  # not a pair of the counted text


def test_saved_form_round_trips_through_json_and_bad_forms_are_refused():
    stats = WordStats.build(SRC_TEXT, TGT_TEXT)
    back = WordStats.from_dict(json.loads(json.dumps(stats.to_dict())))
    words = ["boston", "hund", "1102", "zyx", "terrier"]
    assert back.features(words) == stats.features(words)
    good = stats.to_dict()
    with pytest.raises(DataError, match="not seqlab word statistics"):
        WordStats.from_dict({"src": {}, "tgt": {}})
    with pytest.raises(DataError, match="version"):
        WordStats.from_dict({**good, "version": 99})
    with pytest.raises(DataError, match="'tgt' must map words to counts"):
        WordStats.from_dict({**good, "tgt": {"boston": -1}})


def test_batch_carries_each_source_words_statistics():
    """``src_stats`` (B, S, F) holds f(w) at each word, 0 at </s> and padding; without
    ``WordStats`` the batch has none. ``source_inputs`` gives both optional inputs."""
    src_vocab = Vocab.build(SRC_TEXT, 1)
    tgt_vocab = Vocab.build(TGT_TEXT, 1, 6)
    stats = WordStats.build(SRC_TEXT, TGT_TEXT)
    e1 = make_copy_example(SRC_TEXT[0], TGT_TEXT[0], src_vocab, tgt_vocab, None, stats, True)
    e2 = make_copy_example(["hund", "1102"], [], src_vocab, tgt_vocab, None, stats)
    assert e1.src_stats == stats.features(SRC_TEXT[0], SRC_TEXT[0], TGT_TEXT[0])
    assert e2.src_stats == stats.features(["hund", "1102"])
    b = collate_copy([e1, e2])
    assert b.src_stats is not None and b.src_stats.dtype == torch.float32
    assert b.src_stats.shape == (*b.src.shape, N_WORD_STATS) == (2, 5, 3)
    torch.testing.assert_close(b.src_stats[0, :4], torch.tensor(e1.src_stats))
    torch.testing.assert_close(b.src_stats[1, :2], torch.tensor(e2.src_stats))
    assert float(b.src_stats[0, 4:].abs().sum()) == 0.0  # </s>
    assert float(b.src_stats[1, 2:].abs().sum()) == 0.0  # </s>, then padding
    extras = source_inputs([e1, e2])
    assert extras["src_grams"] is None and torch.equal(extras["src_stats"], b.src_stats)
    plain = make_copy_example(["hund"], [], src_vocab, tgt_vocab)
    assert plain.src_stats == () and source_stats([plain]) is None
    assert collate_copy([plain]).src_stats is None
