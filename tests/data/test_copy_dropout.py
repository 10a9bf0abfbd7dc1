"""Copy dropout (seqlab.data.copy_dropout): a hand-built relabelling, the invariants of the
draw (the target text never changes, every relabelled target can be copied, the rate and
the id floor are honoured, the seed decides), and the task using it on training pairs only."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.data.copy_dropout import copy_dropout, relabel_as_copies
from seqlab.data.oov import extended_to_words, make_copy_example
from seqlab.data.vocab import Vocab
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.tasks.copy_translation import CopyTranslationConfig, CopyTranslationTask
from tests.tasks.test_copy_translation import files  # noqa: F401  (fixture)

# ids: 4 ".", 5 "in", 6 "a", 7 "bowling", 8 "karate"; V = 9
TGT = Vocab([".", "in", "a", "bowling", "karate"])
SRC = Vocab(["ein", "in", "bowling", "karate", "tom", "."])


def _example(src: str, tgt: str):
    return make_copy_example(src.split(), tgt.split(), SRC, TGT)


def test_relabel_as_copies_hand_example():
    """ "ein" and "tom" are the pair's own OOVs (ids 9, 10); relabelling bowling (7) and
    karate (8) gives them 11 and 12 on both sides and leaves "in" (5), "." (4), </s> (3)
    and the encoder's input alone."""
    ex = _example("ein tom in bowling karate .", "a tom in bowling karate bowling .")
    assert ex.oovs == ("ein", "tom")
    assert ex.src_ext == (9, 10, 5, 7, 8, 4, 3)
    new = relabel_as_copies(ex, [7, 8], TGT)
    assert new.oovs == ("ein", "tom", "bowling", "karate")
    assert new.src_ext == (9, 10, 5, 11, 12, 4, 3)
    assert new.tgt_ext == (6, 10, 5, 11, 12, 11, 4)
    assert new.src_ids == ex.src_ids  # the encoder reads the same words
    assert relabel_as_copies(ex, [], TGT) is ex


def _corpus() -> list:
    words = ["bowling", "karate", "in", "."]
    pairs = []
    for i in range(400):
        w = words[i % 2]
        pairs.append(_example(f"ein tom {w} in .", f"a tom {w} in {'karate' if i % 5 else ''} ."))
    return pairs


def test_copy_dropout_keeps_the_text_and_every_relabelled_target_is_copyable():
    examples = _corpus()
    out = copy_dropout(examples, TGT, rate=0.5, min_id=7, seed=3)
    V = len(TGT)
    n_new = 0
    for before, after in zip(examples, out):
        # the target words are the same words; only their route changed
        assert extended_to_words(after.tgt_ext, TGT, after.oovs) == extended_to_words(
            before.tgt_ext, TGT, before.oovs
        )
        assert after.src_ids == before.src_ids
        for j in after.tgt_ext:
            if j >= V:  # a copy-only target must be in the source, or P(y) = 0
                assert j in after.src_ext
        # below the id floor nothing moves: "in" (5), "." (4), "a" (6)
        for j in (4, 5, 6):
            assert after.tgt_ext.count(j) == before.tgt_ext.count(j)
        n_new += len(after.oovs) - len(before.oovs)
    # each pair shares exactly one word of id >= 7 with its source (the target's extra
    # "karate" is shared only where the source has it): 400 draws at 0.5, 200 ± 10 (1 sd)
    assert abs(n_new - 200) < 40
    assert copy_dropout(examples, TGT, 0.5, 7, seed=3) == out  # the seed decides the draw
    assert copy_dropout(examples, TGT, 0.5, 7, seed=4) != out


def test_copy_dropout_rate_zero_one_and_the_floor():
    examples = _corpus()
    assert copy_dropout(examples, TGT, 0.0, 7, seed=0) == examples
    everything = copy_dropout(examples, TGT, 1.0, 7, seed=0)
    V = len(TGT)
    for ex in everything:  # every shared word of id >= 7 is now a copy
        assert not any(7 <= j < V for j in ex.tgt_ext if j in ex.src_ext)
    assert copy_dropout(examples, TGT, 1.0, V, seed=0) == examples  # floor above V: none
    # a word only in the target ("karate" when the source has "bowling") stays a word
    only_tgt = _example("ein tom bowling in .", "a tom bowling in karate .")
    (after,) = copy_dropout([only_tgt], TGT, 1.0, 7, seed=0)
    assert 8 in after.tgt_ext and after.oovs == ("ein", "tom", "bowling")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        copy_dropout(examples, TGT, 1.5, 7, seed=0)


def _prepared(paths: dict, **kw) -> CopyTranslationTask:
    cfg = CopyTranslationConfig(data="files", tgt_vocab_size=60, src_min_freq=1, **paths, **kw)
    task = CopyTranslationTask(cfg, None, 0)
    task.prepare()
    return task


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"copy_dropout": 1.5}, "copy_dropout must be in"),
        ({"copy_dropout": -0.1}, "copy_dropout must be in"),
        ({"copy_dropout_min_id": 2}, "copy_dropout_min_id must be >= 4"),
        ({"coverage_penalty_words": "some"}, "coverage_penalty_words must be"),
    ],
)
def test_config_refuses_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        CopyTranslationConfig(**bad)


def test_task_relabels_training_pairs_only_and_the_loss_stays_finite(files):  # noqa: F811
    """Target vocabulary 60: every word of the generated pairs is a target word, the 30
    names get ids >= 13 (after the 9 frequent words). With q = 1 and floor 13 every
    training name becomes a copy; valid and test names stay vocabulary words."""
    plain = _prepared(files)
    task = _prepared(files, copy_dropout=1.0, copy_dropout_min_id=13)
    V = len(task.tgt_vocab)
    assert V == 4 + 9 + 30
    assert all(any(j >= V for j in e.tgt_ext) for e in task.examples["train"])
    assert not any(j >= V for e in plain.examples["train"] for j in e.tgt_ext)
    for split in ("valid", "test"):
        assert task.examples[split] == plain.examples[split]
    torch.manual_seed(0)
    cfg = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)
    model = PointerGenerator(cfg, **task.model_kwargs())
    out = task.loss(model, task.collate(list(range(16))))
    assert math.isfinite(float(out.loss_sum.detach())) and out.n_tokens > 0
