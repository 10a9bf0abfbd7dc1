"""Word-embedding benchmark: SGNS, GloVe and PPMI-SVD on PTB + Multi30k en + MR.

    python benchmarks/embeddings.py [--methods sgns,glove,ppmi] [--minutes 10] [--dim 100]
        [--data-dir DIR] [--out docs/results.md] [--vectors-dir runs/embeddings]
        [--glove-adagrad {paper,glove.c}] [--figures-dir docs/figures]

Each method trains on the same corpus (``seqlab.data.embedding_corpus``, min count 5)
for at most ``--minutes`` of wall-clock time (PPMI-SVD is one-shot), its vectors go to
``<vectors-dir>/<method>.txt`` (word2vec text format), and it is scored on questions-words
(3CosAdd, accuracy over covered questions; coverage), SimLex-999 and WordSim-353
(Spearman ρ; coverage). The table and nearest neighbours of a few probe words go to
stdout and replace the section ``## Word embeddings`` of ``--out`` (other sections kept).
A t-SNE map of ``TSNE_WORDS`` (seven groups of five words, a colour each) per method goes
to ``<figures-dir>/embeddings-tsne-<method>.png`` and is linked from the section.
Target (issue 5): skip-gram and GloVe each beat PPMI-SVD on WordSim-353 ρ.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from seqlab import api
from seqlab.cli.embed_cmds import METHODS, train_vectors
from seqlab.data.word_vectors_io import WordVectors, save_word2vec_text
from seqlab.eval.word_vectors import evaluate_standard, nearest_neighbours, tsne_plot

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the sibling benchmark importable
    sys.path.insert(0, str(ROOT))
from benchmarks.results_doc import machine_description, write_section  # noqa: E402

HEADING = "## Word embeddings"
LABELS = {"sgns": "Skip-gram, negative sampling", "glove": "GloVe", "ppmi": "PPMI-SVD"}
EPOCH_CAP = {"sgns": 40, "glove": 200, "ppmi": 1}  # the time budget is meant to stop first
PROBES = ("money", "city", "good", "dog", "president")
# Seven groups of five words, all frequent in the corpus, for the t-SNE maps: a method
# whose vectors carry meaning puts each group together.
TSNE_GROUPS = {
    "numbers": ("one", "two", "three", "four", "five"),
    "people": ("man", "woman", "boy", "girl", "child"),
    "animals": ("dog", "horse", "cat", "bird", "cow"),
    "colours": ("red", "blue", "green", "white", "black"),
    "finance": ("money", "bank", "stock", "market", "price"),
    "motion": ("run", "walk", "jump", "ride", "climb"),
    "judgements": ("good", "bad", "great", "funny", "boring"),
}
TSNE_WORDS = tuple(w for ws in TSNE_GROUPS.values() for w in ws)


@dataclass
class Row:
    method: str
    epochs: float
    minutes: float
    scores: dict[str, float]
    neighbours: dict[str, list[str]]
    figure: Path | None = None  # the t-SNE PNG
    figure_words: int = 0  # how many of TSNE_WORDS it shows


def run_method(
    method: str,
    minutes: float,
    dim: int,
    data_dir: str | None,
    vectors_dir: Path,
    seed: int,
    glove_adagrad: str = "paper",
    figures_dir: Path | None = None,
) -> Row:
    def log(line: str) -> None:
        print(f"[{method}] {line}", flush=True)

    run = train_vectors(
        method,
        data_dir=data_dir,
        dim=dim,
        epochs=EPOCH_CAP[method],
        minutes=minutes,
        seed=seed,
        log=log,
        glove_adagrad=glove_adagrad,
    )
    save_word2vec_text(run.vectors, vectors_dir / f"{method}.txt")
    scores = evaluate_standard(run.vectors, data_dir or api.default_data_dir())
    neighbours = {
        w: [n for n, _ in nearest_neighbours(run.vectors, w, 5)] for w in PROBES if w in run.vectors
    }
    row = Row(method, run.epochs, run.seconds / 60.0, scores, neighbours)
    if figures_dir is not None:
        add_tsne_map(row, run.vectors, figures_dir, seed)
    return row


def add_tsne_map(row: Row, vectors: WordVectors, figures_dir: Path, seed: int = 0) -> None:
    """Write the t-SNE map of ``TSNE_WORDS`` for ``row``'s method and record it in ``row``."""
    row.figure = figures_dir / f"embeddings-tsne-{row.method}.png"
    groups = [g for g, ws in TSNE_GROUPS.items() for _ in ws]
    row.figure_words = len(
        tsne_plot(vectors, list(TSNE_WORDS), row.figure, seed=seed, groups=groups)
    )


