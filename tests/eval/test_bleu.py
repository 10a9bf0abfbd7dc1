"""seqlab.eval.bleu: sacreBLEU numbers and signatures, lowercase vs cased, tokenisation
warning, source-length buckets and their PNG."""

import pytest
import sacrebleu

from seqlab.eval.bleu import (
    LengthBucket,
    bleu_by_length,
    bucket_index,
    bucket_table,
    corpus_bleu,
    corpus_chrf,
    merge_sparse_tail,
    plot_bleu_by_length,
    score_corpus,
    tokenization_warning,
)

REFS = [
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two young children are playing with a ball in the park.",
    "A woman sits on a bench and reads a newspaper.",
    "The dog runs across the green grass.",
]
HYPS = [
    "A man in a blue shirt stands on a ladder and cleans windows.",
    "Two small children play with a ball in a park.",
    "A woman is sitting on a bench reading a newspaper.",
    "The dog is running over the grass.",
]


def test_scores_equal_sacrebleu_itself():
    # Exact equality (atol=0): the same sacreBLEU call on the same strings.
    assert corpus_bleu(HYPS, REFS).score == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    lc = sacrebleu.corpus_bleu(HYPS, [REFS], lowercase=True).score
    assert corpus_bleu(HYPS, REFS, lowercase=True).score == lc
    assert corpus_chrf(HYPS, REFS).score == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert 0.0 < corpus_bleu(HYPS, REFS).score < 100.0


def test_signatures_name_the_settings():
    scores = score_corpus(HYPS, REFS)
    assert scores["n_sentences"] == 4
    assert "case:mixed" in scores["bleu_signature"] and "tok:13a" in scores["bleu_signature"]
    assert "case:lc" in scores["bleu_lc_signature"] and "tok:13a" in scores["bleu_lc_signature"]
    assert "nc:6" in scores["chrf_signature"]
    assert f"version:{sacrebleu.__version__}" in scores["bleu_signature"]
    assert "warning" not in scores


def test_perfect_hypothesis_scores_100():
    scores = score_corpus(REFS, REFS)
    for key in ("bleu", "bleu_lc", "chrf"):
        assert scores[key] == pytest.approx(100.0, abs=1e-9)


def test_lowercase_bleu_ignores_case_only_mismatch():
    hyps = [r.upper() for r in REFS]
    assert corpus_bleu(hyps, REFS, lowercase=True).score == pytest.approx(100.0, abs=1e-9)
    assert corpus_bleu(hyps, REFS).score < 5.0  # only the 1-char tokens "." match


def test_tokenization_warning():
    tokenised = ["A man is standing on a ladder .", "It 's a dog , running .", "Hello@@ world"]
    message = tokenization_warning(tokenised)
    assert message is not None and "3 of 3" in message and "split punctuation" in message
    assert "subword markers" in message
    assert tokenization_warning(HYPS) is None
    # below the threshold: 1 line of 20 (5 %) with a split period is not flagged at 10 %
    assert tokenization_warning(HYPS * 5 + ["A dog ."] * 1, threshold=0.1) is None
    assert "warning" in score_corpus(tokenised, tokenised)


def test_bucket_index_boundaries():
    edges = (10, 15, 20, 25)
    got = [bucket_index(n, edges) for n in (1, 10, 11, 15, 16, 20, 21, 25, 26, 80)]
    assert got == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_bleu_by_length_assigns_and_scores_each_bucket():
    sources = ["w " * 5, "w " * 12, "w " * 12, "w " * 30]
    buckets = bleu_by_length(sources, HYPS, REFS)
    assert [b.label for b in buckets] == ["1-10", "11-15", "16-20", "21-25", "26+"]
    assert [b.n for b in buckets] == [1, 2, 0, 0, 1]
    assert buckets[2].bleu is None and buckets[2].bleu_lc is None
    # bucket 11-15 holds sentences 1 and 2: its score is sacreBLEU on exactly those
    expected = sacrebleu.corpus_bleu(HYPS[1:3], [REFS[1:3]]).score
    assert buckets[1].bleu == expected
    table = bucket_table(buckets)
    assert "| 11-15 | 2 |" in table and "| 16-20 | 0 | – |" in table


def test_sparse_open_bucket_merges_into_the_one_below():
    sources = ["w " * 5] * 40 + ["w " * 22] * 31 + ["w " * 30] * 2
    assert merge_sparse_tail(sources, (10, 15, 20, 25), 30) == (10, 15, 20)
    assert merge_sparse_tail(sources, (10, 15, 20, 25), 2) == (10, 15, 20, 25)
    assert merge_sparse_tail(sources, (10, 15, 20, 25), 0) == (10, 15, 20, 25)
    # the 33 long ones (22 and 30 words) fill 21+; with min 34 it merges down to 11+ and
    # then 1 edge is always kept
    assert merge_sparse_tail(sources, (10, 15, 20, 25), 34) == (10,)
    hyps = refs = ["a b c d"] * len(sources)
    buckets = bleu_by_length(sources, hyps, refs, merge_sparse_tail(sources, (10, 15, 20, 25)))
    assert [b.label for b in buckets] == ["1-10", "11-15", "16-20", "21+"]
    assert [b.n for b in buckets] == [40, 0, 0, 33]


def test_bucket_png_is_written(tmp_path):
    buckets = bleu_by_length(["a b", "a b c d e f g h i j k l"] * 2, HYPS, REFS)
    path = plot_bleu_by_length(buckets, tmp_path / "sub" / "buckets.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    two = plot_bleu_by_length({"a": buckets, "b": buckets}, tmp_path / "two.png", "bleu")
    assert two.stat().st_size > 1000
    assert "a bleu_lc" in bucket_table({"a": buckets, "b": buckets})


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="2 hypotheses but 1"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="empty corpus"):
        score_corpus([], [])
    with pytest.raises(TypeError):
        corpus_bleu("a b", "a b")
    empty = LengthBucket("1-10", 1, 10, 0, None, None, None)
    other = LengthBucket("1-5", 1, 5, 0, None, None, None)
    with pytest.raises(ValueError, match="same buckets"):
        bucket_table({"a": [empty], "b": [other]})
