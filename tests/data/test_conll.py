"""CoNLL reader: sentences, -DOCSTART- and blank lines, gzip, file:line errors, IOB1 → IOB2,
and entity spans read exactly as seqeval's (conlleval's) default mode reads them."""

import gzip
import random

import pytest
from seqeval.metrics.sequence_labeling import get_entities

from seqlab.data.conll import (
    CONLL2003_TAGS,
    entity_spans,
    iob1_to_iob2,
    locate_conll2003,
    read_conll,
)
from seqlab.errors import DataError

GOOD = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER


-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
"""


def write(tmp_path, text, name="f.txt"):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["f.txt", "f.txt.gz"])
def test_reads_sentences_skipping_docstart_and_blank_lines(tmp_path, name):
    sents = read_conll(write(tmp_path, GOOD, name), n_columns=4, tagset=CONLL2003_TAGS)
    assert [s.tokens for s in sents] == [
        ("EU", "rejects", "German", "call"),
        ("Peter", "Blackburn"),
        ("BRUSSELS", "1996-08-22"),
    ]
    assert [s.tags for s in sents] == [
        ("B-ORG", "O", "B-MISC", "O"),
        ("B-PER", "I-PER"),
        ("B-LOC", "O"),
    ]
    assert [s.line for s in sents] == [3, 8, 14]


def test_last_sentence_without_trailing_blank_line_and_tabs(tmp_path):
    path = write(tmp_path, "a\tO\nb\tB-X\nc\tI-X")
    (s,) = read_conll(path)
    assert s.tokens == ("a", "b", "c") and s.tags == ("O", "B-X", "I-X")


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("EU NNP B-NP B-ORG\nrejects VBZ O\n", 2, "3 columns, expected 4"),
        ("EU NNP B-NP B-ORG\n\nx NN O B-FOO\n", 3, "unknown tag 'B-FOO' in column 4"),
        ("EU NNP B-NP ORG\n", 1, "unknown tag 'ORG'"),
        ("EU NNP B-NP O\nx NN I-NP I-PER\n", 2, "I-PER after O is not valid IOB2"),
        ("EU NNP B-NP B-LOC\nx NN I-NP I-PER\n", 2, "I-PER after B-LOC"),
        ("x NN I-NP I-PER\n", 1, "I-PER after O"),
    ],
)
def test_errors_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(DataError, match=message) as info:
        read_conll(path, n_columns=4, tagset=CONLL2003_TAGS)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert info.value.line == line


def test_column_count_is_taken_from_the_first_line(tmp_path):
    path = write(tmp_path, "a B O\nb O\n")
    with pytest.raises(DataError, match="2 columns, expected 3") as info:
        read_conll(path)
    assert info.value.line == 2


def test_other_errors(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_conll(tmp_path / "missing.txt")
    with pytest.raises(DataError, match="no sentences"):
        read_conll(write(tmp_path, "-DOCSTART- -X- -X- O\n\n"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a O\nb\xff O\n")
    with pytest.raises(DataError, match="not UTF-8") as info:
        read_conll(bad)
    assert info.value.line == 2
    with pytest.raises(DataError, match="need a token and a tag"):
        read_conll(write(tmp_path, "onlyone\n"))


def test_iob1_files_are_converted_to_iob2(tmp_path):
    assert iob1_to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == [
        "B-PER",
        "I-PER",
        "B-PER",
        "O",
        "B-LOC",
        "B-ORG",
    ]
    path = write(tmp_path, "a I-PER\nb I-PER\nc O\nd I-LOC\n")
    (s,) = read_conll(path, scheme="iob1")
    assert s.tags == ("B-PER", "I-PER", "O", "B-LOC")
    with pytest.raises(DataError, match="task.scheme=iob1"):
        read_conll(path)


def test_entity_spans_hand_example():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "B-MISC"]
    assert entity_spans(tags) == [
        ("PER", 0, 2),
        ("LOC", 3, 5),  # I- after O starts an entity (conlleval)
        ("LOC", 5, 6),
        ("ORG", 6, 7),  # I- of another type starts a new one
        ("MISC", 7, 8),
    ]
    assert entity_spans([]) == [] and entity_spans(["O", "O"]) == []


def test_entity_spans_equal_seqeval_default_mode_on_random_sequences():
    rng = random.Random(0)
    for _ in range(500):
        tags = [rng.choice(CONLL2003_TAGS) for _ in range(rng.randint(0, 12))]
        ours = entity_spans(tags)
        theirs = [(kind, start, end + 1) for kind, start, end in get_entities(tags)]
        assert sorted(ours) == sorted(theirs), tags


def test_locate_conll2003(tmp_path):
    with pytest.raises(DataError, match="no data folder"):
        locate_conll2003(None)
    with pytest.raises(DataError, match="not found"):
        locate_conll2003(tmp_path)
    folder = tmp_path / "conll2003"
    folder.mkdir()
    for name in ("train", "valid", "test"):
        write(folder, GOOD, f"{name}.txt.gz")
    assert locate_conll2003(tmp_path) == folder
    assert locate_conll2003(folder) == folder
