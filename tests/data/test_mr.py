"""MR / label-TSV / contrast-set readers and the seeded stratified k-fold protocol."""

from pathlib import Path

import numpy as np
import pytest

from seqlab.data.mr import (
    cv_split,
    kfold,
    locate_mr,
    read_contrast_set,
    read_label_tsv,
    read_mr,
)
from seqlab.errors import DataError

ROOT = Path(__file__).resolve().parents[2]


def write_mr(folder: Path, pos: bytes, neg: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rt-polarity.pos").write_bytes(pos)
    (folder / "rt-polarity.neg").write_bytes(neg)
    return folder


def test_read_mr_decodes_cp1252_and_labels(tmp_path):
    folder = write_mr(
        tmp_path / "mr_polarity",
        b"a gem \x97 truly \x85 \n caf\xe9 society \n",
        b"dull \x91flat\x92 \n",
    )
    assert locate_mr(tmp_path) == folder
    assert locate_mr(folder) == folder
    assert read_mr(folder) == [
        ("a gem — truly …", "pos"),
        (" café society", "pos"),
        ("dull ‘flat’", "neg"),
    ]


@pytest.mark.parametrize(
    ("neg", "line", "what"),
    [
        (b"fine\nbad \x81 byte\n", 2, "invalid cp1252 byte 0x81"),
        (b"fine\n\nafter\n", 2, "empty line"),
    ],
)
def test_read_mr_rejects_bad_bytes_and_empty_lines_with_file_and_line(tmp_path, neg, line, what):
    folder = write_mr(tmp_path, b"good\n", neg)
    with pytest.raises(DataError) as err:
        read_mr(folder)
    assert str(err.value).startswith(f"{folder / 'rt-polarity.neg'}:{line}: ")
    assert what in str(err.value)


def test_locate_mr_says_where_to_look(tmp_path):
    with pytest.raises(DataError, match="rt-polarity.pos"):
        locate_mr(tmp_path)
    with pytest.raises(DataError, match="--data-dir"):
        locate_mr(None)


@pytest.mark.parametrize("labels", [["a"] * 23 + ["b"] * 17, ["x", "y", "z"] * 9 + ["x"] * 4])
@pytest.mark.parametrize("k", [2, 3, 10])
def test_kfold_disjoint_covering_stratified_balanced(labels, k):
    folds = kfold(labels, k, seed=3)
    assert len(folds) == k
    everything = np.concatenate(folds)
    assert sorted(everything.tolist()) == list(range(len(labels)))  # disjoint and covering
    sizes = [len(f) for f in folds]
    assert max(sizes) - min(sizes) <= 1
    y = np.array(labels)
    for c in set(labels):
        per_fold = [int((y[f] == c).sum()) for f in folds]
        assert max(per_fold) - min(per_fold) <= 1, (c, per_fold)
    for f in folds:
        assert (np.diff(f) > 0).all()


def test_kfold_is_deterministic_by_seed():
    labels = ["pos"] * 50 + ["neg"] * 50
    a, b, c = kfold(labels, 10, 0), kfold(labels, 10, 0), kfold(labels, 10, 1)
    assert all((x == y).all() for x, y in zip(a, b))
    assert any(len(x) != len(z) or (x != z).any() for x, z in zip(a, c))


def test_kfold_rejects_too_few_examples():
    with pytest.raises(DataError, match="cannot fill"):
        kfold(["a", "b"], 3)
    with pytest.raises(ValueError, match="n_folds"):
        kfold(["a", "b"], 1)


def test_cv_split_test_is_the_fold_and_valid_is_stratified():
    labels = ["pos"] * 60 + ["neg"] * 40
    parts = cv_split(labels, fold=4, n_folds=10, seed=7, valid_fraction=0.1)
    assert (parts["test"] == kfold(labels, 10, 7)[4]).all()
    joined = np.concatenate([parts["train"], parts["valid"], parts["test"]])
    assert sorted(joined.tolist()) == list(range(100))
    y = np.array(labels)
    # 90 non-test examples: 54 pos + 36 neg → round(5.4) = 5 and round(3.6) = 4 held out
    assert (y[parts["valid"]] == "pos").sum() == 5 and (y[parts["valid"]] == "neg").sum() == 4
    again = cv_split(labels, fold=4, n_folds=10, seed=7, valid_fraction=0.1)
    assert all((parts[k] == again[k]).all() for k in parts)


def test_read_label_tsv_and_its_errors(tmp_path):
    good = tmp_path / "good.tsv"
    good.write_text("pos\tgreat film\nneg\tnot good\n", encoding="utf-8")
    assert read_label_tsv(good) == [("great film", "pos"), ("not good", "neg")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("pos\tok\nneg no tab here\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.tsv:2: found 1 TAB-separated fields"):
        read_label_tsv(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("pos\tok\n\tno label\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"empty\.tsv:2: label is empty"):
        read_label_tsv(empty)


def test_the_shipped_contrast_set():
    items = read_contrast_set(ROOT / "data" / "contrast" / "sentiment.tsv")
    assert len(items) >= 40
    assert {i.label for i in items} == {"pos", "neg"}
    texts = {i.text.lower() for i in items}
    assert "completely lacking in good taste, good service, and good ambience." in texts
    phenomena = {i.phenomenon for i in items}
    assert {"negation", "contrast", "intensifier"} <= phenomena
    assert len(texts) == len(items)  # no duplicates
