"""Analogy and similarity evaluators on hand-made vectors with known answers."""

import math

import pytest
import torch

from seqlab.data.word_vectors_io import WordVectors
from seqlab.errors import DataError
from seqlab.eval.word_vectors import (
    analogy_accuracy,
    nearest_neighbours,
    read_analogies,
    read_word_pairs,
    similarity_spearman,
    three_cos_add,
    tsne_plot,
)

# The notes' feature table (003, "Word embeddings"): Gender, Royal, Age, Food.
NOTES = WordVectors(
    ["man", "woman", "king", "queen", "apple"],
    torch.tensor(
        [
            [-1.00, 0.01, 0.03, 0.09],
            [1.00, 0.02, 0.02, 0.01],
            [-0.95, 0.93, 0.70, 0.02],
            [0.97, 0.95, 0.69, 0.01],
            [0.00, -0.01, 0.03, 0.95],
        ]
    ),
)


def test_notes_man_woman_king_queen(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(
        ": family\nMan Woman King Queen\nWoman Man Queen King\nman woman prince princess\n"
        ": gram-test\nKing Queen Man Woman\nking man queen apple\n",
        encoding="utf-8",
    )
    questions = read_analogies(path)
    assert questions["family"][0] == ("man", "woman", "king", "queen")  # lower-cased
    result = analogy_accuracy(NOTES, questions)
    # family: 2 covered, both right (e_woman − e_man + e_king is closest to queen);
    # gram-test: both covered, the first right, the second (→ woman, not apple) wrong
    assert result.sections == {"family": (2, 2, 3), "gram-test": (1, 2, 2)}
    assert result.accuracy("semantic") == 1.0 and result.accuracy("syntactic") == 0.5
    assert result.accuracy("all") == pytest.approx(3 / 4)
    assert result.accuracy("all", of="total") == pytest.approx(3 / 5)
    assert result.coverage("all") == pytest.approx(4 / 5) and result.coverage("semantic") == 2 / 3


def test_three_cos_add_excludes_the_question_words():
    # b − a + c ≈ (−0.005, 1.0995) is nearest to c itself; c is excluded, so the answer is d
    E = torch.nn.functional.normalize(
        torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.3, 1.0], [-1.0, 0.0]]), dim=1
    )
    pred = three_cos_add(E, torch.tensor([0]), torch.tensor([1]), torch.tensor([2]))
    assert pred.tolist() == [3]
    scores = (E[1] - E[0] + E[2]) @ E.T
    assert int(scores.argmax()) == 2  # without the exclusion the answer would be c


def test_max_vocab_restricts_candidates_and_coverage():
    questions = {"family": [("man", "woman", "king", "queen")]}
    assert analogy_accuracy(NOTES, questions, max_vocab=3).sections == {"family": (0, 0, 1)}
    assert analogy_accuracy(NOTES, questions, max_vocab=4).sections == {"family": (1, 1, 1)}


def _angles(degrees: dict[str, float]) -> WordVectors:
    words = ["base", *degrees]
    rows = [[1.0, 0.0]] + [
        [math.cos(math.radians(a)), math.sin(math.radians(a))] for a in degrees.values()
    ]
    return WordVectors(words, torch.tensor(rows))


def test_spearman_with_tied_human_scores_by_hand():
    # cos(base, p_k) increases p1 < p2 < p3 < p4; human scores 1, 2, 2, 3 (a tie).
    # Ranks: x = (1, 2.5, 2.5, 4), y = (1, 2, 3, 4); ρ = Pearson(x, y) = 4.5 / √(4.5·5)
    wv = _angles({"p1": 80.0, "p2": 60.0, "p3": 40.0, "p4": 20.0})
    pairs = [("base", "p1", 1.0), ("base", "p2", 2.0), ("base", "p3", 2.0), ("base", "p4", 3.0)]
    result = similarity_spearman(wv, [*pairs, ("base", "unknown", 5.0)])
    assert result.rho == pytest.approx(4.5 / math.sqrt(4.5 * 5.0), abs=1e-12)
    assert (result.covered, result.total) == (4, 5) and result.coverage == 0.8
    reversed_scores = [(a, b, -s) for a, b, s in pairs if s != 2.0]
    assert similarity_spearman(wv, reversed_scores).rho == pytest.approx(-1.0, abs=1e-12)


def test_read_word_pairs_simlex_and_wordsim_formats(tmp_path):
    simlex = tmp_path / "SimLex-999.txt"
    simlex.write_bytes(b"word1\tword2\tPOS\tSimLex999\tconc(w1)\r\nold\tnew\tA\t1.58\t2.72\r\n")
    assert read_word_pairs(simlex) == [("old", "new", 1.58)]
    ws = tmp_path / "combined.csv"
    ws.write_bytes(b"Word 1,Word 2,Human (mean)\r\nLove,sex,6.77\r\ntiger,cat,7.35\r\n")
    assert read_word_pairs(ws) == [("love", "sex", 6.77), ("tiger", "cat", 7.35)]
    bad = tmp_path / "bad.csv"
    bad.write_text("Word 1,Word 2,Human (mean)\nlove,sex,6.77\ntiger,cat,high\n")
    with pytest.raises(DataError, match="'high' is not a number") as info:
        read_word_pairs(bad)
    assert info.value.line == 3


def test_malformed_analogy_line_names_the_line(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(": family\nman woman king\n", encoding="utf-8")
    with pytest.raises(DataError, match="3 words, expected 4") as info:
        read_analogies(path)
    assert info.value.line == 2


def test_nearest_neighbours_by_cosine():
    wv = _angles({"a10": 10.0, "a30": 30.0, "a90": 90.0, "a170": 170.0})
    got = nearest_neighbours(wv, "base", k=3)
    assert [w for w, _ in got] == ["a10", "a30", "a90"]
    assert got[0][1] == pytest.approx(math.cos(math.radians(10.0)), abs=1e-6)
    with pytest.raises(DataError, match="not in the vectors"):
        nearest_neighbours(wv, "zebra")


def test_tsne_writes_a_png(tmp_path):
    g = torch.Generator().manual_seed(0)
    wv = WordVectors([f"w{i}" for i in range(8)], torch.randn(8, 6, generator=g))
    out = tmp_path / "map.png"
    plotted = tsne_plot(wv, ["w0", "w1", "w2", "w3", "w4", "w5", "nope"], out)
    assert plotted == ["w0", "w1", "w2", "w3", "w4", "w5"]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tsne_colours_groups_and_refuses_a_label_count_that_does_not_match(tmp_path, monkeypatch):
    import matplotlib.axes

    g = torch.Generator().manual_seed(0)
    wv = WordVectors([f"w{i}" for i in range(8)], torch.randn(8, 6, generator=g))
    words, groups = ["w0", "w1", "w2", "nope", "w4", "w5"], ["a", "a", "b", "b", "c", "c"]
    labels = []
    real = matplotlib.axes.Axes.scatter
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "scatter",
        lambda self, x, y, **kw: labels.append((kw.get("label"), len(x))) or real(self, x, y, **kw),
    )
    assert tsne_plot(wv, words, tmp_path / "map.png", groups=groups) == [
        w for w in words if w != "nope"
    ]
    assert labels == [("a", 2), ("b", 1), ("c", 2)]  # one scatter (colour, legend entry) a group
    with pytest.raises(ValueError, match="groups has 2 labels for 6 words"):
        tsne_plot(wv, words, tmp_path / "x.png", groups=["a", "b"])
