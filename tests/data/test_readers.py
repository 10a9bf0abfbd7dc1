"""Readers: behaviour on small files written here (plain and .gz), every error message
(file, line, hint), and one smoke test per real dataset in shared/data."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest

from seqlab.data.readers import (
    read_char_stream,
    read_conll,
    read_labelled,
    read_lines,
    read_parallel,
    read_polarity,
    read_word_stream,
)
from seqlab.errors import DataError

from . import SHARED_DATA


def write(dir: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``dir/name``, gzip-compressed when the name ends in .gz."""
    path = dir / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def check_error(err: pytest.ExceptionInfo[DataError], path: Path, line: int | None, hint: str):
    """The message starts with ``path:line:`` (or ``path:`` for file-level errors) and
    contains the hint."""
    msg = str(err.value)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert msg.startswith(where), msg
    assert hint in msg, msg
    assert err.value.path == path and err.value.line == line


PLAIN_GZ = pytest.mark.parametrize("name", ["f.txt", "f.txt.gz"])


# --- read_lines -------------------------------------------------------------------------


@PLAIN_GZ
def test_read_lines_strips_trailing_whitespace_only(tmp_path, name):
    path = write(tmp_path, name, b"  a b \r\nx\ty\t\nlast without newline")
    assert read_lines(path) == ["  a b", "x\ty", "last without newline"]


def test_read_lines_drops_utf8_bom_and_decodes_utf8(tmp_path):
    path = write(tmp_path, "bom.txt", "\ufeffcafé\nÄrger\n".encode())
    assert read_lines(path) == ["café", "Ärger"]


def test_read_lines_splits_on_newline_only_not_on_nel(tmp_path):
    # latin-1 decodes 0x85 to U+0085 (NEL), which str.splitlines() would treat as a break.
    path = write(tmp_path, "nel.txt", b"a\x85b\nc\n")
    assert read_lines(path, encoding="latin-1") == ["a\x85b", "c"]
    assert read_lines(path, encoding="cp1252") == ["a…b", "c"]


@PLAIN_GZ
def test_read_lines_invalid_utf8_names_line_and_byte_offset(tmp_path, name):
    path = write(tmp_path, name, b"ok\ncaf\xe9 au lait\n")
    with pytest.raises(DataError, match="byte 0xe9 at byte offset 6 \\(column 4\\)") as err:
        read_lines(path)
    check_error(err, path, 2, "re-encode it")


def test_read_lines_invalid_byte_in_other_encoding(tmp_path):
    path = write(tmp_path, "x.txt", b"a\nb\nc\x81\n")  # 0x81 is undefined in cp1252
    with pytest.raises(DataError, match="invalid cp1252 byte 0x81") as err:
        read_lines(path, encoding="cp1252")
    check_error(err, path, 3, "pass the file's real encoding=")


def test_read_lines_unknown_encoding(tmp_path):
    path = write(tmp_path, "x.txt", b"a\n")
    with pytest.raises(DataError, match="unknown encoding 'klingon'") as err:
        read_lines(path, encoding="klingon")
    check_error(err, path, None, "'cp1252'")


@PLAIN_GZ
def test_read_lines_empty_lines_rejected_with_line_numbers(tmp_path, name):
    path = write(tmp_path, name, b"a\n\nb\n \t\nc\n")
    with pytest.raises(DataError, match="2 empty lines in all, at lines 2, 4") as err:
        read_lines(path)
    check_error(err, path, 2, "allow_empty_lines=True")
    assert read_lines(path, allow_empty_lines=True) == ["a", "", "b", "", "c"]


def test_read_lines_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="file not found") as err:
        read_lines(path)
    check_error(err, path, None, "check the path")


def test_read_lines_directory(tmp_path):
    with pytest.raises(DataError, match="is a directory") as err:
        read_lines(tmp_path)
    check_error(err, tmp_path, None, "name a file inside it")


@PLAIN_GZ
def test_read_lines_empty_file(tmp_path, name):
    path = write(tmp_path, name, b"")
    with pytest.raises(DataError, match="file is empty") as err:
        read_lines(path)
    check_error(err, path, None, "point to the file")


def test_read_lines_corrupt_gzip(tmp_path):
    path = tmp_path / "plain.txt.gz"
    path.write_bytes(b"not gzip at all\n")
    with pytest.raises(DataError, match="not a valid gzip file") as err:
        read_lines(path)
    check_error(err, path, None, "gzip -k FILE")


