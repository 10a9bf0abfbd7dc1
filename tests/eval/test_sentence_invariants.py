"""``seqlab.eval.sentence_invariants``: the checks pass on every classifier and tagger (to
~1e-12 in float64) and each fails on a model with the bug it is there to catch."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from seqlab.catalog import load_all
from seqlab.eval.sentence_invariants import (
    classify_batches,
    pad_positions,
    readable_copy,
    run_sentence_checks,
    tag_batches,
)
from seqlab.registry import MODELS
from seqlab.tasks.classification import ClassificationTask
from seqlab.tasks.tagging import TaggingTask

pytestmark = pytest.mark.usefixtures("one_thread")

V, N_CHARS, C = 40, 20, 3
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
CLASSIFIERS = {
    "avg_embedding": ("avg_embedding", dict(d_embed=8, hidden=8)),
    "rnn_classifier/lstm-last": ("rnn_classifier", dict(cell="lstm", d_embed=8, hidden=8,
                                                         bidirectional=True, pool="last")),
    "rnn_classifier/gru-max": ("rnn_classifier", dict(cell="gru", d_embed=8, hidden=8,
                                                      num_layers=2, pool="max")),
    "rnn_classifier/rnn-mean": ("rnn_classifier", dict(cell="rnn", d_embed=8, hidden=8,
                                                       pool="mean")),
    "kim_cnn": ("kim_cnn", dict(d_embed=8, widths=(2, 3), n_maps=4, dropout=0.0)),
    "transformer_classifier": ("transformer_classifier", dict(d_model=16, n_heads=2, d_ff=32,
                                                              n_layers=2, dropout=0.0)),
    "nbsvm": ("nbsvm", dict(ngram=2, buckets=97)),
}  # fmt: skip
TAGGERS = {
    "crf/char-lstm": dict(char="lstm"),
    "crf/char-cnn/gru": dict(char="cnn", cell="gru", num_layers=2),
    "softmax/none": dict(char="none", decoder="softmax"),
    "softmax/iob2": dict(char="cnn", decoder="softmax", constraint="iob2"),
}
SMALL_TAGGER = dict(word_dim=8, char_dim=6, char_hidden=5, char_filters=6, hidden=8, dropout=0.0)


def sentences(n: int = 6, lo: int = 1, hi: int = 9, vocab: int = V) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(4, vocab, (t,), generator=g).tolist() for t in lengths]


def classifier(key: str) -> nn.Module:
    load_all()
    name, kw = CLASSIFIERS[key]
    entry = MODELS.get(name)
    torch.manual_seed(0)
    model = entry.target(entry.config_cls(**kw), vocab=V, n_classes=C, pad_id=0)
    for p in model.parameters():  # trained-looking weights: no zero biases, no ties
        p.data.add_(0.1 * torch.randn_like(p))
    return model.eval()


def tagger(key: str) -> nn.Module:
    load_all()
    entry = MODELS.get("bilstm_tagger")
    torch.manual_seed(0)
    cfg = entry.config_cls(**SMALL_TAGGER, **TAGGERS[key])
    model = entry.target(cfg, n_words=V, n_chars=N_CHARS, tags=TAGS, pad_id=0)
    for p in model.parameters():
        p.data.add_(0.1 * torch.randn_like(p))
    return model.eval()


def class_batches(ids=None):
    fake = SimpleNamespace(_batch=functools.partial(ClassificationTask._batch, None))
    return classify_batches(fake, sentences() if ids is None else ids, None)


def tagging_batches():
    self = SimpleNamespace(cfg=SimpleNamespace(normalize="token"))
    fake = SimpleNamespace(_batch=functools.partial(TaggingTask._batch, self))
    words = sentences()
    g = torch.Generator().manual_seed(5)
    chars = [[torch.randint(4, N_CHARS, (int(torch.randint(1, 6, (1,), generator=g)),),
                            generator=g).tolist() for _ in s] for s in words]  # fmt: skip
    return tag_batches(fake, words, chars)


def names(checks):
    return [c.name for c in checks]


@pytest.mark.parametrize("key", sorted(CLASSIFIERS))
def test_every_classifier_passes_in_float64(key):
    model = classifier(key)
    checks = run_sentence_checks(model, class_batches())
    expected = ["batched == unbatched", "more padding changes nothing"]
    assert names(checks) == expected + (["fused == readable"] if "rnn" in key else [])
    for c in checks:
        assert c.passed and c.max_diff < 1e-11, c
    assert next(model.parameters()).dtype == torch.float32  # checked on a float64 copy


@pytest.mark.parametrize("key", sorted(TAGGERS))
def test_every_tagger_passes_in_float64(key):
    checks = run_sentence_checks(tagger(key), tagging_batches())
    expected = ["batched == unbatched", "more padding changes nothing", "fused == readable"]
    assert names(checks) == expected + (["Viterbi score == s(x, ŷ)"] if "crf" in key else [])
    for c in checks:
        assert c.passed and c.max_diff < 1e-11 and c.mismatches == 0, c
    assert "word" in checks[0].compared or "tags" in checks[0].compared


def test_float32_passes_at_its_tolerance():
    for c in run_sentence_checks(tagger("crf/char-lstm"), tagging_batches(), torch.float32):
        assert c.passed and c.tol == 1e-3, c


class MeanOverPadding(nn.Module):
    """A classifier that averages its embeddings over every position, padding included
    (the mask is ignored), or that lets rows read each other."""

    def __init__(self, bug: str):
        super().__init__()
        torch.manual_seed(0)
        self.bug, self.E, self.W = bug, nn.Embedding(V, 8, padding_idx=0), nn.Linear(8, C)

    def forward(self, x, mask):
        e = self.E(x)  # (B, T, 8)
        if self.bug == "padding":
            h = e.mean(1)  # (B, 8): padded zeros pull the mean towards 0
        else:
            h = (e * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)  # (B, 8)
        logits = self.W(h)  # (B, C)
        return logits + 0.5 * logits.roll(1, dims=0) if self.bug == "leak" else logits


@pytest.mark.parametrize(
    "bug, fails",
    [("padding", {"batched == unbatched", "more padding changes nothing"}),
     ("leak", {"batched == unbatched"}),
     ("none", set())],
)  # fmt: skip
def test_each_classifier_bug_fails_its_check(bug, fails):
    checks = run_sentence_checks(MeanOverPadding(bug), class_batches())
    failed = {c.name for c in checks if not c.passed}
    assert failed == fails, [(c.name, c.max_diff) for c in checks]
    for c in checks:
        if c.name in fails:
            assert c.max_diff > 1e-4 and c.worst.startswith("sentence ")


def crf_log_z_through_padding(crf):
    """The forward algorithm keeps adding P[t] and A after a sentence's end."""

    def log_partition(P, mask):
        P, A, A_start, A_end = crf._prepare(P, mask)
        alpha = A_start + P[:, 0]
        for t in range(1, P.shape[1]):
            alpha = torch.logsumexp(alpha.unsqueeze(2) + A, dim=1) + P[:, t]
        return torch.logsumexp(alpha + A_end, dim=1)

    return log_partition


