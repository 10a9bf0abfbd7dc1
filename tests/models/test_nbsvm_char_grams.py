"""Character n-gram features of the NB-weighted linear classifier (task.char_ngrams): the
feature ids by hand, logits against a hand sum over words, word n-grams and char n-grams,
a word outside the vocabulary still scored by its spelling, padding changing nothing, the
classify task's batches, r, predict and errors."""

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.data.char_ngrams import gram_ids
from seqlab.errors import SeqlabError
from seqlab.models.classifiers import BIGRAM_PRIME
from seqlab.models.nbsvm import (
    NBLinearClassifier,
    NBLinearConfig,
    char_gram_features,
    log_count_ratio,
)
from seqlab.nn.masks import padding_mask
from seqlab.run_config import resolve_run
from seqlab.tasks.classification import ClassificationTask, ClassifyConfig
from seqlab.train.build import build_model, build_task

V, K, G = 10, 7, 13


def test_char_gram_features_by_hand():
    grams = torch.tensor([[[3, 1, 0], [0, 0, 0]], [[13, 0, 0], [2, 2, 5]]])  # (B=2, T=2, 3)
    off = 100
    assert char_gram_features(grams, off).tolist() == [
        [102, 100, -1, -1, -1, -1],
        [112, -1, -1, 101, 101, 104],
    ]


def _feats(words, word_grams):
    """The binarized feature ids of one sentence, by hand (V words, K bigram buckets, then
    G char-gram buckets)."""
    feats = set(words) | {V + (a * BIGRAM_PRIME + b) % K for a, b in zip(words, words[1:])}
    return feats | {V + K + g - 1 for gs in word_grams for g in gs}


def test_fit_and_logits_with_char_grams_against_a_hand_sum():
    model = NBLinearClassifier(NBLinearConfig(ngram=2, buckets=K), V, 2, gram_buckets=G)
    assert model.r.shape == (V + K + G, 2)
    x = torch.tensor([[4, 5, 4], [6, 1, 0], [1, 0, 0]])  # id 1 = <unk>
    lengths = torch.tensor([3, 2, 1])
    mask = padding_mask(lengths, 3)
    grams = torch.zeros(3, 3, 3, dtype=torch.long)  # (B, T, G')
    grams[0, 0, :2] = torch.tensor([1, 2])
    grams[0, 1, :3] = torch.tensor([2, 3, 13])
    grams[0, 2, :2] = torch.tensor([1, 2])  # word 4 again: the same grams, counted once
    grams[1, 0, :1] = torch.tensor([4])
    grams[1, 1, :2] = torch.tensor([5, 6])
    grams[2, 0, :2] = torch.tensor([7, 8])  # another <unk>, spelled differently
    y = torch.tensor([1, 0, 1])
    model.fit_log_count_ratio([(x, mask, y, grams)])
    counts = torch.zeros(2, V + K + G)
    hand_feats = []
    for b in range(3):
        n = int(lengths[b])
        words = x[b, :n].tolist()
        word_grams = [[g for g in grams[b, t].tolist() if g] for t in range(n)]
        feats = _feats(words, word_grams)
        hand_feats.append(feats)
        for j in feats:
            counts[int(y[b]), j] += 1
    torch.testing.assert_close(model.r, log_count_ratio(counts, 1.0).T)
    with torch.no_grad():
        model.W.normal_()
        model.b.normal_()
    logits = model(x, mask, grams)
    for b, feats in enumerate(hand_feats):
        hand = model.b + sum(model.W[j] * model.r[j] for j in feats)
        torch.testing.assert_close(logits[b], hand)
    # the two <unk> sentences differ only in spelling, and so do their logits
    other = grams[2:].clone()
    other[0, 0, :2] = torch.tensor([5, 6])
    assert not torch.allclose(model(x[2:], mask[2:], grams[2:]), model(x[2:], mask[2:], other))
    # padding changes nothing: sentence 2 alone == in the padded batch
    torch.testing.assert_close(model(x[2:, :1], mask[2:, :1], grams[2:, :1]), logits[2:])


