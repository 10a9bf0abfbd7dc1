"""word2vec text format: exact round trip, file:line errors, Embedding initialisation."""

import pytest
import torch
from torch import nn

from seqlab.data.vocab import Vocab
from seqlab.data.word_vectors_io import (
    WordVectors,
    init_embedding,
    load_word2vec_text,
    save_word2vec_text,
)
from seqlab.errors import DataError
from seqlab.nn.embedding import Embedding


def test_round_trip_is_exact(tmp_path):
    g = torch.Generator().manual_seed(0)
    wv = WordVectors(["the", "café", "n't", "<num>"], torch.randn(4, 5, generator=g) * 3)
    path = tmp_path / "v.txt"
    save_word2vec_text(wv, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "4 5" and lines[2].startswith("café ")
    back = load_word2vec_text(path)
    assert back.words == wv.words
    assert torch.equal(back.vectors, wv.vectors)  # %.9g reads back to the same float32


def test_reads_trailing_spaces_and_gzip(tmp_path):
    import gzip

    text = "2 2\na 1 2 \nb -0.5 3e-2 \n"  # the C tool ends lines with a space
    (tmp_path / "v.txt.gz").write_bytes(gzip.compress(text.encode()))
    wv = load_word2vec_text(tmp_path / "v.txt.gz")
    torch.testing.assert_close(wv.vectors, torch.tensor([[1.0, 2.0], [-0.5, 0.03]]))


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("2\na 1 2\n", 1, "header has 1 fields"),
        ("two 2\na 1 2\nb 1 2\n", 1, "not two integers"),
        ("0 2\n", 1, "must be >= 1"),
        ("2 2\na 1 2\nb 1\n", 3, "found 1 values, expected 2"),
        ("2 2\na 1 x\nb 1 2\n", 2, "'x' for word 'a' is not a number"),
        ("3 2\na 1 2\nb 1 2\na 3 4\n", 4, "duplicate word 'a' (first on line 2)"),
        ("2 2\na 1 2\nb nan 2\n", 3, "non-finite"),
        ("1 2\na 1 2\nb 1 2\n", 3, "header says 1 words but the file has 2"),
        ("2 2\na 1 2\n\nb 1 2\n", 3, "empty line"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, text, line, words):
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_word2vec_text(path)
    assert info.value.line == line
    assert f"{path}:{line}: " in str(info.value) and words in str(info.value)


def test_truncated_file_names_the_file(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("3 1\na 1\nb 2\n", encoding="utf-8")
    with pytest.raises(DataError, match="header says 3 words but the file has 2") as info:
        load_word2vec_text(path)
    assert info.value.line is None and str(path) in str(info.value)


def test_save_rejects_words_with_spaces(tmp_path):
    with pytest.raises(DataError, match="whitespace"):
        save_word2vec_text(WordVectors(["new york"], torch.zeros(1, 2)), tmp_path / "v.txt")


def test_init_embedding_copies_rows_and_reports_coverage(tmp_path):
    path = tmp_path / "v.txt"
    file_vectors = torch.tensor(
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [0.0, 1.0, 0.0]]
    )
    save_word2vec_text(WordVectors(["the", "cat", "<pad>", "<num>"], file_vectors), path)
    vocab = Vocab(["the", "Cat", "dog", "1,000"])  # ids 4, 5, 6, 7 after the 4 specials
    emb = Embedding(len(vocab), 3, padding_idx=0)
    before = emb.weight.detach().clone()
    coverage = init_embedding(emb, vocab, path)
    assert coverage == pytest.approx(3 / 4)  # "the", "Cat" via "cat", "1,000" via "<num>"
    torch.testing.assert_close(emb.weight[4], file_vectors[0], atol=0, rtol=0)
    torch.testing.assert_close(emb.weight[5], file_vectors[1], atol=0, rtol=0)
    torch.testing.assert_close(emb.weight[6], before[6], atol=0, rtol=0)  # "dog" is missing
    torch.testing.assert_close(emb.weight[7], file_vectors[3], atol=0, rtol=0)
    assert torch.equal(emb.weight[0], torch.zeros(3))  # the <pad> row is never overwritten
    plain = nn.Embedding(len(vocab), 3)
    coverage = init_embedding(plain, vocab.tokens, path, lowercase_fallback=False)
    assert coverage == pytest.approx(1 / 4)  # only "the" without the fallbacks


def test_init_embedding_dimension_mismatch_is_a_data_error(tmp_path):
    path = tmp_path / "v.txt"
    save_word2vec_text(WordVectors(["a"], torch.zeros(1, 4)), path)
    with pytest.raises(DataError, match="dimension 4 but the embedding layer 3"):
        init_embedding(nn.Embedding(5, 3), Vocab(["a"]), path)