def test_each_tagger_bug_fails_its_check(monkeypatch):
    model = tagger("crf/char-lstm")
    model.crf.log_partition = crf_log_z_through_padding(model.crf)
    checks = {c.name: c for c in run_sentence_checks(model, tagging_batches())}
    assert not checks["batched == unbatched"].passed
    assert "−log p(ŷ | x)" in checks["batched == unbatched"].worst
    assert not checks["more padding changes nothing"].passed
    assert checks["fused == readable"].passed

    model = tagger("crf/char-lstm")
    decode = model.crf.decode
    model.crf.decode = lambda P, mask: (decode(P, mask)[0], decode(P, mask)[1] + 0.25)
    checks = {c.name: c for c in run_sentence_checks(model, tagging_batches())}
    assert not checks["Viterbi score == s(x, ŷ)"].passed
    assert abs(checks["Viterbi score == s(x, ŷ)"].max_diff - 0.25) < 1e-9
    assert all(c.passed for n, c in checks.items() if n != "Viterbi score == s(x, ŷ)")

    from seqlab.nn import recurrent

    fused = recurrent.fused_forward

    def drifting(*args, **kwargs):
        out, final = fused(*args, **kwargs)
        return out + 1e-3, final

    monkeypatch.setattr(recurrent, "fused_forward", drifting)
    checks = {c.name: c for c in run_sentence_checks(tagger("softmax/none"), tagging_batches())}
    assert not checks["fused == readable"].passed
    assert checks["batched == unbatched"].passed


def test_tag_mismatch_fails_even_below_tolerance():
    """A decoded tag that differs fails the check, whatever the log-probabilities say."""
    model = tagger("softmax/none")
    decode = model.decode

    def flip_alone(P, mask):
        tags = decode(P, mask)
        return (tags + 1) % len(TAGS) if P.size(0) == 1 else tags

    model.decode = flip_alone
    checks = {c.name: c for c in run_sentence_checks(model, tagging_batches())}
    assert checks["batched == unbatched"].mismatches == 6
    assert not checks["batched == unbatched"].passed


def test_helpers_and_bad_input():
    t = torch.ones(2, 3, 4, dtype=torch.long)
    assert pad_positions(t, 2, 0).shape == (2, 5, 4) and pad_positions(t, 2, 0)[:, 3:].sum() == 0
    m = torch.ones(2, 3, dtype=torch.bool)
    assert pad_positions(m, 1, False).tolist() == [[True, True, True, False]] * 2
    assert readable_copy(classifier("kim_cnn")) is None  # nothing recurrent
    with pytest.raises(ValueError, match="float64 or torch.float32"):
        run_sentence_checks(classifier("kim_cnn"), class_batches(), torch.float16)
    with pytest.raises(ValueError, match="at least one sentence"):
        run_sentence_checks(classifier("kim_cnn"), class_batches([]))
