"""The embedding corpus: tokenisation, sources (MR in cp1252), vocabulary and encoding."""

import gzip

import pytest
import torch

from seqlab.data.embedding_corpus import (
    build_corpus,
    planted_corpus,
    read_embedding_sentences,
    read_text_sentences,
    tokenize_words,
)
from seqlab.errors import DataError


def test_tokenize_words():
    assert tokenize_words("Two young, White males don't see 3 dogs' bowls.") == [
        "two", "young", "white", "males", "do", "n't", "see", "<num>", "dogs", "bowls",
    ]  # fmt: skip
    assert tokenize_words("The century’s co-writer paid 1,000 — café") == [
        "the", "century", "'s", "co-writer", "paid", "<num>", "café",
    ]  # fmt: skip


def _fake_data_dir(tmp_path):
    root = tmp_path / "data"
    (root / "ptb").mkdir(parents=True)
    (root / "ptb" / "ptb.train.txt.gz").write_bytes(gzip.compress(b" the <unk> fell N \n"))
    (root / "multi30k" / "task1" / "raw").mkdir(parents=True)
    (root / "multi30k" / "task1" / "raw" / "train.en.gz").write_bytes(
        gzip.compress(b"A dog runs.\nTwo dogs run.\n")
    )
    (root / "mr_polarity").mkdir()
    (root / "mr_polarity" / "rt-polarity.pos").write_bytes(b"a caf\xe9 \x85 fine \n")  # cp1252
    (root / "mr_polarity" / "rt-polarity.neg").write_bytes(b"dull dog \n")
    return root


def test_sources_are_read_with_their_encodings(tmp_path):
    sentences = read_embedding_sentences(_fake_data_dir(tmp_path))
    assert sentences == [
        ["the", "<unk>", "fell", "<num>"],
        ["a", "dog", "runs"],
        ["two", "dogs", "run"],
        ["a", "café", "fine"],  # 0xe9 = é, 0x85 = … (punctuation, dropped)
        ["dull", "dog"],
    ]
    with pytest.raises(DataError, match="unknown corpus source"):
        read_embedding_sentences(tmp_path, sources=["wiki"])


def test_conll_source_reads_the_train_split_only(tmp_path):
    root = tmp_path / "data" / "conll2003"
    root.mkdir(parents=True)
    files = {
        "train": "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"
        "1,000 CD I-NP O\n. . O O\n\n",
        "valid": "Lisbon NNP B-NP B-LOC\n\n",
        "test": "Oslo NNP B-NP B-LOC\n\n",
    }
    for split, text in files.items():
        (root / f"{split}.txt.gz").write_bytes(gzip.compress(text.encode()))
    assert read_embedding_sentences(tmp_path / "data", sources=["conll"]) == [
        ["eu", "rejects", "<num>"]
    ]


def test_build_corpus_drops_rare_words_and_unk_and_keeps_sentences():
    corpus = build_corpus([["a", "b", "<unk>", "a"], ["c", "a", "b"]], min_count=2)
    assert corpus.words == ["a", "b"]  # most frequent first; c (1) and <unk> dropped
    assert corpus.counts.tolist() == [3, 2]
    assert corpus.ids.tolist() == [0, 1, 0, 0, 1]
    assert corpus.sentence.tolist() == [0, 0, 0, 1, 1]
    with pytest.raises(DataError, match="smaller --min-count"):
        build_corpus([["a", "b"]], min_count=2)


def test_text_file_and_planted_corpus(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("Hello, world!\n\n...\nHello again\n", encoding="utf-8")
    assert read_text_sentences(path) == [["hello", "world"], ["hello", "again"]]
    sentences, questions = planted_corpus(50, n_rows=3, seed=0)
    assert len(sentences) == 50 and all(len(s) == 6 for s in sentences)
    assert len(questions) == 6 and questions[0] == ("e00", "e01", "e10", "e11")
    corpus = build_corpus(sentences, min_count=1)
    assert torch.equal(corpus.sentence, torch.arange(50).repeat_interleave(6))
