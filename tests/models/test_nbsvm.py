"""The NB-weighted linear classifier (Wang & Manning 2012): n-gram feature ids, binarized
features, the log-count ratio against a hand computation, logits against a hand sum, and
the classify task fitting r on a fresh run only (a checkpoint brings its own r)."""

import math

import pytest
import torch

from seqlab.models.classifiers import BIGRAM_PRIME
from seqlab.models.nbsvm import (
    NBLinearClassifier,
    NBLinearConfig,
    binarize,
    log_count_ratio,
    ngram_ids,
)
from seqlab.nn.masks import padding_mask
from seqlab.registry import MODELS
from seqlab.tasks.classification import ClassificationTask, ClassifyConfig

V, K = 10, 7


def test_ngram_ids_hash_and_padding():
    x = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    mask = padding_mask(torch.tensor([3, 2]), 4)
    ids = ngram_ids(x, mask, 3, V, K)
    h56, h67 = (5 * BIGRAM_PRIME + 6) % K, (6 * BIGRAM_PRIME + 7) % K
    h567 = (h56 * BIGRAM_PRIME + 7) % K
    assert ids[0].tolist() == [5, 6, 7, -1, V + h56, V + h67, -1, V + h567, -1]
    h89 = (8 * BIGRAM_PRIME + 9) % K
    assert ids[1].tolist() == [8, 9, -1, -1, V + h89, -1, -1, -1, -1]
    assert ngram_ids(x, mask, 1, V, K).tolist() == [[5, 6, 7, -1], [8, 9, -1, -1]]


def test_binarize_counts_each_feature_once():
    ids = torch.tensor([[4, 5, 4, 5, -1, 12, 12], [3, -1, -1, -1, -1, -1, -1]])
    kept = [sorted(int(j) for j in row if j >= 0) for row in binarize(ids)]
    assert kept == [[4, 5, 12], [3]]


def test_log_count_ratio_by_hand():
    # two classes, three features; counts[c, j] = sentences of class c containing j
    counts = torch.tensor([[3.0, 0.0, 1.0], [1.0, 2.0, 1.0]])
    r = log_count_ratio(counts, alpha=1.0)
    p = [4.0, 1.0, 2.0]  # α + class-0 counts, ‖p‖₁ = 7
    q = [2.0, 3.0, 2.0]  # α + class-1 counts, ‖q‖₁ = 7
    hand = [math.log(p[j] / 7) - math.log(q[j] / 7) for j in range(3)]
    torch.testing.assert_close(r[0], torch.tensor(hand))
    torch.testing.assert_close(r[1], -torch.tensor(hand))  # binary: r_1 = −r_0
    # three classes, class 0 against the other two: p = 1 + [1, 0] = [2, 1],
    # q = 1 + ([0, 1] + [1, 1]) = [2, 3]; r_0 = log((2/3)/(2/5)), log((1/3)/(3/5))
    three = log_count_ratio(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), alpha=1.0)
    torch.testing.assert_close(three[0], torch.tensor([math.log(5 / 3), math.log(5 / 9)]))


def test_fit_and_logits_against_a_hand_sum():
    cfg = NBLinearConfig(ngram=2, buckets=K, alpha=1.0)
    model = NBLinearClassifier(cfg, vocab=V, n_classes=2)
    x = torch.tensor([[4, 5, 4], [6, 5, 0], [7, 0, 0]])
    lengths = torch.tensor([3, 2, 1])
    mask = padding_mask(lengths, 3)
    y = torch.tensor([1, 0, 1])
    model.fit_log_count_ratio([(x[:2], mask[:2], y[:2]), (x[2:], mask[2:], y[2:])])
    counts = torch.zeros(2, V + K)
    for row, n, c in zip(x.tolist(), lengths.tolist(), y.tolist(), strict=True):
        words = row[:n]
        feats = set(words) | {V + (a * BIGRAM_PRIME + b) % K for a, b in zip(words, words[1:])}
        for j in feats:
            counts[c, j] += 1  # binarized: "4 5 4" counts word 4 once
    torch.testing.assert_close(model.r, log_count_ratio(counts, 1.0).T)
    with torch.no_grad():
        model.W.normal_()
        model.b.normal_()
    logits = model(x, mask)
    for i, (row, n) in enumerate(zip(x.tolist(), lengths.tolist(), strict=True)):
        words = row[:n]
        feats = set(words) | {V + (a * BIGRAM_PRIME + b) % K for a, b in zip(words, words[1:])}
        hand = model.b + sum(model.W[j] * model.r[j] for j in feats)
        torch.testing.assert_close(logits[i], hand)


def test_registered_and_refuses_embeddings():
    entry = MODELS.get("nbsvm")
    assert entry.target is NBLinearClassifier
    with pytest.raises(ValueError, match="no embedding table"):
        NBLinearClassifier(NBLinearConfig(), vocab=V, n_classes=2, embedding_init=lambda e: e)
    with pytest.raises(ValueError, match="model.alpha"):
        NBLinearConfig(alpha=0.0)


def test_task_fits_r_on_a_fresh_run_only(tmp_path):
    lines = [f"pos\tgreat film {i}" for i in range(6)] + [f"neg\tdull film {i}" for i in range(6)]
    (tmp_path / "d.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = ClassifyConfig(data="tsv", path=str(tmp_path / "d.tsv"), min_freq=1, valid_fraction=0.2)
    task = ClassificationTask(cfg, None, 0)
    task.prepare()
    model = NBLinearClassifier(NBLinearConfig(buckets=K), **task.model_kwargs())
    task.init_model(model)
    great, dull = task.vocab.token_to_id("great"), task.vocab.token_to_id("dull")
    pos = task.labels.index("pos")
    assert model.r[great, pos] > 0 > model.r[dull, pos]  # "great" marks pos, "dull" neg
    assert model.r[task.vocab.token_to_id("film"), pos] == pytest.approx(
        model.r[task.vocab.token_to_id("film"), 1 - pos].neg().item()
    )
    again = ClassificationTask(cfg, None, 0)
    again.prepare(task.tokenizer_state())  # restoring a checkpoint: r comes from its weights
    fresh = NBLinearClassifier(NBLinearConfig(buckets=K), **again.model_kwargs())
    again.init_model(fresh)
    assert torch.equal(fresh.r, torch.ones_like(fresh.r))
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.r, model.r)