def test_read_lines_truncated_gzip(tmp_path):
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(b"a line\n" * 100)[:-12])
    with pytest.raises(DataError, match="not a valid gzip file") as err:
        read_lines(path)
    check_error(err, path, None, "re-compress it")


# --- read_parallel ----------------------------------------------------------------------


@PLAIN_GZ
def test_read_parallel_pairs(tmp_path, name):
    src = write(tmp_path, "src." + name, b"a b\nc \n")
    tgt = write(tmp_path, "tgt." + name, b"x\ny z\n")
    pairs = read_parallel(src, tgt)
    assert pairs == [("a b", "x"), ("c", "y z")]
    assert pairs.dropped == []


@pytest.mark.parametrize("longer", ["src", "tgt"])
def test_read_parallel_line_count_mismatch_names_both_files(tmp_path, longer):
    paths = {
        "src": write(tmp_path, "s.txt", b"1\n2\n3\n" if longer == "src" else b"1\n2\n"),
        "tgt": write(tmp_path, "t.txt", b"1\n2\n3\n" if longer == "tgt" else b"1\n2\n"),
    }
    shorter = paths["tgt" if longer == "src" else "src"]
    with pytest.raises(DataError) as err:
        read_parallel(paths["src"], paths["tgt"])
    check_error(err, paths[longer], 3, "must be line-aligned")
    assert f"3 lines here but 2 lines in {shorter}" in str(err.value)


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_read_parallel_empty_side_is_error_with_line(tmp_path, side):
    src = write(tmp_path, "s.txt", b"a\n\nc\n" if side == "src" else b"a\nb\nc\n")
    tgt = write(tmp_path, "t.txt", b"x\n  \nz\n" if side == "tgt" else b"x\ny\nz\n")
    with pytest.raises(DataError, match="empty line in a parallel corpus") as err:
        read_parallel(src, tgt)
    check_error(err, src if side == "src" else tgt, 2, "delete line 2 from BOTH files")
    other, text = (tgt, "'y'") if side == "src" else (src, "'b'")
    assert f"line 2 of {other} is {text}" in str(err.value)


def test_read_parallel_drop_empty_counts_and_logs(tmp_path, caplog):
    src = write(tmp_path, "s.txt", b"a\n\nc\nd\n")
    tgt = write(tmp_path, "t.txt", b"w\nx\ny\n\n")
    with caplog.at_level(logging.WARNING, logger="seqlab.data"):
        pairs = read_parallel(src, tgt, drop_empty=True)
    assert pairs == [("a", "w"), ("c", "y")]
    assert pairs.dropped == [2, 4]
    assert "dropped 2 pairs with an empty side (lines 2, 4)" in caplog.text


def test_read_parallel_nothing_left_after_dropping(tmp_path):
    src = write(tmp_path, "s.txt", b"a\n\n")
    tgt = write(tmp_path, "t.txt", b"\nb\n")
    with pytest.raises(DataError, match="no non-empty pairs") as err:
        read_parallel(src, tgt, drop_empty=True)
    check_error(err, src, None, "check both files")


# --- read_labelled / read_polarity ------------------------------------------------------


@PLAIN_GZ
def test_read_labelled_tsv_and_header(tmp_path, name):
    path = write(tmp_path, name, b"sentence\tlabel\na fine film \t1\nbad\t0\n")
    assert read_labelled(path, "tsv", header=True) == [("a fine film", "1"), ("bad", "0")]


def test_read_labelled_label_first(tmp_path):
    path = write(tmp_path, "trec.txt", b"DESC:manner How did serfdom develop ?\nLOC:city Where ?\n")
    assert read_labelled(path, "label_first") == [
        ("How did serfdom develop ?", "DESC:manner"),
        ("Where ?", "LOC:city"),
    ]


def test_read_labelled_tsv_wrong_field_count(tmp_path):
    path = write(tmp_path, "x.tsv", b"good\t1\nhas\ttwo tabs\t0\n")
    with pytest.raises(DataError, match="found 3 TAB-separated fields, expected 2") as err:
        read_labelled(path, "tsv")
    check_error(err, path, 2, "exactly one TAB")


def test_read_labelled_tsv_empty_text(tmp_path):
    path = write(tmp_path, "x.tsv", b"good\t1\n \t0\n")
    with pytest.raises(DataError, match="text is empty") as err:
        read_labelled(path, "tsv")
    check_error(err, path, 2, "`text<TAB>label`")


