"""``seqlab embed train | eval | neighbours | tsne`` end to end on tiny files."""

import pytest
import torch

from seqlab.cli.main import main
from seqlab.data.embedding_corpus import planted_corpus
from seqlab.data.word_vectors_io import WordVectors, load_word2vec_text, save_word2vec_text

# The notes' feature table (Gender, Royal, Age, Food), as in tests/eval/test_word_vectors.py
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


def _planted_text(tmp_path):
    sentences, _ = planted_corpus(1000, seed=0)
    path = tmp_path / "planted.txt"
    path.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    return path


def _eval_data(tmp_path):
    root = tmp_path / "data"
    (root / "word2vec_analogy").mkdir(parents=True)
    (root / "simlex999").mkdir()
    (root / "wordsim353").mkdir()
    (root / "word2vec_analogy" / "questions-words.txt").write_text(
        ": family\nman woman king queen\ncat dog kitten puppy\n: gram1-x\nwoman man queen king\n"
    )
    # cosines: king·man 0.70 > king·queen 0.21 > apple·queen 0.01 > man·woman −0.99
    rows = [("king", "man", 9), ("king", "queen", 6), ("apple", "queen", 3), ("man", "woman", 1)]
    simlex = "word1\tword2\tPOS\tSimLex999\r\n" + "".join(
        f"{a}\t{b}\tN\t{s}\r\n" for a, b, s in [*rows, ("cat", "dog", 5)]
    )
    (root / "simlex999" / "SimLex-999.txt").write_bytes(simlex.encode())
    ws = "Word 1,Word 2,Human (mean)\r\n" + "".join(f"{a},{b},{10 - s}\r\n" for a, b, s in rows)
    (root / "wordsim353" / "combined.csv").write_bytes(ws.encode())
    return root


def test_train_ppmi_and_sgns_on_a_text_file(tmp_path, capsys):
    text = _planted_text(tmp_path)
    out = tmp_path / "ppmi.txt"
    assert (
        main(["embed", "train", "ppmi", "--text", str(text), "--out", str(out), "--dim", "8"]) == 0
    )
    wv = load_word2vec_text(out)
    assert (len(wv), wv.dim) == (26, 8)
    assert "ppmi: 26 words × 8 dims" in capsys.readouterr().out
    out2 = tmp_path / "sgns.txt"
    args = ["embed", "train", "sgns", "--text", str(text), "--out", str(out2), "--dim", "4"]
    assert main([*args, "--epochs", "1", "--min-count", "1", "--quiet"]) == 0
    assert load_word2vec_text(out2).dim == 4


@pytest.mark.parametrize(
    "method, t", [("sgns", "1e-4"), ("ppmi", "1e-4"), ("glove", "0"), ("glove", "1.5")]
)
def test_subsample_is_for_glove_with_a_threshold_below_one(tmp_path, capsys, method, t):
    text, out = _planted_text(tmp_path), tmp_path / "v.txt"
    args = ["embed", "train", method, "--text", str(text), "--out", str(out), "--subsample", t]
    assert main([*args, "--epochs", "1", "--quiet"]) == 2
    assert f"--subsample {float(t)}: subsampling before counting is for glove" in (
        capsys.readouterr().err
    )
    assert not out.exists()


def test_glove_trains_with_subsampling(tmp_path):
    text, out = _planted_text(tmp_path), tmp_path / "glove.txt"
    args = ["embed", "train", "glove", "--text", str(text), "--out", str(out), "--dim", "4"]
    assert main([*args, "--epochs", "1", "--min-count", "1", "--subsample", "1e-2"]) == 0
    assert load_word2vec_text(out).dim == 4


def test_eval_prints_the_table_with_coverage(tmp_path, capsys):
    vectors = tmp_path / "notes.txt"
    save_word2vec_text(NOTES, vectors)
    assert main(["embed", "eval", str(vectors), "--data-dir", str(_eval_data(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "| analogy (questions-words), all | 100.0% | 66.7% |" in out
    assert "| analogy, semantic | 100.0% |  |" in out
    assert "| SimLex-999 Spearman ρ | 1.000 | 80.0% |" in out
    assert "| WordSim-353 Spearman ρ | -1.000 | 100.0% |" in out
    assert "over all questions 66.7%" in out


def test_neighbours_and_tsne(tmp_path, capsys):
    vectors = tmp_path / "notes.txt"
    save_word2vec_text(NOTES, vectors)
    assert main(["embed", "neighbours", str(vectors), "King", "-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["man", "queen"]
    png = tmp_path / "map.png"
    args = ["embed", "tsne", str(vectors), "--words", "man", "woman", "king", "queen", "zebra"]
    assert main([*args, "--out", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "not in the vectors: zebra" in capsys.readouterr().out


def test_bad_vector_file_exits_2_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("2 3\nking 1 2 3\nqueen 1 2\n", encoding="utf-8")
    assert main(["embed", "neighbours", str(bad), "king"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: found 2 values, expected 3" in err
    assert main(["embed", "neighbours", str(tmp_path / "missing.txt"), "king"]) == 2


def test_a_preset_sets_the_method_and_flags_and_the_command_line_wins(tmp_path, capsys):
    text = _planted_text(tmp_path)
    preset = tmp_path / "mine.yaml"
    out = tmp_path / "from-preset.txt"
    preset.write_text(f"method: ppmi\ndim: 6\nwindow: 2\nout: {out}\n", encoding="utf-8")
    assert main(["embed", "train", str(preset), "--text", str(text)]) == 0
    assert load_word2vec_text(out).dim == 6 and "ppmi: 26 words × 6 dims" in capsys.readouterr().out
    assert main(["embed", "train", str(preset), "--text", str(text), "--dim", "4"]) == 0
    assert load_word2vec_text(out).dim == 4  # the flag wins over the preset
    bad = tmp_path / "bad.yaml"
    for body, message in [
        ("method: sgns\ndims: 6\n", "bad.yaml: unknown key 'dims'"),
        ("method: sgns\ndim: six\n", "bad.yaml: dim: expected int, got 'six'"),
        ("method: fasttext\n", "bad.yaml: method: expected one of sgns, glove, ppmi"),
    ]:
        bad.write_text(body, encoding="utf-8")
        assert main(["embed", "train", str(bad), "--text", str(text)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (message, err)
    assert main(["embed", "train", "word2vec", "--text", str(text)]) == 2
    assert "neither a method (sgns, glove, ppmi) nor a preset file" in capsys.readouterr().err


def test_the_shipped_presets_are_the_results_tables_settings():
    from benchmarks.embeddings import EPOCH_CAP
    from seqlab.cli.embed_cmds import METHODS
    from seqlab.cli.embed_presets import load_embed_preset

    for method in METHODS:
        p = load_embed_preset(f"embed/{method}", METHODS)
        assert p["method"] == method and p["dim"] == 100
        assert p.get("epochs", 1) == EPOCH_CAP[method]
        assert p.get("minutes", 6) == 6  # the table's --minutes 6 (PPMI-SVD is one-shot)
    assert load_embed_preset("embed/glove", METHODS)["glove_adagrad"] == "glove.c"
