"""benchmarks/embeddings.py's t-SNE maps: one PNG per method, linked from the section
relative to the results file, with the number of words it could place."""

from __future__ import annotations

import torch

from benchmarks.embeddings import TSNE_WORDS, Row, add_tsne_map, render_section
from seqlab.data.word_vectors_io import WordVectors

SCORES = {
    "analogy_acc": 0.05,
    "analogy_sem_acc": 0.06,
    "analogy_syn_acc": 0.04,
    "analogy_coverage": 0.3,
    "simlex_rho": 0.1,
    "simlex_coverage": 0.8,
    "ws353_rho": 0.3,
    "ws353_coverage": 0.75,
}


def _row(method: str) -> Row:
    return Row(method, 1.0, 0.1, dict(SCORES), {})


def test_the_probe_words_are_seven_distinct_groups_of_five():
    assert len(TSNE_WORDS) == 35 and len(set(TSNE_WORDS)) == 35


def test_each_map_is_written_and_linked_relative_to_the_results_file(tmp_path):
    words = [w for w in TSNE_WORDS if w != "cow"] + ["the"]  # one probe word missing
    vectors = WordVectors(
        words, torch.randn(len(words), 8, generator=torch.Generator().manual_seed(0))
    )
    rows = [_row(m) for m in ("sgns", "ppmi")]
    figures = tmp_path / "docs" / "figures"
    add_tsne_map(rows[0], vectors, figures)
    section = render_section(rows, "python benchmarks/embeddings.py", 1.0, 8, tmp_path / "docs")
    png = figures / "embeddings-tsne-sgns.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rows[0].figure_words == 34
    link = "(figures/embeddings-tsne-sgns.png)"
    assert f"![t-SNE of Skip-gram, negative sampling vectors, 34 words]{link}" in section
    assert "embeddings-tsne-ppmi" not in section  # no map, no link


def test_no_maps_no_figure_paragraph():
    section = render_section([_row("ppmi")], "cmd", 1.0, 8)
    assert "t-SNE" not in section
