"""Per-sentence source OOVs and the extended vocabulary (seqlab.data.oov)."""

import pytest
import torch

from seqlab.data.oov import (
    GramSpec,
    collate_copy,
    extended_to_words,
    make_copy_example,
    source_to_extended,
    target_to_extended,
)
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK, UNK_ID, Vocab

TGT = Vocab(["a", "man", "in", "the", "city", "."])  # V = 10: a=4 man=5 in=6 the=7 city=8 .=9
SRC = Vocab(["ein", "mann", "in", "der", "stadt", "."])


def test_source_ids_in_the_extended_vocabulary():
    """Target words keep their ids; OOVs get V + k in first-seen order; repeats share k."""
    words = ["ein", "mann", "in", "boston", "und", "boston", "."]
    ext, oovs = source_to_extended(words, TGT)
    assert oovs == ["ein", "mann", "boston", "und"]
    assert ext == [10, 11, 6, 12, 13, 12, 9]


def test_target_ids_copy_source_oovs_else_unk():
    oovs = ["ein", "boston"]
    ids = target_to_extended(["a", "man", "in", "boston", "near", "ein", "."], TGT, oovs)
    assert ids == [4, 5, 6, 11, UNK_ID, 10, 9]  # "near": neither in vocab nor in source


@pytest.mark.parametrize(
    "words",
    [
        ["ein", "mann", "in", "boston", "."],
        ["in", "in", "the", "city"],  # every word a target word: no OOVs
        ["zürich", "1984", "zürich", "a"],
    ],
)
def test_mapping_round_trips(words):
    """extended_to_words(source_to_extended(w)) == w, and the same for targets made only
    of target words and source OOVs (exact)."""
    ext, oovs = source_to_extended(words, TGT)
    assert extended_to_words(ext, TGT, oovs) == words
    target = [w for w in reversed(words)]
    assert extended_to_words(target_to_extended(target, TGT, oovs), TGT, oovs) == target


def test_back_mapping_keeps_unk_and_rejects_ids_beyond_the_sentence():
    assert extended_to_words([UNK_ID, 10], TGT, ["x"]) == [UNK, "x"]
    with pytest.raises(IndexError, match="extended id 11"):
        extended_to_words([11], TGT, ["x"])


def test_make_copy_example_appends_eos_in_both_id_spaces():
    e = make_copy_example(["ein", "mann", "boston"], ["a", "man", "boston"], SRC, TGT)
    assert e.src_ids == (4, 5, UNK_ID, EOS_ID)  # the encoder reads "boston" as <unk>
    assert e.src_ext == (10, 11, 12, EOS_ID)
    assert e.tgt_ext == (4, 5, 12)
    assert e.oovs == ("ein", "mann", "boston")


def test_collate_copy_pads_and_keeps_per_row_oovs():
    e1 = make_copy_example(["ein", "mann", "boston"], ["a", "man", "boston"], SRC, TGT)
    e2 = make_copy_example(["in", "der", "stadt", "."], ["in", "the", "city", "."], SRC, TGT)
    b = collate_copy([e1, e2])
    assert b.n_oov == 3 and b.oovs == (("ein", "mann", "boston"), ("der", "stadt"))
    assert b.src_ext.tolist() == [[10, 11, 12, EOS_ID, PAD_ID], [6, 10, 11, 9, EOS_ID]]
    assert b.src.shape == b.src_ext.shape == b.src_mask.shape == (2, 5)
    assert b.y_in.tolist() == [[BOS_ID, 4, 5, 12, PAD_ID], [BOS_ID, 6, 7, 8, 9]]
    assert b.y_out.tolist() == [[4, 5, 12, EOS_ID, PAD_ID], [6, 7, 8, 9, EOS_ID]]
    assert b.n_tokens == 9
    moved = b.to("cpu")
    assert moved.n_oov == 3 and moved.oovs == b.oovs and torch.equal(moved.src_ext, b.src_ext)
    with pytest.raises(ValueError):
        collate_copy([])


def test_collate_copy_carries_each_source_words_ngrams():
    """With a GramSpec every source position holds its word's n-gram ids (</s> and padding
    none), aligned with ``src``; without one the batch has no ``src_grams``."""
    spec = GramSpec(3, 4, 50)
    e1 = make_copy_example(["ein", "boston"], ["a", "boston"], SRC, TGT, spec)
    e2 = make_copy_example(["in", "der", "stadt"], ["in", "the", "city"], SRC, TGT, spec)
    assert e1.src_grams == (spec.ids("ein"), spec.ids("boston"), ())
    b = collate_copy([e1, e2])
    assert b.src_grams is not None and b.src_grams.shape[:2] == b.src.shape == (2, 4)
    G = b.src_grams.shape[2]
    assert max(len(spec.ids(w)) for w in ["ein", "boston", "in", "der", "stadt"]) == G
    for row, words in ((0, ["ein", "boston"]), (1, ["in", "der", "stadt"])):
        for i, w in enumerate(words):
            ids = b.src_grams[row, i].tolist()
            assert ids[: len(spec.ids(w))] == list(spec.ids(w)) and not any(ids[len(spec.ids(w)) :])
    assert int(b.src_grams[0, 2:].abs().sum()) == 0  # </s>, then padding
    assert int(b.src_grams[1, 3].abs().sum()) == 0  # </s>
    assert torch.equal(b.to("cpu").src_grams, b.src_grams)
    plain = collate_copy([make_copy_example(["ein"], ["a"], SRC, TGT)])
    assert plain.src_grams is None
