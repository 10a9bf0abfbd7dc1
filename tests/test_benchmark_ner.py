"""benchmarks/ner.py's section says which word embeddings the command used."""

from benchmarks import ner as bench


def test_the_section_names_the_embeddings_the_command_set():
    plain = "python benchmarks/ner.py --minutes 10 train.threads=1"
    assert bench.embeddings_note(plain) == "Random word embeddings (no external vectors)."
    vecs = f"{plain} task.embeddings_path=runs/embeddings/sgns.txt"
    assert "`runs/embeddings/sgns.txt`" in bench.embeddings_note(vecs)
    assert "Random" not in bench.embeddings_note(vecs)
    assert "vocabulary" not in bench.embeddings_note(vecs)
    assert "join the vocabulary" in bench.embeddings_note(f"{vecs} task.embeddings_vocab=extend")