def test_model_errors():
    model = NBLinearClassifier(NBLinearConfig(buckets=K), V, 2, gram_buckets=G)
    x, mask = torch.tensor([[4, 5]]), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="needs each batch's grams"):
        model(x, mask)
    with pytest.raises(ValueError, match="gram_buckets"):
        NBLinearClassifier(NBLinearConfig(buckets=K), V, 2, gram_buckets=-1)


def _task(tmp_path, **kw):
    lines = [f"pos\tgreat film {i}" for i in range(6)] + [f"neg\tdull film {i}" for i in range(6)]
    (tmp_path / "d.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = ClassifyConfig(
        data="tsv", path=str(tmp_path / "d.tsv"), min_freq=1, valid_fraction=0.2, **kw
    )
    task = ClassificationTask(cfg, None, 0)
    task.prepare()
    return task


def test_task_batches_carry_each_words_grams(tmp_path):
    task = _task(tmp_path, char_ngrams=G, char_ngram_min=2, char_ngram_max=3)
    assert task.model_kwargs()["gram_buckets"] == G
    data = task.splits["train"]
    batch = task.collate([0, 1], "train")
    assert batch.grams is not None and batch.grams.shape[:2] == batch.x.shape
    for b in range(2):
        words = task.tokenize(data.texts[b])
        assert len(words) == len(data.ids[b])
        for t, w in enumerate(words):
            want = list(gram_ids(w, 2, 3, G))
            got = batch.grams[b, t].tolist()
            assert got[: len(want)] == want and not any(got[len(want) :])
        assert not batch.grams[b, len(words) :].any()  # padding positions have none
    assert len(batch.model_inputs()) == 3
    # without char_ngrams nothing changes: no grams, no model kwarg
    plain = _task(tmp_path)
    assert plain.collate([0], "train").grams is None
    assert "gram_buckets" not in plain.model_kwargs()
    assert len(plain.collate([0], "train").model_inputs()) == 2


def test_task_fits_r_and_predicts_an_unseen_word_by_its_spelling(tmp_path):
    task = _task(tmp_path, char_ngrams=1 << 12)
    model = NBLinearClassifier(NBLinearConfig(buckets=K), **task.model_kwargs())
    task.init_model(model)
    pos = task.labels.index("pos")
    great = gram_ids("great", 2, 5, 1 << 12)
    assert all(model.r[model.gram_offset + g - 1, pos] > 0 for g in great)
    with torch.no_grad():  # weights that read only the char grams
        model.W.zero_()
        model.W[model.gram_offset :] = 1.0
    out = task.predict(model, ["greatest", "dullest", ""])
    assert task.vocab.token_to_id("greatest") == task.vocab.token_to_id("dullest")  # <unk>
    assert out[0]["label"] == "pos" and out[1]["label"] == "neg"
    assert out[0]["probs"]["pos"] > out[2]["probs"]["pos"] > out[1]["probs"]["pos"]
    logits, y = task.split_logits(model, "valid")
    assert logits.shape == (len(task.splits["valid"].ids), 2)


def test_config_errors_and_other_models_refuse_grams(tmp_path):
    with pytest.raises(ConfigError, match="task.char_ngrams"):
        ClassifyConfig(char_ngrams=-1)
    with pytest.raises(ConfigError, match="char_ngram_min"):
        ClassifyConfig(char_ngrams=8, char_ngram_min=4, char_ngram_max=3)
    _task(tmp_path)  # writes d.tsv
    task = {"name": "classify", "data": "tsv", "path": str(tmp_path / "d.tsv"), "min_freq": 1}
    cfg = resolve_run({"task": {**task, "char_ngrams": G}, "model": {"name": "avg_embedding"}})
    with pytest.raises(SeqlabError, match="gram_buckets"):
        build_model(cfg, build_task(cfg))