def test_read_labelled_label_first_without_text(tmp_path):
    path = write(tmp_path, "x.txt", b"POS fine\nNEG\n")
    with pytest.raises(DataError, match="text is empty") as err:
        read_labelled(path, "label_first")
    check_error(err, path, 2, "`label text…`")


def test_read_labelled_header_only(tmp_path):
    path = write(tmp_path, "x.tsv", b"sentence\tlabel\n")
    with pytest.raises(DataError, match="no examples after the header") as err:
        read_labelled(path, "tsv", header=True)
    check_error(err, path, None, "check header=")


def test_read_labelled_rejects_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="'tsv' or 'label_first'"):
        read_labelled(write(tmp_path, "x", b"a\n"), "csv")  # type: ignore[arg-type]


def test_read_polarity_cp1252(tmp_path):
    pos = write(tmp_path, "p", b"a gem \x97 truly . \nfun \x85 \n")
    neg = write(tmp_path, "n", b"dull \x96 and \x91flat\x92 . \n")
    assert read_polarity(pos, neg) == [
        ("a gem — truly .", "pos"),
        ("fun …", "pos"),
        ("dull – and ‘flat’ .", "neg"),
    ]
    with pytest.raises(DataError, match="invalid utf-8 byte 0x97") as err:
        read_polarity(pos, neg, encoding="utf-8")
    check_error(err, pos, 1, "encoding='cp1252'")


# --- read_conll -------------------------------------------------------------------------

CONLL = b"""-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER


-DOCSTART- -X- -X- O

Bonn NNP B-NP B-LOC"""


@PLAIN_GZ
def test_read_conll_sentences_skip_docstart(tmp_path, name):
    sentences = read_conll(write(tmp_path, name, CONLL))
    assert sentences == [
        {
            "token": ["EU", "rejects"],
            "pos": ["NNP", "VBZ"],
            "chunk": ["B-NP", "B-VP"],
            "ner": ["B-ORG", "O"],
        },
        {
            "token": ["Peter", "Blackburn"],
            "pos": ["NNP", "NNP"],
            "chunk": ["B-NP", "I-NP"],
            "ner": ["B-PER", "I-PER"],
        },
        {"token": ["Bonn"], "pos": ["NNP"], "chunk": ["B-NP"], "ner": ["B-LOC"]},
    ]


def test_read_conll_custom_columns(tmp_path):
    path = write(tmp_path, "two.txt", b"Paris B-LOC\nis O\n\n")
    assert read_conll(path, columns=("token", "ner")) == [
        {"token": ["Paris", "is"], "ner": ["B-LOC", "O"]}
    ]


@PLAIN_GZ
def test_read_conll_wrong_column_count(tmp_path, name):
    path = write(tmp_path, name, CONLL.replace(b"rejects VBZ B-VP O", b"rejects VBZ O"))
    with pytest.raises(DataError, match="found 3 columns, expected 4") as err:
        read_conll(path)
    check_error(err, path, 4, "columns=('token', 'ner')")


def test_read_conll_without_sentences(tmp_path):
    path = write(tmp_path, "doc.txt", b"-DOCSTART- -X- -X- O\n\n\n")
    with pytest.raises(DataError, match="no sentences found") as err:
        read_conll(path)
    check_error(err, path, None, "is this a CoNLL file?")


# --- streams ----------------------------------------------------------------------------


@PLAIN_GZ
def test_read_char_stream_keeps_text_exactly(tmp_path, name):
    text = "First Citizen: \n\nBefore we proceed, hear me speak.\n"
    assert read_char_stream(write(tmp_path, name, text.encode())) == text


def test_read_char_stream_invalid_utf8(tmp_path):
    path = write(tmp_path, "c.txt", b"abc\ndef\n\xffg\n")
    with pytest.raises(DataError, match="byte 0xff at byte offset 8 \\(column 1\\)") as err:
        read_char_stream(path)
    check_error(err, path, 3, "re-encode it")


@PLAIN_GZ
def test_read_word_stream_appends_eos(tmp_path, name):
    path = write(tmp_path, name, b" the cat \n sat\n")
    assert read_word_stream(path) == ["the", "cat", "</s>", "sat", "</s>"]
    assert read_word_stream(path, eos="<eos>")[2] == "<eos>"
    assert read_word_stream(path, eos=None) == ["the", "cat", "sat"]


def test_read_word_stream_empty_lines(tmp_path):
    path = write(tmp_path, "w.txt", b"a b\n\nc\n")
    with pytest.raises(DataError, match="empty line") as err:
        read_word_stream(path)
    check_error(err, path, 2, "allow_empty_lines=True")
    assert read_word_stream(path, allow_empty_lines=True) == ["a", "b", "</s>", "</s>", "c", "</s>"]


