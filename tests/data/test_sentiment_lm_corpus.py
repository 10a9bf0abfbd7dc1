"""The LM pretraining text for MR classifiers: the classifier's own tokens, every source's
sentences once, shuffled reproducibly, unknown sources refused."""

import gzip

import pytest

from seqlab.data.sentiment_lm_corpus import pretraining_sentences, write_pretraining_text
from seqlab.errors import DataError
from seqlab.tasks.classification import clean_str


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "ptb").mkdir()
    with gzip.open(tmp_path / "ptb" / "ptb.train.txt.gz", "wt", encoding="utf-8") as f:
        f.write(" the market fell N points \n it did n't <unk> \n")
    raw = tmp_path / "multi30k" / "task1" / "raw"
    raw.mkdir(parents=True)
    with gzip.open(raw / "train.en.gz", "wt", encoding="utf-8") as f:
        f.write("Two dogs don't run.\nA man's hat!\n")
    mr = tmp_path / "mr_polarity"
    mr.mkdir()
    (mr / "rt-polarity.pos").write_bytes(b"a joy \x97 truly , it's fun \n")
    (mr / "rt-polarity.neg").write_bytes(b"dull and slow . \n")
    return tmp_path


def test_sentences_are_in_the_classifier_tokens(data_dir):
    lines = pretraining_sentences(data_dir)
    assert lines == [
        "the market fell N points",
        "it did n't <unk>",
        " ".join(clean_str("Two dogs don't run.")),
        " ".join(clean_str("A man's hat!")),
        " ".join(clean_str("a joy \u2014 truly , it's fun")),
        " ".join(clean_str("dull and slow .")),
    ]
    assert "n't" in lines[2].split() and "'s" in lines[3].split()
    assert pretraining_sentences(data_dir, ["mr"]) == lines[4:]


def test_written_file_is_a_seeded_shuffle_of_all_sentences(data_dir, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    assert write_pretraining_text(data_dir, a, seed=1) == 6
    write_pretraining_text(data_dir, b, seed=1)
    text = a.read_text(encoding="utf-8")
    assert text == b.read_text(encoding="utf-8")
    assert sorted(text.splitlines()) == sorted(pretraining_sentences(data_dir))
    assert not list(tmp_path.glob(".*.tmp"))


def test_unknown_source_is_refused(data_dir):
    with pytest.raises(DataError, match="unknown LM corpus source"):
        pretraining_sentences(data_dir, ["ptb", "wiki"])