def format_figures(rows: list[Row], out_dir: Path) -> list[str]:
    """Markdown image lines, linked relative to ``out_dir``, for the rows with a t-SNE map."""
    return [
        f"![t-SNE of {LABELS[r.method]} vectors, {r.figure_words} words]"
        f"({Path(os.path.relpath(r.figure, out_dir)).as_posix()})"
        for r in rows
        if r.figure is not None
    ]


def format_table(rows: list[Row]) -> str:
    baseline = next((r.scores["ws353_rho"] for r in rows if r.method == "ppmi"), None)
    head = (
        "| method | epochs | train min | analogy all | semantic | syntactic | analogy coverage "
        "| SimLex-999 ρ (cov.) | WordSim-353 ρ (cov.) | target: WS ρ > PPMI-SVD | met |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        s = r.scores
        if r.method == "ppmi":
            target, met = "baseline", "—"
        else:
            target = "—" if baseline is None else f"> {baseline:.3f}"
            met = "—" if baseline is None else ("yes" if s["ws353_rho"] > baseline else "**no**")
        lines.append(
            f"| {LABELS[r.method]} (`{r.method}`) | {r.epochs:.2f} | {r.minutes:.1f} "
            f"| {100 * s['analogy_acc']:.1f}% | {100 * s['analogy_sem_acc']:.1f}% "
            f"| {100 * s['analogy_syn_acc']:.1f}% | {100 * s['analogy_coverage']:.1f}% "
            f"| {s['simlex_rho']:.3f} ({100 * s['simlex_coverage']:.0f}%) "
            f"| {s['ws353_rho']:.3f} ({100 * s['ws353_coverage']:.0f}%) | {target} | {met} |"
        )
    return "\n".join(lines)


def format_neighbours(rows: list[Row]) -> str:
    lines = ["| word | " + " | ".join(f"`{r.method}`" for r in rows) + " |"]
    lines.append("|---|" + "---|" * len(rows))
    for w in PROBES:
        cells = [", ".join(r.neighbours.get(w, ["(not in vocabulary)"])) for r in rows]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_section(
    rows: list[Row], command: str, minutes: float, dim: int, out_dir: Path = Path("docs")
) -> str:
    machine = machine_description()
    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {machine}. Date: {datetime.date.today().isoformat()}. Budget: "
            f"{minutes:g} min of training per method, dimension {dim}. Corpus: PTB train + "
            "Multi30k en train + MR (lower-cased, min count 5; docs/embeddings.md).",
            "",
            format_table(rows),
            "",
            "Analogy accuracy is over the covered questions (all four words in the "
            "vocabulary), 3CosAdd excluding the question words; the small corpus covers "
            "few of them and accuracy is low (REFERENCES.md §6: 23% for CBOW-300 at 24M "
            "words on an easier subset). ρ is Spearman over covered pairs.",
            "",
            "Nearest neighbours (cosine):",
            "",
            format_neighbours(rows),
            *(
                [
                    "",
                    "t-SNE maps (scikit-learn `TSNE`, cosine metric, perplexity "
                    "min(30, (n − 1) / 3), initialised by PCA) of seven groups of five "
                    "words: numbers, people, animals, colours, finance, motion verbs, judgements "
                    "(`benchmarks/embeddings.py` `TSNE_WORDS`):",
                    "",
                    *format_figures(rows, out_dir),
                ]
                if any(r.figure is not None for r in rows)
                else []
            ),
        ]
    )


def main(argv: list[str] | None = None) -> list[Row]:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="benchmarks/embeddings.py", description=__doc__.split("\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--minutes", type=float, default=10.0, help="training budget per method")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--data-dir", default=None, help="data folder (default: ../shared/data)")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    p.add_argument("--vectors-dir", default="runs/embeddings")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--glove-adagrad", choices=("paper", "glove.c"), default="paper")
    p.add_argument(
        "--figures-dir", default=None, help="t-SNE PNGs (default: figures/ beside --out)"
    )
    args = p.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            p.error(f"unknown method {m!r} (choose from {', '.join(METHODS)})")
    rows = [
        run_method(
            m,
            args.minutes,
            args.dim,
            args.data_dir,
            Path(args.vectors_dir),
            args.seed,
            args.glove_adagrad,
            Path(args.figures_dir) if args.figures_dir else Path(args.out).parent / "figures",
        )
        for m in methods
    ]
    section = render_section(
        rows,
        shlex.join(["python", "benchmarks/embeddings.py", *argv]),
        args.minutes,
        args.dim,
        Path(args.out).parent,
    )
    print(format_table(rows))
    print()
    print(format_neighbours(rows))
    write_section(Path(args.out), section, HEADING)
    print(f"wrote {args.out} ({HEADING[3:]})")
    return rows


if __name__ == "__main__":
    main()