# --- real datasets (skipped only when shared/data is absent, e.g. in a fresh clone) -----

real = pytest.mark.skipif(SHARED_DATA is None, reason="shared/data not found (SEQLAB_DATA_DIR)")


@real
@pytest.mark.parametrize(
    ("split", "n"), [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)]
)
def test_real_multi30k(split, n):
    raw = SHARED_DATA / "multi30k" / "task1" / "raw"
    pairs = read_parallel(raw / f"{split}.en.gz", raw / f"{split}.de.gz")
    assert len(pairs) == n and pairs.dropped == []
    assert all(s == s.rstrip() and t == t.rstrip() for s, t in pairs)
    if split == "train":  # README: 40 German lines end with a space, one contains a TAB
        assert sum("\t" in t for _, t in pairs) == 1


@real
def test_real_tinyshakespeare():
    text = read_char_stream(SHARED_DATA / "tinyshakespeare" / "input.txt")
    assert len(text) == 1_115_394 and len(set(text)) == 65 and text.count("\n") == 40_000


@real
def test_real_mr_polarity():
    mr = SHARED_DATA / "mr_polarity"
    data = read_polarity(mr / "rt-polarity.pos", mr / "rt-polarity.neg")
    assert [label for _, label in data].count("pos") == 5331 and len(data) == 2 * 5331
    assert any("—" in t for t, _ in data)  # cp1252 byte 0x97
    assert len({t for t, _ in data}) == len(data)  # README: no duplicates
    with pytest.raises(DataError) as err:
        read_lines(mr / "rt-polarity.pos")
    check_error(err, mr / "rt-polarity.pos", 44, "encoding='cp1252'")


@real
@pytest.mark.parametrize(
    ("split", "n_sent", "n_tok"),
    [("train", 14041, 203621), ("valid", 3250, 51362), ("test", 3453, 46435)],
)
def test_real_conll2003(split, n_sent, n_tok):
    sentences = read_conll(SHARED_DATA / "conll2003" / f"{split}.txt.gz")
    assert len(sentences) == n_sent
    assert sum(len(s["token"]) for s in sentences) == n_tok
    tags = {t for s in sentences for t in s["ner"]}
    assert tags == {"O"} | {f"{b}-{e}" for b in "BI" for e in ("PER", "LOC", "ORG", "MISC")}


@real
@pytest.mark.parametrize(("split", "n"), [("train", 929_589), ("valid", 73_760), ("test", 82_430)])
def test_real_ptb(split, n):
    words = read_word_stream(SHARED_DATA / "ptb" / f"ptb.{split}.txt.gz", eos="<eos>")
    assert len(words) == n
    if split == "train":
        assert len(set(words)) == 10_000


@real
def test_real_word_similarity_and_analogy_files():
    questions = read_lines(SHARED_DATA / "word2vec_analogy" / "questions-words.txt")
    assert len(questions) == 19544 + 14 and sum(q.startswith(":") for q in questions) == 14
    simlex = read_lines(SHARED_DATA / "simlex999" / "SimLex-999.txt")  # CRLF endings
    assert len(simlex) == 1000 and not any(line.endswith("\r") for line in simlex)
    ws = read_lines(SHARED_DATA / "wordsim353" / "combined.tab")
    assert len(ws) == 354 and ws[1].split("\t") == ["love", "sex", "6.77"]


def test_a_configured_file_is_taken_as_given_else_under_the_data_folder(tmp_path, monkeypatch):
    from seqlab.data.readers import resolve_path

    data, here = tmp_path / "data", tmp_path / "here"
    (data / "sub").mkdir(parents=True)
    here.mkdir()
    monkeypatch.chdir(here)
    (data / "sub" / "a.txt").write_text("x\n", encoding="utf-8")
    assert resolve_path("sub/a.txt", data) == data / "sub" / "a.txt"  # only under the folder
    (here / "sub").mkdir()
    (here / "sub" / "a.txt").write_text("y\n", encoding="utf-8")
    assert resolve_path("sub/a.txt", data) == Path("sub/a.txt")  # as given wins
    assert resolve_path("nowhere.txt", data) == Path("nowhere.txt")  # the reader names it
    assert resolve_path(str(tmp_path / "abs.txt"), data) == tmp_path / "abs.txt"
    assert resolve_path("sub/b.txt", None) == Path("sub/b.txt")
